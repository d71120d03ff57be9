"""The geometry of a TAG picture (`layout_tag`), computed without drawing it: `unveil.render` draws it.

The trees use a tidy layered layout (Reingold-Tilford style): every parent is centred over its children, the
subtrees of siblings are packed as close as their contours allow and never interleave, so no two edges of a
tree cross and no two nodes overlap. All coordinates are in inches on a figure of exactly the drawing's size,
which keeps the geometry checkable (`layout_tag`) and every font at its nominal size.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from graphs.tag.tree_check import check_trees, record_trees

NODE_FONT = 7.5  # points
LABEL_FONT = 6.5
NODE_W = 1.45  # inches; one width for every node keeps the rows even and the contours simple
NODE_CHARS = 20  # characters per line that fit NODE_W at NODE_FONT (checked by the tests with real extents)
NODE_LINES = 3  # concept lines at most; longer concepts end in an ellipsis
LINE_H = NODE_FONT * 1.3 / 72
SIBLING_GAP = 0.3  # between node boxes of one row
GUTTER = 1.1  # between the two trees: the toxic link runs down here
LANE_DROP = 0.1  # the link's horizontal lanes run this far under a row's lowest box edge
LABEL_RISE = 0.2  # edge labels sit this far above the child's top, on the edge line
ROW_GAP = 0.75  # between the lowest box edge of a row and the highest of the next: lane, labels, air
MARGIN = 0.35
LEFT = 1.0  # room for the layer labels
MIN_TREE_W = 3.2  # the width of a tree's title
MIN_WIDTH = 10.0  # the width of the two-column legend and its title


@dataclass
class Box:
    """A rectangle by its centre and size, in inches."""

    x: float
    y: float
    w: float
    h: float

    @property
    def left(self) -> float:
        """Left edge."""
        return self.x - self.w / 2

    @property
    def right(self) -> float:
        """Right edge."""
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        """Bottom edge."""
        return self.y - self.h / 2

    @property
    def top(self) -> float:
        """Top edge."""
        return self.y + self.h / 2

    def overlaps(self, other: Box, pad: float = 0.0) -> bool:
        """Whether the two rectangles (each grown by `pad`) intersect."""
        return (
            self.left - pad < other.right
            and other.left - pad < self.right
            and self.bottom - pad < other.top
            and other.bottom - pad < self.top
        )


@dataclass
class TagLayout:
    """Where everything of a TAG picture goes, in inches from the figure's bottom-left corner."""

    width: float
    height: float
    boxes: dict[str, Box]  # node id -> its box
    texts: dict[str, str]  # node id -> the text drawn in it
    parent: dict[str, str | None]
    tree: dict[str, str]  # node id -> "visual" or "textual"
    edge_labels: dict[str, Box]  # child id -> the box of its edge's label
    edge_texts: dict[str, str]
    row_y: dict[int, float]  # layer -> centre line of that row
    tree_span: dict[str, tuple[float, float]]  # tree -> (left, right) of its boxes
    link: list[tuple[float, float]] = field(default_factory=list)  # the toxic link's polyline, or empty
    top: float = 0.0  # y under the header


def wrap_text(text: str, width: int, lines: int) -> list[str]:
    """`text` on at most `lines` lines of `width` characters, the last cut with an ellipsis when it runs over."""
    out = textwrap.wrap(" ".join(str(text).split()), width) or [""]
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 1].rstrip() + "\u2026"
    return out


def _node_text(node: dict[str, Any]) -> str:
    lines = wrap_text(node.get("concept", ""), NODE_CHARS, NODE_LINES)
    if node.get("layer", 0) > 0:
        lines.append(f"path p = {float(node.get('path_prob', 0.0)):.3g}")
    return "\n".join(lines)


def _edge_text(node: dict[str, Any]) -> str:
    assoc = node.get("association") or ""
    return f"{float(node.get('prob', 0.0)):.2f} \u00b7 {assoc}" if assoc else f"{float(node.get('prob', 0.0)):.2f}"


def _children(nodes: Sequence[dict[str, Any]]) -> tuple[list[str], dict[str, list[str]]]:
    """Roots and children lists (the trees were checked: no cycle, no dangling parent); a node whose parent is not
    in a shallower layer is treated as a root, so nothing is dropped and the layout always terminates."""
    layer_of = {n["id"]: int(n.get("layer", 0)) for n in nodes}
    kids: dict[str, list[str]] = {n["id"]: [] for n in nodes}
    roots: list[str] = []
    # Children in order of their parent's rank, then their own: the order of the record (ranked by the graph).
    for n in sorted(nodes, key=lambda n: int(n.get("layer", 0))):
        parent = n.get("parent")
        if isinstance(parent, str) and parent in layer_of and layer_of[parent] < layer_of[n["id"]]:
            kids[parent].append(n["id"])
        else:
            roots.append(n["id"])
    return roots, kids


