"""Writing evaluation results: Markdown and CSV tables and PNG plots (matplotlib's Agg backend, no display)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from runner.batch import atomic_write_text


def _cell(value: Any, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, title: str = "", digits: int = 4) -> str:
    """A Markdown table of `rows` restricted to `columns` (NaN shown as '-')."""
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c), digits) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """All rows as CSV (columns: the given ones, else the union of keys in first-seen order)."""
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def write_table(out_dir: Path, name: str, rows: Sequence[Mapping[str, Any]], md_columns: Sequence[str], *, title: str) -> str:
    """`<name>.csv` (every field) and `<name>.md` (the chosen columns); returns the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / f"{name}.csv", rows)
    md = markdown_table(rows, md_columns, title=title)
    atomic_write_text(out_dir / f"{name}.md", md)
    return md


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_histogram(path: Path, series: Mapping[str, Sequence[Mapping[str, Any]]], *, title: str) -> None:
    """Grouped bars of MTC shares per interval, one group per dataset (Figure 5 style)."""
    plt = _pyplot()
    names = list(series)
    if not names:
        return
    bins = series[names[0]]
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, name in enumerate(names):
        xs = [i + k * width for i in range(len(bins))]
        ax.bar(xs, [b["share"] for b in series[name]], width=width, label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(bins))])
    ax.set_xticklabels([f"{b['lo']:.1f}-{b['hi']:.1f}" for b in bins])
    ax.set_xlabel("MTC score")
    ax.set_ylabel("share of samples")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_confusion(path: Path, counts: Mapping[str, int], *, title: str) -> None:
    """A 2x2 confusion matrix heat map (rows: truth, columns: prediction)."""
    plt = _pyplot()
    grid = [[counts.get("tn", 0), counts.get("fp", 0)], [counts.get("fn", 0), counts.get("tp", 0)]]
    fig, ax = plt.subplots(figsize=(3.6, 3.2))
    ax.imshow(grid, cmap="Blues")
    for i in range(2):
        for j in range(2):
            ax.text(j, i, str(grid[i][j]), ha="center", va="center")
    ax.set_xticks([0, 1], labels=["pred benign", "pred toxic"])
    ax.set_yticks([0, 1], labels=["benign", "toxic"])
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_lines(path: Path, xs: Sequence[float], series: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str,
               title: str, right: Mapping[str, Sequence[float]] | None = None, right_label: str = "") -> None:
    """Lines against x (e.g. IP and BLIP against T_max), with an optional second y axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(xs))
    handles, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for name, ys in right.items():
            ax2.plot(xs, ys, marker="s", linestyle="--", label=name)
        ax2.set_ylabel(right_label)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
