"""A picture of a detection result that opens offline (`.png`, `.svg` or `.pdf`; matplotlib's Agg backend).

For a TAG result it draws what Figure 6 of the TAG paper shows: the visual and the textual association tree side
by side, root concepts on top and one row per layer (labelled at the left), each edge tagged with its transition
probability and association type, the toxic paths highlighted, and the cross-modal toxic link between the two
nodes of the reported pair, with the verdict, the MTC calculation and the explanation around it. A legend names
every mark.

Where everything goes is `unveil.tag_layout` (a tidy layered layout whose geometry the tests check without
drawing); this module draws it with matplotlib.

A result without trees (the single-call vanilla detector) is drawn as what it is: the verdict, category and
reason, with a note that this method builds no association graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch, Patch

from agents.tag.types import ASSOCIATION_TYPES
from unveil.tag_layout import (
    FOOTER_LINES,
    LABEL_FONT,
    LEGEND_H,
    MARGIN,
    NODE_FONT,
    Box,
    TagLayout,
    layout_tag,
    path_ids,
    tag_trees,
    wrap_text,
)

HIGHLIGHT = "#c0392b"
EDGE = "#95a5a6"
INK = "#2c3e50"
FILL = {"visual": "#dbe9f6", "textual": "#e2f0d9"}
PAIR_FILL = "#f6c9c4"

__all__ = ["RENDER_FORMATS", "Box", "TagLayout", "check_render_path", "draw_tag", "layout_tag", "render_tag"]


def _mtc_line(result: dict[str, Any]) -> str:
    finding = result.get("finding")
    mtc = float(result.get("mtc", 1.0 if not finding else 0.0))
    if not finding:
        return f"MTC = {mtc:.2f} (no toxic pair found)"
    if int(finding.get("layer", 0)) == 0:
        return f"MTC = {mtc:.4f} (the root concepts are already a toxic pair)"

    def factors(side: str) -> str:
        probs = [float(s.get("prob", 1.0)) for s in (finding.get(side) or {}).get("path", [])[1:]]
        return "\u00d7".join(f"{p:.2g}" for p in probs) or "1"

    return (
        f"MTC = 1 \u2212 p(root_v \u2192 v) \u00b7 p(root_t \u2192 t) = 1 \u2212 ({factors('visual')}) \u00b7 "
        f"({factors('textual')}) = {mtc:.4f}"
    )


def _verdict(result: dict[str, Any]) -> str:
    finding = result.get("finding")
    if finding:
        return f"TOXIC \u2014 category: {finding.get('category') or result.get('category') or 'unnamed'}"
    if result.get("toxic"):
        return f"TOXIC \u2014 category: {result.get('category') or 'unnamed'}"
    return "Not toxic: no toxic cross-modal pair within the expanded layers"


def _draw_header(ax: Axes, layout: TagLayout, result: dict[str, Any]) -> None:
    """Drawing step 1: the verdict, the MTC calculation and the judge's reason across the top."""
    finding = result.get("finding") or {}
    H = layout.height
    ax.text(
        MARGIN,
        H - 0.3,
        _verdict(result),
        fontsize=13,
        weight="bold",
        va="center",
        color=HIGHLIGHT if (finding or result.get("toxic")) else INK,
    )
    ax.text(MARGIN, H - 0.62, _mtc_line(result), fontsize=9.5, va="center", color=INK)
    if finding.get("reason"):
        ax.text(
            MARGIN,
            H - 0.9,
            "judge's reason: " + wrap_text(finding["reason"], int(layout.width * 14), 1)[0],
            fontsize=8.5,
            va="center",
            color=INK,
            style="italic",
        )


def _draw_frame(ax: Axes, layout: TagLayout) -> None:
    """Drawing step 2: the two trees' titles, the layer labels at the left and the dotted line between the trees."""
    for name, title in (("visual", "Visual association tree (image)"), ("textual", "Textual association tree (text)")):
        lo, hi = layout.tree_span[name]
        ax.text(
            (lo + hi) / 2, layout.top - 0.2, title, ha="center", va="center", fontsize=10.5, weight="bold", color=INK
        )
    for layer, y in layout.row_y.items():
        ax.text(
            layout.tree_span["visual"][0] - 0.15,
            y,
            "layer 0\n(roots)" if layer == 0 else f"layer {layer}",
            ha="right",
            va="center",
            fontsize=8,
            color="#7f8c8d",
        )
    if layout.tree_span["textual"][0] > layout.tree_span["visual"][1]:
        sep = (layout.tree_span["visual"][1] + layout.tree_span["textual"][0]) / 2
        bottom = min(layout.row_y.values()) - 0.5
        ax.plot([sep, sep], [bottom, layout.top - 0.05], color="#d5d8dc", lw=0.8, ls=":", zorder=0)


