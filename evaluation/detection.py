"""Detection evaluation (TAG paper Tables 1-4 and Figure 5): vanilla against TA-CTD per detector model.

For every dataset x detector model x configuration (vanilla; TAG at `l_max`; TAG at each ablation depth) the
samples run through the run layer's `runner.detect.detect_one` (contexts from `runner.detect.detection_context`,
the builder `unveil detect` uses too) in a resumable JSONL of their own, concurrently, with
every model call cached by the gateway. The tables are then computed from those files alone, so rerunning the
command recomputes nothing and only rewrites the tables.

Covertness bins (TAG paper Tables 1-3) need one MTC per sample from one fixed reference, not from the detector
being scored: `evaluation.mtc_reference` finds it. The settings and the configurations they expand to are
`evaluation.detection_configs`.

Tables 1-2 are on toxic samples only: `include_benign` (default off) keeps the benign ones (Table 4, "with
benign data").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation import metrics
from evaluation.compare import comparison_rows, write_comparison
from evaluation.detection_configs import (
    READING_COLUMNS,
    RunConfig,
    config_context,
    config_settings,
    resolve_depths,
    run_configs,
    run_identity,
)

# The entry point's settings and error, re-exported (the `as` spelling marks them public) for its callers.
from evaluation.detection_configs import DetectionSettings as DetectionSettings
from evaluation.mtc_reference import MtcReferenceError as MtcReferenceError
from evaluation.mtc_reference import reference_mtc, scored_by_reference, self_referenced
from evaluation.report import plot_confusion, plot_histogram, write_table
from evaluation.runs import as_json, cost_columns, slug, split_records, usage_of
from runner.batch import BatchRun, BatchSummary, run_batch
from runner.batch_input import BatchItem
from runner.detect import detect_one
from tools.atomic_files import atomic_write_text


async def run_one_config(
    cfg: RunConfig, items: list[BatchItem], settings: DetectionSettings, out_dir: Path
) -> BatchSummary:
    """Run (or resume) one configuration over the items."""
    ctx = config_context(cfg, settings)

    async def worker(sample_id: str, sample: dict[str, Any]) -> dict[str, Any]:
        rec = await detect_one(sample, ctx, cfg.method)
        # Ground truth travels with the prediction so the tables need only this file.
        return {
            **rec,
            "label": sample["label"],
            "category": sample.get("category", ""),
            "ref_mtc": sample.get("mtc"),
            "predicted_category": rec.get("category", ""),
        }

    return await run_batch(
        items,
        worker,
        BatchRun(
            cfg.file(out_dir),
            concurrency=settings.concurrency,
            retry_failed=settings.retry_failed,
            desc=f"{cfg.dataset}: {cfg.name} [{cfg.model}]",
            progress=settings.progress,
            identity=run_identity(ctx, cfg.method, settings),
            spending=settings.spending,
            input_order=True,  # a run file lists its samples as the dataset does (`unveil compare` prints them so)
        ),
    )


def score_rows(
    cfg: RunConfig, items: list[BatchItem], ref: dict[str, float], settings: DetectionSettings, out_dir: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """(one row per MTC bin + overall, failures, overall confusion counts) of a finished configuration."""
    ok, failed = split_records(cfg.file(out_dir), [it.id for it in items])
    labels = [int(r["label"]) for r in ok]
    preds = [bool(r.get("toxic")) for r in ok]
    mtcs = [ref.get(r["id"]) for r in ok]
    by_bin = metrics.scores_by_bin(labels, preds, mtcs, settings.beta)
    usage = usage_of(ok + failed)
    models = next((r.get("models") for r in ok if r.get("models")), {"model": cfg.model})
    config = config_settings(cfg, settings)
    common = {
        "dataset": cfg.dataset,
        "detector": cfg.model,
        "method": cfg.method,
        "l_max": cfg.l_max,
        # the TAG reading of the row (empty for vanilla and guards): docs/tag.md
        **{name: config.get(name) for name in READING_COLUMNS},
        "failed": len(failed),
        "models": as_json(models),
        "settings": as_json(config),
        **cost_columns(usage),
    }
    rows = []
    for name in (*metrics.MTC_BINS, "overall"):
        s = by_bin[name]
        rows.append(
            {
                **common,
                "bin": name,
                **{
                    k: s[k]
                    for k in ("n", "accuracy", f"f{settings.beta:g}", "precision", "recall", "tp", "fp", "tn", "fn")
                },
            }
        )
    fails = [
        {"dataset": cfg.dataset, "detector": cfg.model, "config": cfg.name, "id": f["id"], "error": f.get("error", "")}
        for f in failed
    ]
    return rows, fails, {k: by_bin["overall"][k] for k in ("tp", "fp", "tn", "fn")}


def _wide(rows: list[dict[str, Any]], keys: tuple[str, ...], fkey: str) -> list[dict[str, Any]]:
    """One row per configuration with `<bin> acc` / `<bin> F2` columns."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        k = tuple(r[x] for x in keys)
        w = out.setdefault(
            k, {x: r[x] for x in keys} | {"failed": r["failed"], "cost_usd": r["cost_usd"], "calls": r["calls"]}
        )
        w[f"{r['bin']} acc"] = r["accuracy"]
        w[f"{r['bin']} {fkey.upper()}"] = r[fkey]
        w[f"{r['bin']} n"] = r["n"]
    return list(out.values())


