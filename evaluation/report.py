"""Writing evaluation results: Markdown and CSV tables and PNG plots (matplotlib's Agg backend, no display)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.atomic_files import atomic_write_bytes, atomic_write_text
from tools.export_text import csv_cell


def _cell(value: object, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, title: str = "", digits: int = 4
) -> str:
    """A Markdown table of `rows` restricted to `columns` (NaN shown as '-')."""
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(columns) + " |")
    # Numeric columns right-aligned, so digits line up across rows.
    numeric = {
        c for c in columns if any(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows)
    }
    lines.append("|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|")
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
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else csv_cell(v)) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def write_table(
    out_dir: Path, name: str, rows: Sequence[Mapping[str, Any]], md_columns: Sequence[str], *, title: str
) -> str:
    """`<name>.csv` (every field) and `<name>.md` (the chosen columns); returns the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / f"{name}.csv", rows)
    md = markdown_table(rows, md_columns, title=title)
    atomic_write_text(out_dir / f"{name}.md", md)
    return md


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_close(fig: Any, path: Path) -> None:
    try:
        save_figure(fig, path)
    finally:
        _pyplot().close(fig)


def save_figure(fig: Any, path: Path) -> None:
    """Write a matplotlib figure as a whole new file (`atomic_write_bytes`: never through a link planted at the
    name); the format is the file's suffix."""
    buf = io.BytesIO()
    # bbox_inches="tight" keeps legends placed outside the axes inside the picture.
    fig.savefig(buf, dpi=120, bbox_inches="tight", format=path.suffix.lstrip(".") or "png")
    atomic_write_bytes(path, buf.getvalue())


def plot_histogram(path: Path, series: Mapping[str, Sequence[Mapping[str, Any]]], *, title: str) -> None:
    """`histogram_figure` saved as a picture (nothing is written for no series)."""
    fig = histogram_figure(series, title=title)
    if fig is not None:
        _save_close(fig, path)


def histogram_figure(series: Mapping[str, Sequence[Mapping[str, Any]]], *, title: str) -> Any:
    """Grouped bars of MTC shares per interval, one group per dataset: Figure 5's five intervals of 0.2.

    Samples with MTC = 1 ("no toxic association found", the `not_found` bin of `mtc_histogram`) get no sixth
    bar: the figure has the paper's five bars, and the not-found share of every dataset is written in a note
    under the axes and in its legend entry. Shares stay relative to all toxic samples, so a dataset's five bars
    sum to 1 minus its not-found share. Every bar carries its count.
    """
    plt = _pyplot()
    names = list(series)
    if not names:
        return None
    bins = [b for b in series[names[0]] if not b.get("not_found")]
    width = 0.8 / max(1, len(names))
    centres = [float(i) for i in range(len(bins))]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colours = plt.get_cmap("tab10").colors
    top = 0.0
    notes: list[str] = []
    for k, name in enumerate(names):
        total = sum(int(b["count"]) for b in series[name])
        intervals = [b for b in series[name] if not b.get("not_found")]
        missing = [b for b in series[name] if b.get("not_found")]
        not_found = sum(int(b["count"]) for b in missing)
        nf_share = not_found / total if total else 0.0
        xs = [c + (k - (len(names) - 1) / 2) * width for c in centres]
        shares = [float(b["share"]) for b in intervals]
        top = max([top, *shares])
        bars = ax.bar(
            xs,
            shares,
            width=width * 0.95,
            color=colours[k % len(colours)],
            label=f"{name} (n = {total}; MTC = 1: {not_found})",
            edgecolor="black",
            linewidth=0.5,
        )
        for bar, b in zip(bars, intervals, strict=True):
            ax.annotate(
                str(int(b["count"])),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
        notes.append(f"{name} {not_found} ({nf_share:.0%})")
    ax.set_xticks(centres)
    ax.set_xticklabels([f"{b['lo']:.1f}-{b['hi']:.1f}" for b in bins])
    ax.set_xlabel("MTC score of the toxic samples")
    ax.set_ylabel("share of toxic samples (bar label: count)")
    ax.set_ylim(0, max(0.05, min(1.0, top * 1.15 + 0.02)))
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.text(0.01, 0.01, "MTC = 1 (not found, no bar): " + ", ".join(notes), fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _text_colour(rgba: Sequence[float]) -> str:
    """Black or white, whichever reads on a cell of this colour (WCAG relative luminance)."""

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(float(c)) for c in rgba[:3])
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    # The contrast ratio with white beats the one with black below ~0.179.
    return "white" if luminance < 0.179 else "black"


def plot_confusion(path: Path, counts: Mapping[str, int], *, title: str) -> None:
    """`confusion_figure` saved as a picture."""
    _save_close(confusion_figure(counts, title=title), path)


def confusion_figure(counts: Mapping[str, int], *, title: str) -> Any:
    """A 2x2 confusion matrix heat map (rows: truth, columns: prediction), each cell with its name and count in
    a colour chosen by the cell's luminance."""
    plt = _pyplot()
    grid = [[counts.get("tn", 0), counts.get("fp", 0)], [counts.get("fn", 0), counts.get("tp", 0)]]
    names = [["TN", "FP"], ["FN", "TP"]]
    fig, ax = plt.subplots(figsize=(3.8, 3.4))
    cmap = plt.get_cmap("Blues")
    vmax = max(1, max(max(row) for row in grid))
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=vmax)
    for i in range(2):
        for j in range(2):
            colour = _text_colour(cmap(grid[i][j] / vmax))
            ax.text(
                j, i, f"{names[i][j]}\n{grid[i][j]}", ha="center", va="center", color=colour, fontsize=11, weight="bold"
            )
    ax.set_xticks([0, 1], labels=["pred benign", "pred toxic"])
    ax.set_yticks([0, 1], labels=["benign", "toxic"])
    ax.set_xlabel("prediction")
    ax.set_ylabel("ground truth")
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return fig


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")