Contour = dict[int, tuple[float, float]]  # depth below the subtree's root -> (leftmost, rightmost) centre


def _pack(
    subtrees: list[tuple[dict[str, float], Contour]], slot: float
) -> tuple[dict[str, float], Contour, list[float]]:
    """Place subtrees left to right, each as far left as its contour allows; returns positions, merged contour and
    the offset of each subtree."""
    pos: dict[str, float] = {}
    merged: Contour = {}
    offsets: list[float] = []
    for sub_pos, contour in subtrees:
        offset = 0.0
        if merged:
            offset = max(merged[d][1] - contour[d][0] + slot for d in contour if d in merged)
        offsets.append(offset)
        for k, x in sub_pos.items():
            pos[k] = x + offset
        for d, (lo, hi) in contour.items():
            if d in merged:
                merged[d] = (min(merged[d][0], lo + offset), max(merged[d][1], hi + offset))
            else:
                merged[d] = (lo + offset, hi + offset)
    return pos, merged, offsets


def _tidy(node_id: str, kids: dict[str, list[str]], slot: float) -> tuple[dict[str, float], Contour]:
    """x of every node of a subtree relative to its root (at 0), with the subtree's contour."""
    if not kids[node_id]:
        return {node_id: 0.0}, {0: (0.0, 0.0)}
    pos, merged, offsets = _pack([_tidy(k, kids, slot) for k in kids[node_id]], slot)
    centre = (offsets[0] + offsets[-1]) / 2  # each child subtree's root sits at its offset
    out = {k: x - centre for k, x in pos.items()}
    out[node_id] = 0.0
    contour: Contour = {0: (0.0, 0.0)}
    for d, (lo, hi) in merged.items():
        contour[d + 1] = (lo - centre, hi - centre)
    return out, contour