@dataclass
class DetectionResults:
    """What the runs of every dataset add up to, before the tables are written: the long-form score rows, the failed
    samples, the confusion counts, the method comparison rows, the MTC histogram and reference of each dataset."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    confusions: list[dict[str, Any]] = field(default_factory=list)
    compared: list[dict[str, Any]] = field(default_factory=list)
    histograms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


async def evaluate_detection(
    datasets: dict[str, list[BatchItem]], settings: DetectionSettings, out_dir: str | Path
) -> dict[str, Any]:
    """Run every configuration on every dataset, then write the tables and plots into `out_dir`.

    Steps: check the settings and resolve the TAG depths; per dataset, run every configuration (resumable), fix
    the reference MTC of its samples, and score each configuration against it; then write the tables, the plots
    and `detection.md`."""
    out = Path(out_dir)
    if not settings.models:
        raise ValueError("no detector model given")
    resolve_depths(settings)
    _warn_self_referenced(settings)
    results = DetectionResults()
    for dataset, all_items in datasets.items():
        items = _scored_items(all_items, settings)
        cfgs = run_configs(dataset, settings)
        for cfg in cfgs:
            await run_one_config(cfg, items, settings, out)
        ref = await _dataset_reference(dataset, items, settings, out, results)
        _score_dataset(dataset, cfgs, items, ref, settings, out, results)
    wide = _write_report(out, settings, results)
    return {
        "rows": results.rows,
        "failures": results.failures,
        "confusions": results.confusions,
        "histograms": results.histograms,
        "main": wide,
        "comparison": results.compared,
        "mtc_sources": results.sources,
        "out_dir": str(out),
    }


def _warn_self_referenced(settings: DetectionSettings) -> None:
    """Warn (stderr) about an MTC reference that is also a scored detector."""
    for name in self_referenced(settings):
        print(
            f"warning: the MTC reference {name} is also a scored detector: its TA-CTD rows are binned by their own "
            "MTC (Low/Medium accuracy on toxic samples is 1 by construction); use another reference",
            file=sys.stderr,
        )


def _scored_items(all_items: list[BatchItem], settings: DetectionSettings) -> list[BatchItem]:
    """The samples a dataset is scored on: the toxic ones, and the benign ones with `include_benign`."""
    # Failed items (no record) stay: they are counted as failures whatever their label.
    return [
        it for it in all_items if settings.include_benign or it.record is None or int(it.record.get("label", 1)) == 1
    ]


async def _dataset_reference(
    dataset: str, items: list[BatchItem], settings: DetectionSettings, out: Path, results: DetectionResults
) -> dict[str, float]:
    """The reference MTC of a dataset's samples by id; records where it comes from (with any warning) and the
    MTC histogram of its toxic samples in `results`, and warns about samples it leaves out of the bins."""
    ref, source = await reference_mtc(dataset, items, settings, out)
    usable = sum(1 for it in items if it.record)
    results.sources[dataset] = f"{source} ({sum(1 for it in items if it.id in ref)} of {usable} samples)"
    for name in scored_by_reference(dataset, items, settings):
        warning = (
            f"the reference MTC of {dataset} ({source}) was computed by TA-CTD with {name}, which is also a "
            "scored detector: its TA-CTD rows are binned by their own MTC (Low/Medium accuracy on toxic "
            "samples is 1 by construction); use another reference"
        )
        print(f"warning: {warning}", file=sys.stderr)
        results.sources[dataset] += f"; WARNING: {warning}"
    if len(ref) < usable:
        print(
            f"{dataset}: {usable - len(ref)} of {usable} samples have no reference MTC and are left out of the "
            "covertness bins (give the dataset's mtc, --mtc-from RUN.jsonl or --mtc-reference SPEC)",
            file=sys.stderr,
        )
    toxic_ids = {it.id for it in items if it.record and int(it.record.get("label", 0)) == 1}
    results.histograms[dataset] = metrics.mtc_histogram(v for k, v in ref.items() if k in toxic_ids)
    return ref


def _score_dataset(
    dataset: str,
    cfgs: list[RunConfig],
    items: list[BatchItem],
    ref: dict[str, float],
    settings: DetectionSettings,
    out: Path,
    results: DetectionResults,
) -> None:
    """Score every configuration of a dataset from its run file into `results`, and plot its confusion matrix."""
    for cfg in cfgs:
        rows, fails, counts = score_rows(cfg, items, ref, settings, out)
        config = config_settings(cfg, settings)
        reading = {name: config.get(name) for name in READING_COLUMNS}  # empty for vanilla and guards
        compared = comparison_rows(dataset, cfg.name, cfg.model, cfg.file(out), items, ref)
        results.compared.extend({**row, **reading} for row in compared)
        results.rows.extend(rows)
        results.failures.extend(fails)
        results.confusions.append({"dataset": dataset, "detector": cfg.model, "config": cfg.name, **reading, **counts})
        plot_confusion(
            out / "plots" / f"confusion_{slug(dataset, cfg.method, cfg.l_max, cfg.model)}.png",
            counts,
            title=f"{dataset}: {cfg.name}\n{cfg.model}",
        )


def _write_report(out: Path, settings: DetectionSettings, results: DetectionResults) -> list[dict[str, Any]]:
    """Write every table, the MTC histogram plot and `detection.md`; returns the main (wide) table's rows."""
    md = [
        "# Detection evaluation\n",
        "Bins: low [0, 0.2), medium [0.2, 0.8), high [0.8, 1] of one fixed reference MTC per dataset, the same for "
        f"every method and detector. Beta = {settings.beta:g}. Samples: "
        + ("toxic and benign (Table 4, with benign data)" if settings.include_benign else "toxic only (Tables 1-2)")
        + ".\n",
        f"TA-CTD reading: prune={settings.reading.get('prune')}, roots_mode={settings.reading.get('roots_mode')}, "
        f"l_max={settings.l_max}, k_max={settings.k_max}, children={settings.children}"
        + (f", toxic pairs {settings.reading['toxic_pairs']}" if settings.reading.get("toxic_pairs") else "")
        + " (docs/tag.md).\n",
        *[f"- reference MTC of {d}: {src}" for d, src in results.sources.items()],
        "",
    ]
    wide, score_md = _score_tables(out, settings, results.rows)
    md.extend(score_md)
    md.append(write_comparison(out, results.compared))
    md.extend(_diagnostic_tables(out, results))
    atomic_write_text(out / "detection.md", "\n".join(md))
    return wide