# The smallest y span an axis shows: a unit, or a tenth of the values' magnitude when that is larger. Without it a
# series that moves by 0.0001 (a cosine score of a few noisy images) fills the whole axis and looks like a cliff.
MIN_SPAN = 1.0
MIN_RELATIVE_SPAN = 0.1


def value_range(values: Sequence[float]) -> tuple[float, float] | None:
    """A y range that shows `values` honestly: 0..1 for data that lies in [0, 1] (probabilities, shares), else
    the data's range padded by 5%, widened about its middle to at least `MIN_SPAN` (or `MIN_RELATIVE_SPAN` of the
    largest magnitude, when that is larger); None when nothing is finite."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    if lo >= 0.0 and hi <= 1.0:
        return (-0.02, 1.02)
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    span = max(MIN_SPAN, MIN_RELATIVE_SPAN * max(abs(lo), abs(hi)))
    if hi - lo < span:
        middle = (lo + hi) / 2
        lo, hi = middle - span / 2, middle + span / 2
    return (lo, hi)


def _same_as(series: Mapping[str, Sequence[float]]) -> dict[str, str]:
    """For each series that repeats an earlier one exactly, the name of that earlier one."""
    out: dict[str, str] = {}
    names = list(series)
    for i, name in enumerate(names):
        for other in names[:i]:
            a, b = series[name], series[other]
            if len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True)):
                out[name] = out.get(other, other)
                break
    return out


def _draw_series(
    ax: Any, xs: Sequence[float], series: Mapping[str, Sequence[float]], start: int, dodge: float, linestyle_offset: int
) -> None:
    """Lines with a distinct marker and line style each; series that coincide are dodged sideways a little and
    labelled as identical, so no line hides another."""
    same = _same_as(series)
    n = len(series)
    for k, (name, ys) in enumerate(series.items()):
        shift = (k - (n - 1) / 2) * dodge if n > 1 else 0.0
        label = name + (f" (= {same[name]})" if name in same else "")
        ax.plot(
            [x + shift for x in xs],
            list(ys),
            marker=MARKERS[(start + k) % len(MARKERS)],
            linestyle=LINESTYLES[(linestyle_offset + k) % len(LINESTYLES)],
            label=label,
            markersize=6,
            markerfacecolor="none" if (start + k) % 2 else None,
            linewidth=1.4,
        )


def plot_lines(
    path: Path,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
) -> None:
    """`lines_figure` saved as a picture."""
    _save_close(
        lines_figure(xs, series, xlabel=xlabel, ylabel=ylabel, title=title, right=right, right_label=right_label), path
    )


def lines_figure(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
) -> Any:
    """Lines against x (e.g. IP and BLIP against T_max), with an optional second y axis.

    Probabilities and shares get a fixed 0..1 axis (an all-zero IP is a flat line at 0, not noise around it),
    every series a distinct marker and line style, coinciding series a small sideways dodge and an "(= other)"
    label, and the legend sits outside the axes.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    step = min((b - a for a, b in zip(xs, xs[1:], strict=False)), default=1.0) or 1.0
    dodge = 0.03 * step
    _draw_series(ax, xs, series, 0, dodge, 0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(xs))
    left_range = value_range([v for ys in series.values() for v in ys])
    if left_range:
        ax.set_ylim(*left_range)
    handles, labels = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        palette = list(plt.get_cmap("tab10").colors)
        ax2.set_prop_cycle(color=palette[len(series) :] + palette[: len(series)])  # colours the left axis did not use
        _draw_series(ax2, xs, right, len(series), dodge, 1)
        ax2.set_ylabel(right_label)
        right_range = value_range([v for ys in right.values() for v in ys])
        if right_range:
            ax2.set_ylim(*right_range)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        # Outside the axes (below them), so the legend never covers data.
        ax.legend(
            handles,
            labels,
            fontsize=7.5,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=min(3, len(handles)),
            frameon=False,
        )
    ax.set_title(title)
    fig.tight_layout()
    return fig