def _draw_edges(ax: Axes, layout: TagLayout, on_path: set[str]) -> None:
    """Drawing step 3: every parent-child edge with its label; edges of a toxic path in bold red."""
    for child, par in layout.parent.items():
        if par is None:
            continue
        c, p = layout.boxes[child], layout.boxes[par]
        hot = child in on_path and par in on_path
        ax.plot(
            [p.x, c.x],
            [p.bottom, c.top],
            color=HIGHLIGHT if hot else EDGE,
            lw=2.2 if hot else 0.9,
            zorder=1,
            solid_capstyle="round",
        )
        lab = layout.edge_labels[child]
        ax.text(
            lab.x,
            lab.y,
            layout.edge_texts[child],
            ha="center",
            va="center",
            fontsize=LABEL_FONT,
            zorder=3,
            color=HIGHLIGHT if hot else "#34495e",
            weight="bold" if hot else "normal",
            bbox={"boxstyle": "square,pad=0.08", "fc": "white", "ec": "none"},
        )


def _draw_nodes(ax: Axes, layout: TagLayout, on_path: set[str], pair: set[str | None]) -> None:
    """Drawing step 4: every node's box and text; roots solid and bold, the reported pair filled red."""
    for node_id, box in layout.boxes.items():
        is_root = layout.parent[node_id] is None
        face = PAIR_FILL if node_id in pair else FILL[layout.tree[node_id]]
        edge = HIGHLIGHT if node_id in on_path else INK
        patch = FancyBboxPatch(
            (box.left, box.bottom),
            box.w,
            box.h,
            boxstyle="round,pad=0,rounding_size=0.06",
            fc=face,
            ec=edge,
            lw=2.2 if node_id in on_path else (1.4 if is_root else 0.7),
            ls="-" if is_root or node_id in on_path else (0, (4, 1.5)),
            zorder=2,
        )
        ax.add_patch(patch)
        ax.text(
            box.x,
            box.y,
            layout.texts[node_id],
            ha="center",
            va="center",
            fontsize=NODE_FONT,
            zorder=4,
            color=INK,
            weight="bold" if is_root else "normal",
            linespacing=1.15,
        )


def _draw_link(ax: Axes, layout: TagLayout) -> None:
    """Drawing step 5: the cross-modal toxic link, labelled along the gutter where it runs long enough."""
    if not layout.link:
        return
    xs, ys = zip(*layout.link, strict=True)
    ax.plot(xs, ys, color=HIGHLIGHT, lw=2.0, ls=(0, (5, 2.5)), zorder=5, solid_joinstyle="round")
    ax.plot([xs[0], xs[-1]], [ys[0], ys[-1]], "o", color=HIGHLIGHT, ms=5, zorder=6)
    run = abs(ys[2] - ys[3])
    if run >= 0.8:  # a label along the gutter run when it is long enough to hold one; the legend names it too
        ax.text(
            xs[2] + 0.06,
            (ys[2] + ys[3]) / 2,
            "toxic pair",
            rotation=90,
            ha="left",
            va="center",
            fontsize=7.5,
            color=HIGHLIGHT,
            weight="bold",
            zorder=6,
        )


def _draw_explanation(ax: Axes, layout: TagLayout, result: dict[str, Any]) -> None:
    """Drawing step 7: the explainer's text above the legend, wrapped to the figure's width."""
    explanation = result.get("explanation") or ""
    if explanation:
        chars = max(60, int((layout.width - 2 * MARGIN) * 14))
        lines = wrap_text(explanation, chars, FOOTER_LINES - 1)
        ax.text(
            MARGIN,
            LEGEND_H + 0.35 + 0.16 * len(lines),
            "Explanation: " + "\n".join(lines),
            fontsize=8.5,
            va="top",
            color=INK,
            linespacing=1.35,
        )


