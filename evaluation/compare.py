"""The method comparison of `unveil evaluate detection`: TAG, vanilla and guard models side by side.

For every dataset and configuration (method x detector model) one row per level: `overall`, each ground-truth
`category` of the dataset, and each MTC bin where a reference MTC exists. Every row has accuracy, precision,
recall, F1 and F2 with the confusion counts, and the cost and model calls per sample (failed samples count in
`failed` and in the cost, never in the scores). Written as `comparison.md`/`comparison.csv` and a PNG bar chart
per dataset (`plots/comparison_<dataset>.png`). Everything is computed from the run files, like the other tables.

It also holds the guard methods' place in the evaluation: `guard:NAME` methods run once per dataset with the
guard's own model (`--role-model guard.NAME=SPEC`, else `--role-model guard=SPEC`, else the first detector).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evaluation import metrics
from evaluation.report import save_figure, write_table
from evaluation.runs import slug, split_records, usage_of
from runner.batch_input import BatchItem

COMPARISON_METRICS = ("accuracy", "precision", "recall", "f1", "f2")


# -- the comparison table -------------------------------------------------------------------------------------
def _scores(labels: list[int], preds: list[bool]) -> dict[str, Any]:
    c = metrics.confusion(labels, preds)
    return {
        "n": c.n,
        "accuracy": metrics.accuracy(c),
        "precision": metrics.precision(c),
        "recall": metrics.recall(c),
        "f1": metrics.f_beta(c, 1.0),
        "f2": metrics.f_beta(c, 2.0),
        **c.as_dict(),
    }


def comparison_rows(
    dataset: str, name: str, model: str, run_file: Path, items: list[BatchItem], ref_mtc: dict[str, float]
) -> list[dict[str, Any]]:
    """The comparison rows of one finished configuration: overall, per category, per MTC bin."""
    ok, failed = split_records(run_file, [it.id for it in items])
    total = usage_of(ok + failed)["total"]
    n_all = max(1, len(ok) + len(failed))
    common = {
        "dataset": dataset,
        "method": name,
        "detector": model,
        "failed": len(failed),
        "calls_per_sample": total["calls"] / n_all,
        "cost_per_sample": total["cost_usd"] / n_all,
    }
    groups: list[tuple[str, str, list[dict[str, Any]]]] = [("overall", "all", ok)]
    # `category` in a run record is the sample's ground truth (the method's own is `predicted_category`).
    for cat in sorted({str(r.get("category") or "") for r in ok}):
        groups.append(("category", cat or "(none)", [r for r in ok if str(r.get("category") or "") == cat]))
    if ref_mtc:
        for b in metrics.MTC_BINS:
            groups.append(("mtc", b, [r for r in ok if r["id"] in ref_mtc and metrics.mtc_bin(ref_mtc[r["id"]]) == b]))
    rows = []
    for level, group, recs in groups:
        scores = _scores([int(r["label"]) for r in recs], [bool(r.get("toxic")) for r in recs])
        rows.append({**common, "level": level, "group": group, **scores})
    return rows


def plot_comparison(path: Path, rows: list[dict[str, Any]], *, title: str) -> None:
    """Grouped bars: one group per metric, one bar per method (overall rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    overall = [r for r in rows if r["level"] == "overall"]
    labels = [f"{r['method']}\n{r['detector']}"[:60] for r in overall]
    width = 0.8 / max(1, len(overall))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(COMPARISON_METRICS)), 4.0))
    for k, (label, row) in enumerate(zip(labels, overall, strict=True)):
        vals = [0.0 if math.isnan(float(row[m])) else float(row[m]) for m in COMPARISON_METRICS]
        ax.bar([i + k * width for i in range(len(COMPARISON_METRICS))], vals, width, label=label)
    ax.set_xticks([i + width * (len(overall) - 1) / 2 for i in range(len(COMPARISON_METRICS))])
    ax.set_xticklabels([m.upper() if m.startswith("f") else m for m in COMPARISON_METRICS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def write_comparison(out: Path, rows: list[dict[str, Any]]) -> str:
    """`comparison.md`/`.csv` (all levels), one bar chart per dataset; returns the Markdown."""
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        plot_comparison(
            out / "plots" / f"comparison_{slug(dataset)}.png",
            [r for r in rows if r["dataset"] == dataset],
            title=f"{dataset}: methods compared (overall)",
        )
    cols = [
        "dataset",
        "method",
        "detector",
        "prune",  # the TAG reading (empty for vanilla and guards); the CSV has every reading column
        "roots_mode",
        "level",
        "group",
        "n",
        *COMPARISON_METRICS,
        "tp",
        "fp",
        "tn",
        "fn",
        "failed",
        "calls_per_sample",
        "cost_per_sample",
    ]
    return write_table(
        out,
        "comparison",
        rows,
        cols,
        title="Methods compared: overall, per category and per MTC bin (confusion counts tp/fp/tn/fn)",
    )