def _score_tables(
    out: Path, settings: DetectionSettings, all_rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The score tables: per detector at the main depth (wide), every row (long form), and the `l_max` ablation
    when asked for; returns the wide rows and the Markdown of the tables `detection.md` shows."""
    fkey = f"f{settings.beta:g}"
    keys = ("dataset", "detector", "method", "l_max", *READING_COLUMNS)
    main_rows = [r for r in all_rows if r["l_max"] is None or r["l_max"] == settings.l_max]
    wide = _wide(main_rows, keys, fkey)
    bins = [*metrics.MTC_BINS, "overall"]
    md = [
        write_table(
            out,
            "detection_main",
            wide,
            [*keys, *[f"{b} {m}" for b in bins for m in ("n", "acc", fkey.upper())], "failed", "calls", "cost_usd"],
            title="Vanilla vs TA-CTD per detector (accuracy and F-score per covertness level)",
        )
    ]
    write_table(
        out,
        "detection_rows",
        all_rows,
        [*keys, "bin", "n", "accuracy", fkey, "failed", "cost_usd"],
        title="All result rows (long form)",
    )
    if settings.l_max_ablation and "tag" in settings.methods:
        abl = _wide([r for r in all_rows if r["method"] == "tag"], keys, fkey)
        abl.sort(key=lambda r: (r["dataset"], r["detector"], -(r["l_max"] or 0)))
        md.append(
            write_table(
                out,
                "detection_lmax",
                abl,
                [*keys, *[f"{b} {m}" for b in bins for m in ("n", "acc")], "overall " + fkey.upper()],
                title="l_max ablation of TA-CTD (accuracy per covertness level)",
            )
        )
    return wide, md


def _diagnostic_tables(out: Path, results: DetectionResults) -> list[str]:
    """The confusion matrices, the MTC histogram (table and plot) and the failed samples; returns their Markdown."""
    md = [
        write_table(
            out,
            "confusion",
            results.confusions,
            ["dataset", "detector", "config", "prune", "roots_mode", "tp", "fp", "tn", "fn"],
            title="Confusion matrices (overall)",
        )
    ]
    hist_rows = [
        {"dataset": d, "interval": b["label"], "count": b["count"], "share": b["share"], "tables_bin": b["table_bin"]}
        for d, bins_ in results.histograms.items()
        for b in bins_
    ]
    md.append(
        write_table(
            out,
            "mtc_histogram",
            hist_rows,
            ["dataset", "interval", "count", "share", "tables_bin"],
            title="MTC distribution of toxic samples (Figure 5; tables_bin: the level Tables 1-3 count it in)",
        )
    )
    levels = [
        {"dataset": d, **row} for d, bins_ in results.histograms.items() for row in metrics.covertness_levels(bins_)
    ]
    md.append(
        write_table(
            out,
            "mtc_levels",
            levels,
            ["dataset", "level", "figure_5", "tables_1_3", "not_found"],
            title="Toxic samples per covertness level: Figure 5's bars leave MTC = 1 (not found) out of the top "
            "bar, Tables 1-3 count it as High (both shown)",
        )
    )
    plot_histogram(out / "plots" / "mtc_histogram.png", results.histograms, title="MTC score distribution")
    md.append(
        write_table(
            out,
            "failures",
            results.failures,
            ["dataset", "detector", "config", "id", "error"],
            title=f"Failed samples ({len(results.failures)}; excluded from the scores, counted in 'failed')",
        )
    )
    return md
