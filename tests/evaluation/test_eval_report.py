"""Evaluation plots and tables read correctly: asserted on the figures' artists."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba

from evaluation.metrics import mtc_histogram
from evaluation.report import (
    confusion_figure,
    histogram_figure,
    lines_figure,
    markdown_table,
    plot_confusion,
    plot_histogram,
    plot_lines,
    value_range,
)


def _contrast(fg: str, bg: tuple[float, ...]) -> float:
    def lum(rgba: tuple[float, ...]) -> float:
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    a, b = lum(to_rgba(fg)), lum(bg)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


@pytest.mark.parametrize(
    "counts",
    [
        {"tp": 120, "fp": 3, "tn": 95, "fn": 40},
        {"tp": 0, "fp": 0, "tn": 0, "fn": 0},
        {"tp": 1, "fp": 1000, "tn": 500, "fn": 0},
    ],
)
def test_confusion_counts_are_readable_on_every_cell(counts: dict[str, int]) -> None:
    fig = confusion_figure(counts, title="t")
    try:
        ax = fig.axes[0]
        image = ax.get_images()[0]
        grid = image.get_array()
        texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
        assert len(texts) == 4
        for (i, j), text in texts.items():
            bg = tuple(image.cmap(image.norm(grid[i][j])))
            # WCAG AA for large text: contrast >= 3 on the cell's own colour.
            assert _contrast(str(text.get_color()), bg) >= 3.0, (text.get_text(), text.get_color(), bg)
            assert str(int(grid[i][j])) in text.get_text()
    finally:
        plt.close(fig)


def test_all_zero_probabilities_get_a_fixed_axis_not_a_degenerate_one() -> None:
    assert value_range([0.0, 0.0, 0.0]) == (-0.02, 1.02)
    assert value_range([0.3, 0.7]) == (-0.02, 1.02)
    lo, hi = value_range([5.0, 5.0]) or (0, 0)
    assert hi - lo >= 1.0
    assert value_range([math.nan]) is None
    fig = lines_figure(
        [0, 1, 2],
        {"ipr IP": [0.0, 0.0, 0.0]},
        xlabel="T",
        ylabel="IP",
        title="t",
        right={"ipr BLIP": [0.4, 0.4, 0.4]},
        right_label="BLIP",
    )
    try:
        for ax in fig.axes:
            lo, hi = ax.get_ylim()
            assert lo <= 0.0 and hi >= 1.0 and hi - lo < 1.1
    finally:
        plt.close(fig)


def test_every_axis_has_a_minimum_span_so_noise_stays_flat() -> None:
    # A BLIP cosine that wobbles by 0.00002 (outside [0, 1], so no fixed axis) must not fill its axis.
    blip = [-0.01234, -0.01236, -0.01235]
    fig = lines_figure(
        [0, 1, 2],
        {"ipr IP": [0.3, 0.2, 0.1]},
        xlabel="T",
        ylabel="IP",
        title="t",
        right={"ipr BLIP": blip},
        right_label="BLIP",
    )
    try:
        for ax in fig.axes:
            lo, hi = ax.get_ylim()
            assert hi - lo >= 1.0 and lo <= min(blip + [0.1]) and hi >= max(blip + [0.3])
    finally:
        plt.close(fig)
    lo, hi = value_range([250.0, 250.01]) or (0, 0)
    assert hi - lo >= 25.0 and lo < 250.0 < 250.01 < hi  # a tenth of the magnitude for large values
    lo, hi = value_range([2.0, 5.0]) or (0, 0)
    assert 3.0 < hi - lo < 3.5  # a real change keeps the data's own (padded) range


def test_identical_lines_stay_visible_and_say_so() -> None:
    series = {"a IP": [0.0, 0.1, 0.2], "b IP": [0.0, 0.1, 0.2], "c IP": [0.5, 0.5, 0.5]}
    fig = lines_figure([0, 1, 2], series, xlabel="T", ylabel="IP", title="t")
    try:
        lines = fig.axes[0].get_lines()
        assert len({(ln.get_marker(), ln.get_linestyle()) for ln in lines}) == 3
        a, b = lines[0], lines[1]
        assert list(a.get_xdata()) != list(b.get_xdata())  # dodged sideways: both are visible
        assert max(abs(x - y) for x, y in zip(a.get_xdata(), b.get_xdata(), strict=True)) < 0.2
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert "b IP (= a IP)" in labels and "c IP" in labels
    finally:
        plt.close(fig)


def test_the_legend_is_outside_the_data_area() -> None:
    fig = lines_figure(
        [0, 1, 2, 3],
        {"x IP": [0.9, 0.8, 0.7, 0.9]},
        xlabel="T",
        ylabel="IP",
        title="t",
        right={"x BLIP": [0.2, 0.3, 0.2, 0.1]},
        right_label="BLIP",
    )
    try:
        renderer = fig.canvas.get_renderer()
        legend = fig.axes[0].get_legend().get_window_extent(renderer)
        assert not legend.overlaps(fig.axes[0].get_window_extent(renderer))
    finally:
        plt.close(fig)
    fig = histogram_figure({"d": mtc_histogram([0.1, 1.0])}, title="t")
    try:
        renderer = fig.canvas.get_renderer()
        assert (
            not fig.axes[0].get_legend().get_window_extent(renderer).overlaps(fig.axes[0].get_window_extent(renderer))
        )
    finally:
        plt.close(fig)


def test_histogram_draws_figure_5s_five_bars_and_notes_not_found_apart() -> None:
    hist = mtc_histogram([0.0, 0.1, 0.85, 0.999, 1.0, 1.0])
    assert [b["count"] for b in hist] == [2, 0, 0, 0, 2, 2]
    assert hist[-1]["not_found"] and "not found" in hist[-1]["label"] and hist[-2]["label"] == "[0.8, 1)"
    fig = histogram_figure({"ctd": hist, "other": mtc_histogram([0.5])}, title="t")
    try:
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == ["0.0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1.0"]  # the paper's five intervals
        assert len(ax.patches) == 5 * 2  # five bars per dataset, no "not found" bar
        annotations = [t.get_text() for t in ax.texts]
        assert annotations.count("2") == 2  # counts on the bars
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["ctd (n = 6; MTC = 1: 2)", "other (n = 1; MTC = 1: 0)"]
        (note,) = [t.get_text() for t in fig.texts]
        assert "MTC = 1 (not found" in note and "ctd 2 (33%)" in note
        assert "toxic" in ax.get_ylabel()
    finally:
        plt.close(fig)


def test_markdown_tables_align_numbers_and_keep_n() -> None:
    md = markdown_table(
        [{"name": "a", "low n": 3, "low acc": 0.5}, {"name": "b", "low n": 0, "low acc": math.nan}],
        ["name", "low n", "low acc"],
    )
    lines = md.splitlines()
    assert lines[1] == "|---|---:|---:|"
    assert lines[2] == "| a | 3 | 0.5000 |" and lines[3] == "| b | 0 | - |"


def test_plots_are_written(tmp_path: Path) -> None:
    plot_confusion(tmp_path / "c.png", {"tp": 1}, title="t")
    plot_histogram(tmp_path / "h.png", {"d": mtc_histogram([0.2])}, title="t")
    plot_lines(tmp_path / "l.png", [0, 1], {"x": [1.0, 2.0]}, xlabel="x", ylabel="y", title="t")
    assert all((tmp_path / n).read_bytes()[:4] == b"\x89PNG" for n in ("c.png", "h.png", "l.png"))
    assert not plt.get_fignums()  # every figure closed