def _draw_tag(result: dict[str, Any]) -> tuple[Figure, TagLayout]:
    """The figure of a TAG result on a canvas of exactly the layout's size, drawn in steps: header, frame,
    edges, nodes, the toxic link, the legend (step 6) and the explanation."""
    layout = layout_tag(result)
    visual, textual = tag_trees(result)
    finding = result.get("finding") or {}
    on_path = path_ids(visual, (finding.get("visual") or {}).get("id")) | path_ids(
        textual, (finding.get("textual") or {}).get("id")
    )
    pair = {(finding.get("visual") or {}).get("id"), (finding.get("textual") or {}).get("id")} - {None}
    fig = plt.figure(figsize=(layout.width, layout.height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, layout.width)
    ax.set_ylim(0, layout.height)
    ax.axis("off")
    _draw_header(ax, layout, result)
    _draw_frame(ax, layout)
    _draw_edges(ax, layout, on_path)
    _draw_nodes(ax, layout, on_path, pair)
    _draw_link(ax, layout)
    _legend(ax, layout)
    _draw_explanation(ax, layout, result)
    return fig, layout


def _legend(ax: Axes, layout: TagLayout) -> None:
    handles = [
        Patch(fc=FILL["visual"], ec=INK, lw=1.4, label="root concept (layer 0), image"),
        Patch(fc=FILL["textual"], ec=INK, lw=1.4, label="root concept (layer 0), text"),
        Patch(fc="white", ec=INK, lw=0.7, ls=(0, (4, 1.5)), label="associated concept (path p: product of edges)"),
        Patch(fc="white", ec=HIGHLIGHT, lw=2.2, label="on a toxic path"),
        Patch(fc=PAIR_FILL, ec=HIGHLIGHT, lw=2.2, label="node of the toxic pair"),
        Line2D([], [], color=EDGE, lw=0.9, label="association edge, labelled 'p \u00b7 type'"),
        Line2D([], [], color=HIGHLIGHT, lw=2.2, label="edge on a toxic path"),
        Line2D([], [], color=HIGHLIGHT, lw=2.0, ls=(0, (5, 2.5)), label="cross-modal toxic link"),
    ]
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(MARGIN / layout.width, 0.12 / layout.height),
        ncol=4 if layout.width > 11 else 2,
        fontsize=7.5,
        frameon=True,
        framealpha=1.0,
        edgecolor="#d5d8dc",
        title=f"p: transition probability; types: {', '.join(ASSOCIATION_TYPES)}",
        title_fontsize=7.5,
    )


def _draw_verdict_only(result: dict[str, Any]) -> Figure:
    """A result with no association trees (the vanilla detector): the verdict, category and reason, nothing more."""
    failed = result.get("status") == "failed"
    toxic = bool(result.get("toxic")) and not failed
    method = result.get("method") or "vanilla (single call)"
    reason = (
        (result.get("error") if failed else None)
        or result.get("reason")
        or result.get("explanation")
        or "(no reason given)"
    )
    lines = wrap_text(reason, 90, 12)
    height = 1.9 + 0.2 * len(lines)
    fig = plt.figure(figsize=(8.0, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, 8.0)
    ax.set_ylim(0, height)
    ax.axis("off")
    verdict = (
        f"TOXIC \u2014 category: {result.get('category') or 'unnamed'}"
        if toxic
        else "FAILED: no verdict"
        if failed
        else "Not toxic"
    )
    ax.text(0.35, height - 0.35, verdict, fontsize=14, weight="bold", va="center", color=HIGHLIGHT if toxic else INK)
    ax.text(
        0.35,
        height - 0.72,
        f"Detector: {method}. This method builds no association graph, so there is no tree, path or MTC to show.",
        fontsize=8.5,
        va="center",
        color="#7f8c8d",
    )
    ax.text(0.35, height - 1.05, "Error:" if failed else "Reason:", fontsize=9.5, weight="bold", va="top", color=INK)
    ax.text(0.35, height - 1.3, "\n".join(lines), fontsize=9, va="top", color=INK, linespacing=1.4)
    return fig


def _has_trees(result: dict[str, Any]) -> bool:
    visual, textual = tag_trees(result)
    return bool(visual or textual)


RENDER_FORMATS = (".png", ".svg", ".pdf")


def check_render_path(path: str | Path) -> Path:
    """`path` if its extension names a format the picture can be written in; else a ValueError naming the file
    (matplotlib would otherwise write some other file, e.g. `tag` -> `tag.png`)."""
    out = Path(path)
    if out.suffix.lower() not in RENDER_FORMATS:
        raise ValueError(f"--render {str(path)!r}: the file name must end in {', '.join(RENDER_FORMATS)}")
    return out


def render_tag(result: dict[str, Any], path: str | Path) -> Path:
    """Draw `result` (an `unveil detect --json` record, TAG or vanilla) to `path` (.png, .svg or .pdf)."""
    out = check_render_path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Real text in SVG and PDF, so concepts can be searched and copied from the picture; `$...$` is text, not TeX
    # (see `draw_tag`).
    with plt.rc_context(
        {
            "svg.fonttype": "none",
            "pdf.fonttype": 42,
            "font.family": "DejaVu Sans",
            "text.parse_math": False,
            "text.usetex": False,
        }
    ):
        fig = _draw_tag(result)[0] if _has_trees(result) else _draw_verdict_only(result)
        try:
            fig.savefig(out, dpi=150)
        finally:
            plt.close(fig)
    return out


def draw_tag(result: dict[str, Any]) -> tuple[Figure, TagLayout | None]:
    """The figure (and, for a TAG result, its layout) that `render_tag` saves; the caller closes the figure."""
    # Concepts, reasons and explanations are model output and user text, drawn as they are: `$...$` is not TeX
    # (matplotlib's mathtext read `$\\x$` as a formula and the save failed), whichever text it lies in. The
    # settings are read when each text is made; `render_tag` sets them too.
    with plt.rc_context({"text.parse_math": False, "text.usetex": False}):
        if _has_trees(result):
            return _draw_tag(result)
        return _draw_verdict_only(result), None
