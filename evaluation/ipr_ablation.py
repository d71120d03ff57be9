"""The IPR paper's keep-incentive ablation: Table 4 (IP and Q16 confidence per category for refiners trained with
keep bonus α = 0.1, 0.3, 0.5, at each step budget T_max) and Figure 6 (the keep ratio against T_max, one line per α).

`unveil evaluate ipr-ablation` trains one GRPO refiner per α and runs one IPR evaluation per α
(`evaluation.ipr.IPREvaluation`, every α on the same prompts, seeds and stored images); this module turns those
evaluations' rows into the table and the figure. Each α's own full report (per step, failures, the T_max plot)
stays in its folder `alpha-<α>/`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.report import plot_lines, write_table
from tools.atomic_files import atomic_write_text

KEEP_PLOT = Path("plots") / "ablation_keep_ratio.png"


def alpha_name(alpha: float) -> str:
    """How an α names its folders and labels: `0.3`, not `0.30000000000000004`."""
    return f"{alpha:g}"


def ablation_rows(results: Mapping[float, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Table 4's rows: the IPR rows (one per method and T_max) of each α's evaluation (`IPREvaluation.tables`'s
    `main`), labelled `IPR (T_max=t, α=a) + METHOD` and ordered as the paper's table (α, then T_max)."""
    rows = []
    for alpha in sorted(results):
        for wide in results[alpha]["main"]:
            if wide.get("variant") != "ipr":
                continue
            label = f"IPR (T_max={wide['t_max']}, α={alpha_name(alpha)}) + {wide['method']}"
            rows.append({**wide, "alpha": alpha, "label": label})
    return sorted(rows, key=lambda r: (r["alpha"], str(r["method"]), int(r["t_max"])))


def categories_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The categories of the rows' `<category> IP` columns, in first-seen order, `overall` last."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update({k[: -len(" IP")]: None for k in row if k.endswith(" IP") and k != "overall IP"})
    return [*seen, "overall"]


def keep_rows(rows: Sequence[Mapping[str, Any]], t_max: Sequence[int]) -> list[dict[str, Any]]:
    """Figure 6's numbers: per α and method, the keep ratio (share of trajectories whose refiner kept an image
    within the budget) at each T_max."""
    out: dict[tuple[float, str], dict[str, Any]] = {}
    for row in rows:
        key = (float(row["alpha"]), str(row["method"]))
        entry = out.setdefault(key, {"alpha": key[0], "method": key[1]})
        entry[f"T_max={row['t_max']}"] = row.get("keep", math.nan)
    for entry in out.values():
        for t in t_max:
            entry.setdefault(f"T_max={t}", math.nan)
    return list(out.values())


def plot_keep(path: Path, keep: Sequence[Mapping[str, Any]], t_max: Sequence[int]) -> None:
    """Figure 6: the keep ratio against T_max, one line per α (and method, when several)."""
    methods = {str(e["method"]) for e in keep}
    series = {
        f"α={alpha_name(float(e['alpha']))}" + (f" {e['method']}" if len(methods) > 1 else ""): [
            float(e.get(f"T_max={t}", math.nan)) for t in t_max
        ]
        for e in keep
    }
    plot_lines(
        path,
        list(t_max),
        series,
        xlabel="T_max",
        ylabel="keep ratio",
        title="Keep ratio against T_max for each keep bonus α (IPR paper Figure 6)",
    )


def write_ablation(results: Mapping[float, Mapping[str, Any]], out_dir: str | Path, t_max: Sequence[int]) -> str:
    """Write Table 4 (`ablation_table4.{md,csv}`), Figure 6's numbers (`ablation_keep.{md,csv}`) and plot
    (`plots/ablation_keep_ratio.png`) and `ablation.md` (both tables) into `out_dir`; returns the Markdown."""
    out = Path(out_dir)
    budgets = sorted(set(t_max))
    rows = ablation_rows(results)
    cats = categories_of(rows)
    keep = keep_rows(rows, budgets)
    md = [
        "# IPR keep-incentive ablation (IPR paper Table 4, Figure 6)\n",
        "One GRPO refiner per keep bonus α, each evaluated with IPR at every T_max on the same prompts and seeds. "
        "IP: share of inappropriate images; CS: mean Q16 probability; keep: share of trajectories whose refiner "
        "kept an image within the budget. Each α's full report is in `alpha-<α>/ipr.md`.\n",
        write_table(
            out,
            "ablation_table4",
            rows,
            ["label", *[f"{c} {m}" for c in cats for m in ("IP", "CS")], "BLIP", "keep", "failed"],
            title="Table 4: IP and Q16 confidence (CS) per category, per keep bonus α and T_max",
        ),
        write_table(
            out,
            "ablation_keep",
            keep,
            ["alpha", "method", *[f"T_max={t}" for t in budgets]],
            title=f"Figure 6: keep ratio against T_max ({KEEP_PLOT.as_posix()})",
        ),
    ]
    if keep:
        plot_keep(out / KEEP_PLOT, keep, budgets)
    text = "\n".join(md)
    atomic_write_text(out / "ablation.md", text)
    return text
