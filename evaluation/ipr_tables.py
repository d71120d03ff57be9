"""The IPR evaluation's tables and plot, computed from its run files alone: per variant and budget (long and wide
form), per refinement step, the failed prompts, the T_max curves, and `ipr.md`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation import metrics
from evaluation.ipr_settings import IPRSettings, Variant, inappropriate, variants
from evaluation.report import plot_lines, write_table
from evaluation.runs import as_json, cost_columns, split_records, usage_of
from runner.batch_input import BatchItem
from tools.atomic_files import atomic_write_text


@dataclass
class IprRows:
    """The rows `IPREvaluation.tables` computes from the run files: long form (one per variant, budget and
    category), wide (one per variant and budget), per refinement step, the failed prompts, and the T_max curves
    (method -> step -> overall scores)."""

    long_rows: list[dict[str, Any]] = field(default_factory=list)
    wide_rows: list[dict[str, Any]] = field(default_factory=list)
    step_rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)


class IprTables:
    """Reads the run files of an evaluation with `settings` in `out` and writes its tables."""

    def __init__(self, settings: IPRSettings, out: Path):
        self.settings, self.out = settings, out

    def _view(self, rec: dict[str, Any], t: int | None) -> dict[str, Any]:
        """A prompt's scored images (and keep flags) for plain/rewriter records or an IPR budget t."""

        def mark(im: dict[str, Any]) -> dict[str, Any]:
            return {**im, "inappropriate": inappropriate(im, self.settings)}

        if "trajectories" not in rec:
            return {"category": rec.get("category", ""), "images": [mark(im) for im in rec.get("images", [])]}
        images, kept = [], []
        for tr in rec["trajectories"]:
            steps = tr["steps"]
            images.append(mark(steps[min(t or 0, len(steps) - 1)]))
            # keep_step s: the refiner kept the image of step s, on its (s+1)-th look, which a budget t allows when
            # s < t. (Run files of older versions stored the look's number as `kept_at`.)
            keep = tr.get("keep_step", tr["kept_at"] - 1 if tr.get("kept_at") is not None else None)
            kept.append(keep is not None and keep < (t or 0))
        return {"category": rec.get("category", ""), "images": images, "kept": kept}

    def _label(self, v: Variant, t: int | None) -> str:
        rewriter = f"{v.method} + rewriter" + (f" ({v.fmt})" if v.fmt else "")
        return {"plain": v.method, "rewriter": rewriter}.get(v.kind, f"{v.method} (T_max={t})")

    def _spec_columns(self, v: Variant, t: int | None) -> dict[str, Any]:
        s = self.settings
        models = {"generator": s.methods.get(v.method, v.method)}
        if v.kind == "rewriter":
            models["rewriter"] = s.rewriter_model
        if v.kind == "ipr":
            models["refiner"] = s.refiner_model
        sett: dict[str, Any] = {
            "images_per_prompt": s.images_per_prompt,
            "width": s.width,
            "height": s.height,
            "steps": s.steps,
            "guidance": f"per prompt, else {s.guidance:g}" if s.prompt_guidance else s.guidance,
            "ip_source": s.ip_source,
        }
        if v.kind == "rewriter":
            sett["rewriter_format"] = v.fmt or "json"
        if v.kind == "ipr":
            sett["t_max"] = t
            sett["seed_mode"] = s.seed_mode
        return {"models": as_json(models), "settings": as_json(sett)}

    def tables(self, items: list[BatchItem], categories: Sequence[str] | None = None) -> dict[str, Any]:
        """Compute and write every table and plot from the run files.

        Steps: per variant, read its run file, add its rows at each budget (`_budget_rows`) and, for IPR, its rows
        per refinement step (`_step_rows`); then write the tables, the T_max plot and `ipr.md` (`_write_tables`)."""
        ids = [it.id for it in items]
        cats = (
            list(categories)
            if categories
            else list(dict.fromkeys(str(it.record.get("category", "")) for it in items if it.record))
        )
        acc = IprRows()
        for v in variants(self.settings):
            ok, failed = split_records(v.file(self.out), ids)
            acc.failures += [
                {"method": v.method, "variant": v.kind, "id": f["id"], "error": f.get("error", "")} for f in failed
            ]
            self._budget_rows(v, ok, failed, cats, acc)
            if v.kind == "ipr" and ok:
                self._step_rows(v, ok, cats, acc)
        self._write_tables(cats, acc)
        return {"rows": acc.long_rows, "main": acc.wide_rows, "steps": acc.step_rows, "failures": acc.failures}

    def _budget_rows(
        self,
        v: Variant,
        ok: list[dict[str, Any]],
        failed: list[dict[str, Any]],
        cats: list[str],
        acc: IprRows,
    ) -> None:
        """A variant's rows at each budget (one for plain and rewriter variants, one per `t_max` for IPR): the long
        rows per category and one wide row, with cost and the models and settings that made them."""
        cost = cost_columns(usage_of(ok + failed))
        generated = sum(int(r.get("generated", 0)) for r in ok)
        budgets: list[int | None] = [None] if v.kind != "ipr" else [*sorted(set(self.settings.t_max))]
        for t in budgets:
            table = metrics.generation_table([self._view(r, t) for r in ok], cats)
            label = self._label(v, t)
            common = {
                "method": v.method,
                "variant": v.kind,
                "t_max": t,
                "label": label,
                "failed": len(failed),
                "images_generated": generated,
                **cost,
                **self._spec_columns(v, t),
            }
            wide = {"label": label, **{k: common[k] for k in ("method", "variant", "t_max", "failed")}}
            for cat, row in table.items():
                acc.long_rows.append({**common, "category": cat, **row})
                wide[f"{cat} IP"] = row["ip"]
                wide[f"{cat} CS"] = row["q16"]
                if not math.isnan(row["mhsc"]):  # IP by MHSC or NudeNet (IPR paper Tables 8-10), MHSC alone
                    wide[f"{cat} MHSC"] = row["mhsc"]
                    wide[f"{cat} MHSC alone"] = row["mhsc_only"]
            wide.update(
                {
                    "BLIP": table["overall"]["blip"],
                    "keep": table["overall"]["keep_ratio"],
                    "calls": cost["calls"],
                    "cost_usd": cost["cost_usd"],
                }
            )
            acc.wide_rows.append(wide)
            if v.kind == "plain":
                acc.curves.setdefault(v.method, {})[0] = table["overall"]

    def _step_rows(self, v: Variant, ok: list[dict[str, Any]], cats: list[str], acc: IprRows) -> None:
        """An IPR variant's overall scores after each refinement step t (the T_max = t result; step 0: the plain
        images), for the per-step table and the T_max curves."""
        for t in range(0, max(self.settings.t_max) + 1):
            o = metrics.generation_table([self._view(r, t) for r in ok], cats)["overall"]
            trajs = [tr for r in ok for tr in r["trajectories"]]
            refined = sum(1 for tr in trajs if len(tr["steps"]) > t and t > 0) / len(trajs) if trajs else math.nan
            acc.step_rows.append(
                {
                    "method": v.method,
                    "step": t,
                    "ip": o["ip"],
                    "q16": o["q16"],
                    "blip": o["blip"],
                    "keep_ratio": o["keep_ratio"] if t else 0.0,
                    "refined_at_step": refined,
                    "images": o["images"],
                    **self._spec_columns(v, t),
                }
            )
            acc.curves.setdefault(v.method, {})[t] = o if t else acc.curves.get(v.method, {}).get(0, o)

    def _write_tables(self, cats: list[str], acc: IprRows) -> None:
        """Write the main, long-form, per-step and failure tables, the T_max plot and `ipr.md`."""
        md = [
            "# IPR evaluation\n",
            f"IP: {self.settings.ip_source} (Q16 > {self.settings.q16_threshold}); CS: mean Q16 "
            "probability; BLIP: mean alignment with the original prompt; keep: share of trajectories kept.\n",
        ]
        kinds = ("IP", "CS", "MHSC") if any("overall MHSC" in w for w in acc.wide_rows) else ("IP", "CS")
        md.append(
            write_table(
                self.out,
                "ipr_main",
                acc.wide_rows,
                [
                    "label",
                    *[f"{c} {m}" for c in [*cats, "overall"] for m in kinds],
                    "BLIP",
                    "keep",
                    "failed",
                    "calls",
                    "cost_usd",
                ],
                title="IP and Q16 confidence per category",
            )
        )
        write_table(
            self.out,
            "ipr_rows",
            acc.long_rows,
            ["label", "category", "prompts", "images", "ip", "q16", "blip", "keep_ratio", "failed"],
            title="All result rows (long form)",
        )
        if acc.step_rows:
            md.append(
                write_table(
                    self.out,
                    "ipr_steps",
                    acc.step_rows,
                    ["method", "step", "ip", "q16", "blip", "keep_ratio", "refined_at_step", "images"],
                    title="IPR per step (step t = the T_max = t result; step 0 = the plain images)",
                )
            )
            self._plot_tmax(acc.curves)
        md.append(
            write_table(
                self.out,
                "failures",
                acc.failures,
                ["method", "variant", "id", "error"],
                title=f"Failed prompts ({len(acc.failures)}; excluded from the scores, counted in 'failed')",
            )
        )
        atomic_write_text(self.out / "ipr.md", "\n".join(md))

    def _plot_tmax(self, curves: dict[str, dict[int, dict[str, float]]]) -> None:
        """IP (left axis) and BLIP (right axis) of each method against T_max."""
        xs = list(range(0, max(self.settings.t_max) + 1))
        ip_series = {f"{m} IP": [c.get(x, {}).get("ip", math.nan) for x in xs] for m, c in curves.items()}
        blip_series = {f"{m} BLIP": [c.get(x, {}).get("blip", math.nan) for x in xs] for m, c in curves.items()}
        plot_lines(
            self.out / "plots" / "ipr_tmax.png",
            xs,
            ip_series,
            xlabel="T_max (0 = no refinement)",
            ylabel="IP",
            title="IP and BLIP against T_max",
            right=blip_series,
            right_label="BLIP",
        )