def _tree_x(nodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """x of every node of one modality's forest, leftmost box edge at 0."""
    if not nodes:
        return {}
    roots, kids = _children(nodes)
    slot = NODE_W + SIBLING_GAP
    pos, _, _ = _pack([_tidy(r, kids, slot) for r in roots], slot)
    lo = min(pos.values()) - NODE_W / 2
    return {k: x - lo for k, x in pos.items()}


def path_ids(nodes: Sequence[dict[str, Any]], node_id: str | None) -> set[str]:
    """The ids on the path from `node_id` up to its root (each once, even where parents form a cycle)."""
    by_id = {n["id"]: n for n in nodes}
    out: set[str] = set()
    while node_id is not None and node_id in by_id and node_id not in out:
        out.add(node_id)
        node_id = by_id[node_id].get("parent")
    return out


def tag_trees(result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The visual and the textual tree of a detection record, checked first (`graphs.tag.tree_check`)."""
    check_trees(result)  # a cycle or a dangling parent is one clear error, before any walk up the parents
    trees = record_trees(result)
    return list(trees.get("visual") or []), list(trees.get("textual") or [])


HEADER_H = 1.2
FOOTER_LINES = 5
LEGEND_H = 0.9


def _rows(
    all_nodes: list[dict[str, Any]], heights: dict[str, float]
) -> tuple[dict[int, float], dict[int, float], float]:
    """Step 1 of the layout: the height of each layer's band (its tallest box), the centre line of each row and
    the figure's height (header, tree titles, rows, footer)."""
    layers = sorted({int(n.get("layer", 0)) for n in all_nodes}) or [0]
    depth = max(layers) + 1
    band = {
        layer: max([heights[n["id"]] for n in all_nodes if int(n.get("layer", 0)) == layer] or [0.4])
        for layer in range(depth)
    }
    footer = FOOTER_LINES * 0.16 + LEGEND_H + 0.3
    body = sum(band.values()) + ROW_GAP * (depth - 1)
    height = HEADER_H + 0.45 + body + footer  # 0.45: the tree titles
    row_y: dict[int, float] = {}
    y = height - HEADER_H - 0.45
    for layer in range(depth):
        row_y[layer] = y - band[layer] / 2
        y -= band[layer] + ROW_GAP
    return band, row_y, height


def _place_trees(
    nodes: dict[str, list[dict[str, Any]]], heights: dict[str, float], row_y: dict[int, float]
) -> tuple[dict[str, Box], dict[str, str], dict[str, tuple[float, float]], float]:
    """Step 2: the box of every node, the tree it belongs to, each tree's span and the figure's width. The visual
    tree goes left, the textual right, with the gutter between; a narrow drawing is centred in the minimum width."""
    boxes: dict[str, Box] = {}
    tree_of: dict[str, str] = {}
    spans: dict[str, tuple[float, float]] = {}
    x0 = MARGIN + LEFT
    for name in ("visual", "textual"):
        xs = _tree_x(nodes[name])
        drawn_w = max([x + NODE_W / 2 for x in xs.values()] or [NODE_W])
        span_w = max(drawn_w, MIN_TREE_W)  # a narrow tree still gets room for its title, and sits centred in it
        shift = (span_w - drawn_w) / 2
        for n in nodes[name]:
            boxes[n["id"]] = Box(x0 + shift + xs[n["id"]], row_y[int(n.get("layer", 0))], NODE_W, heights[n["id"]])
            tree_of[n["id"]] = name
        spans[name] = (x0, x0 + span_w)
        x0 += span_w + GUTTER
    width = x0 - GUTTER + MARGIN
    if width < MIN_WIDTH:  # room for the legend and the header: centre the drawing instead of squeezing them
        pad = (MIN_WIDTH - width) / 2
        boxes = {k: Box(b.x + pad, b.y, b.w, b.h) for k, b in boxes.items()}
        spans = {k: (lo + pad, hi + pad) for k, (lo, hi) in spans.items()}
        width = MIN_WIDTH
    return boxes, tree_of, spans, width


def _parents(nodes: dict[str, list[dict[str, Any]]]) -> dict[str, str | None]:
    """Step 3: each node's parent as drawn (None for a root, and for a node `_children` treats as one)."""
    parent: dict[str, str | None] = {n["id"]: None for name in ("visual", "textual") for n in nodes[name]}
    for name in ("visual", "textual"):
        _, kids = _children(nodes[name])
        for p_id, cs in kids.items():
            for c in cs:
                parent[c] = p_id
    return parent


def _edge_labels(
    all_nodes: list[dict[str, Any]], parent: dict[str, str | None], boxes: dict[str, Box]
) -> tuple[dict[str, Box], dict[str, str]]:
    """Step 4: the box and text of each edge's label (probability and association type), keyed by the child."""
    labels: dict[str, Box] = {}
    edge_texts: dict[str, str] = {}
    for n in all_nodes:
        p = parent[n["id"]]
        if p is None:
            continue
        child, par = boxes[n["id"]], boxes[p]
        text = _edge_text(n)
        # On the edge line, a fixed rise above the child: siblings' labels stay apart (they fan in towards the
        # parent, but only over LABEL_RISE of the whole drop) and clear of the link lane under the parent row.
        y_lab = child.top + LABEL_RISE
        t = (y_lab - child.top) / max(par.bottom - child.top, 1e-6)
        x_lab = child.x + (par.x - child.x) * t
        labels[n["id"]] = Box(x_lab, y_lab, len(text) * LABEL_FONT * 0.55 / 72 + 0.06, LABEL_FONT * 1.35 / 72)
        edge_texts[n["id"]] = text
    return labels, edge_texts


def layout_tag(result: dict[str, Any]) -> TagLayout:
    """The geometry of a TAG picture (boxes, edge labels, rows, the toxic link) without drawing it: rows, boxes,
    parents, edge labels, then the link between the reported pair's nodes (step 5, `_route_link`)."""
    visual, textual = tag_trees(result)
    nodes = {"visual": visual, "textual": textual}
    texts = {n["id"]: _node_text(n) for n in visual + textual}
    heights = {k: len(t.split("\n")) * LINE_H + 0.14 for k, t in texts.items()}
    band, row_y, height = _rows(visual + textual, heights)
    boxes, tree_of, spans, width = _place_trees(nodes, heights, row_y)
    parent = _parents(nodes)
    labels, edge_texts = _edge_labels(visual + textual, parent, boxes)
    layout = TagLayout(
        width=width,
        height=height,
        boxes=boxes,
        texts=texts,
        parent=parent,
        tree=tree_of,
        edge_labels=labels,
        edge_texts=edge_texts,
        row_y=row_y,
        tree_span=spans,
        top=height - HEADER_H,
    )
    finding = result.get("finding") or {}
    v_id = (finding.get("visual") or {}).get("id")
    t_id = (finding.get("textual") or {}).get("id")
    if v_id in boxes and t_id in boxes:
        layout.link = _route_link(layout, v_id, t_id, band)
    return layout


def _route_link(layout: TagLayout, v_id: str, t_id: str, band: dict[int, float]) -> list[tuple[float, float]]:
    """The toxic link: down from each node into the lane just under its row, along the lane to the gutter
    between the trees, and along the gutter. Lanes hold no boxes and no labels, and the gutter holds nothing."""
    v, t = layout.boxes[v_id], layout.boxes[t_id]
    gutter_x = (layout.tree_span["visual"][1] + layout.tree_span["textual"][0]) / 2

    def lane(box: Box) -> float:
        layer = min(layout.row_y, key=lambda k: abs(layout.row_y[k] - box.y))
        return layout.row_y[layer] - band[layer] / 2 - LANE_DROP

    lv, lt = lane(v), lane(t)
    # Leave each box off-centre, on the gutter's side: the bottom centre is where the node's own edges start.
    xv, xt = v.right - 0.2, t.left + 0.2
    return [(xv, v.bottom), (xv, lv), (gutter_x, lv), (gutter_x, lt), (xt, lt), (xt, t.bottom)]
