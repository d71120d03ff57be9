"""The TAG picture: layout properties on the computed positions of large trees, real text extents, and a
truthful picture of results without trees."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from agents.tag.types import ASSOCIATION_TYPES
from unveil.render import Box, TagLayout, draw_tag, layout_tag, render_tag

TYPES = list(ASSOCIATION_TYPES)
WORDS = [
    "flange",
    "industrial component",
    "precision-engineered machine part",
    "weapon component",
    "kitchen",
    "selling weaponized component",
    "items with undefined function",
    "illegal modification",
    "lathe",
    "white powder",
    "cocaine",
    "drug deal",
    "shipping container",
    "smuggling route",
    "firearm receiver",
    "CNC machining of restricted parts without a licence or any paperwork at all",
    "dark web market",
    "Supercalifragilisticexpialidociouslylongword",
    "export control evasion",
    "cash",
]


def _tree(
    rng: random.Random, prefix: str, roots: int, *, k_max: int = 6, layers: int = 5, per: int = 3
) -> list[dict[str, Any]]:
    """A tree grown as the TAG graph grows it: up to `per` children a parent, the k_max most probable kept."""
    nodes: list[dict[str, Any]] = [
        {
            "id": f"{prefix}0.{i}",
            "concept": rng.choice(WORDS),
            "layer": 0,
            "parent": None,
            "association": None,
            "prob": 1.0,
            "path_prob": 1.0,
        }
        for i in range(roots)
    ]
    frontier = list(nodes)
    for layer in range(1, layers):
        cands: list[dict[str, Any]] = []
        for p in frontier:
            ws = [rng.random() + 0.01 for _ in range(rng.randint(1, per))]
            for w in ws:
                q = w / sum(ws)
                cands.append(
                    {
                        "concept": rng.choice(WORDS),
                        "layer": layer,
                        "parent": p["id"],
                        "association": rng.choice(TYPES),
                        "prob": q,
                        "path_prob": p["path_prob"] * q,
                    }
                )
        cands.sort(key=lambda c: -c["path_prob"])
        frontier = cands[:k_max]
        for j, c in enumerate(frontier):
            c["id"] = f"{prefix}{layer}.{j}"
        nodes += frontier
    return nodes


def _path(nodes: list[dict[str, Any]], node_id: str) -> list[dict[str, Any]]:
    by = {n["id"]: n for n in nodes}
    out = []
    cur: str | None = node_id
    while cur:
        out.append(by[cur])
        cur = by[cur]["parent"]
    return [{"concept": n["concept"], "association": n["association"], "prob": n["prob"]} for n in reversed(out)]


def big_tag(seed: int) -> dict[str, Any]:
    """A 6x4 TAG (k_max 6, four expanded layers under the roots) with a deep toxic pair."""
    rng = random.Random(seed)
    visual, textual = _tree(rng, "v", rng.randint(1, 4)), _tree(rng, "t", rng.randint(1, 4))
    v = rng.choice([n for n in visual if n["layer"] == 4])
    t = rng.choice([n for n in textual if n["layer"] >= 1])
    joint = v["path_prob"] * t["path_prob"]
    return {
        "toxic": True,
        "mtc": 1 - joint,
        "trees": {"visual": visual, "textual": textual},
        "finding": {
            "layer": 4,
            "category": "weapons",
            "reason": "flange read as a weapon part",
            "joint_prob": joint,
            "visual": {
                "id": v["id"],
                "concept": v["concept"],
                "path_prob": v["path_prob"],
                "path": _path(visual, v["id"]),
            },
            "textual": {
                "id": t["id"],
                "concept": t["concept"],
                "path_prob": t["path_prob"],
                "path": _path(textual, t["id"]),
            },
        },
        "explanation": "The text path and the image path meet at weapon smuggling. " * 8,
    }


SEEDS = list(range(12))


def _edges(layout: TagLayout) -> list[tuple[str, str]]:
    return [(p, c) for c, p in layout.parent.items() if p is not None]


def _segments_cross(
    a: tuple[tuple[float, float], tuple[float, float]], b: tuple[tuple[float, float], tuple[float, float]]
) -> bool:
    def orient(p: tuple[float, float], q: tuple[float, float], r: tuple[float, float]) -> float:
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    (p1, p2), (q1, q2) = a, b
    d1, d2 = orient(q1, q2, p1), orient(q1, q2, p2)
    d3, d4 = orient(p1, p2, q1), orient(p1, p2, q2)
    return d1 * d2 < 0 and d3 * d4 < 0


def _segment_hits_box(p: tuple[float, float], q: tuple[float, float], box: Box, shrink: float = 0.01) -> bool:
    """Whether an axis-parallel segment passes through the inside of a box."""
    (x1, y1), (x2, y2) = p, q
    lo_x, hi_x, lo_y, hi_y = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
    return (
        lo_x < box.right - shrink
        and hi_x > box.left + shrink
        and lo_y < box.top - shrink
        and hi_y > box.bottom + shrink
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_children_sit_centred_under_their_parents(seed: int) -> None:
    layout = layout_tag(big_tag(seed))
    kids: dict[str, list[str]] = {}
    for p, c in _edges(layout):
        kids.setdefault(p, []).append(c)
        assert layout.boxes[c].y < layout.boxes[p].y  # one row down
        assert layout.tree[c] == layout.tree[p]
    for p, cs in kids.items():
        xs = [layout.boxes[c].x for c in cs]
        assert layout.boxes[p].x == pytest.approx((min(xs) + max(xs)) / 2), f"{p} is not centred over {cs}"


@pytest.mark.parametrize("seed", SEEDS)
def test_rows_are_layers_and_labelled(seed: int) -> None:
    result = big_tag(seed)
    layout = layout_tag(result)
    for n in result["trees"]["visual"] + result["trees"]["textual"]:
        assert layout.boxes[n["id"]].y == pytest.approx(layout.row_y[n["layer"]])
    assert sorted(layout.row_y) == [0, 1, 2, 3, 4]
    assert all(layout.row_y[i] > layout.row_y[i + 1] for i in range(4))


@pytest.mark.parametrize("seed", SEEDS)
def test_no_boxes_or_labels_overlap(seed: int) -> None:
    layout = layout_tag(big_tag(seed))
    boxes = list(layout.boxes.values()) + list(layout.edge_labels.values())
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b, pad=0.02), (a, b)
    # The two trees do not share any column.
    (_, v_right), (t_left, _) = layout.tree_span["visual"], layout.tree_span["textual"]
    assert v_right < t_left
    for node_id, box in layout.boxes.items():
        lo, hi = layout.tree_span[layout.tree[node_id]]
        assert lo - 1e-9 <= box.left and box.right <= hi + 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_no_edges_cross_and_labels_sit_on_their_edge(seed: int) -> None:
    layout = layout_tag(big_tag(seed))
    segs = {
        c: ((layout.boxes[p].x, layout.boxes[p].bottom), (layout.boxes[c].x, layout.boxes[c].top))
        for p, c in _edges(layout)
    }
    for a, b in itertools.combinations(segs, 2):
        assert not _segments_cross(segs[a], segs[b]), (a, b)
    for c, ((x1, y1), (x2, y2)) in segs.items():
        lab = layout.edge_labels[c]
        t = (lab.y - y2) / (y1 - y2)
        assert 0 < t < 1 and lab.x == pytest.approx(x2 + (x1 - x2) * t)
        # ...and no edge runs through a box other than its own two ends.
        for node_id, box in layout.boxes.items():
            if node_id not in (c, layout.parent[c]):
                assert not _segment_hits_box((x1, y1), (x2, y2), box) or not _line_hits_box(segs[c], box), node_id


def _line_hits_box(seg: tuple[tuple[float, float], tuple[float, float]], box: Box) -> bool:
    (x1, y1), (x2, y2) = seg
    for i in range(201):
        t = i / 200
        x, y = x1 + (x2 - x1) * t, y1 + (y2 - y1) * t
        if box.left < x < box.right and box.bottom < y < box.top:
            return True
    return False


@pytest.mark.parametrize("seed", SEEDS)
def test_the_toxic_link_passes_through_no_other_node_or_label(seed: int) -> None:
    result = big_tag(seed)
    layout = layout_tag(result)
    v_id, t_id = result["finding"]["visual"]["id"], result["finding"]["textual"]["id"]
    link = layout.link
    assert link, "no link drawn for a toxic pair"
    assert all(a[0] == b[0] or a[1] == b[1] for a, b in itertools.pairwise(link))  # axis-parallel runs
    # It starts on the visual node's bottom edge and ends on the textual node's.
    assert link[0][1] == pytest.approx(layout.boxes[v_id].bottom)
    assert layout.boxes[v_id].left < link[0][0] < layout.boxes[v_id].right
    assert link[-1][1] == pytest.approx(layout.boxes[t_id].bottom)
    assert layout.boxes[t_id].left < link[-1][0] < layout.boxes[t_id].right
    for a, b in itertools.pairwise(link):
        for node_id, box in layout.boxes.items():
            assert not _segment_hits_box(a, b, box), f"the link runs through {node_id}"
        for child, lab in layout.edge_labels.items():
            assert not _segment_hits_box(a, b, lab), f"the link runs through the label of {child}"


def small_tag() -> dict[str, Any]:
    """The smallest interesting TAG: one root a side, one layer, a toxic pair at layer 1."""
    visual = [
        {
            "id": "v0.0",
            "concept": "white powder",
            "layer": 0,
            "parent": None,
            "association": None,
            "prob": 1.0,
            "path_prob": 1.0,
        },
        {
            "id": "v1.0",
            "concept": "cocaine",
            "layer": 1,
            "parent": "v0.0",
            "association": "similarity",
            "prob": 0.4,
            "path_prob": 0.4,
        },
    ]
    textual = [
        {
            "id": "t0.0",
            "concept": "usual number",
            "layer": 0,
            "parent": None,
            "association": None,
            "prob": 1.0,
            "path_prob": 1.0,
        },
        {
            "id": "t1.0",
            "concept": "dealer contact",
            "layer": 1,
            "parent": "t0.0",
            "association": "cultural",
            "prob": 1.0,
            "path_prob": 1.0,
        },
    ]
    return {
        "toxic": True,
        "mtc": 0.6,
        "trees": {"visual": visual, "textual": textual},
        "finding": {
            "layer": 1,
            "category": "drugs",
            "reason": "sale",
            "visual": {"id": "v1.0", "path": _path(visual, "v1.0")},
            "textual": {"id": "t1.0", "path": _path(textual, "t1.0")},
        },
        "explanation": "white powder -> cocaine; usual number -> dealer contact",
    }


@pytest.mark.parametrize("seed", [*SEEDS, "small"])
def test_drawn_text_fits_its_box_and_no_texts_overlap(seed: int | str) -> None:
    result = small_tag() if seed == "small" else big_tag(int(seed))
    fig, layout = draw_tag(result)
    assert layout is not None
    try:
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        ax = fig.axes[0]
        to_inches = fig.dpi_scale_trans.inverted()
        extents = [(t.get_text(), t.get_window_extent(renderer).transformed(to_inches)) for t in ax.texts]
        by_place = {
            (round(t.get_position()[0], 6), round(t.get_position()[1], 6), t.get_text()): ext
            for t, (_, ext) in zip(ax.texts, extents, strict=True)
        }
        for node_id, box in layout.boxes.items():
            ext = by_place[(round(box.x, 6), round(box.y, 6), layout.texts[node_id])]
            assert box.left <= ext.x0 and ext.x1 <= box.right, (layout.texts[node_id], ext, box)
            assert box.bottom <= ext.y0 and ext.y1 <= box.top, (layout.texts[node_id], ext, box)
        for (ta, a), (tb, b) in itertools.combinations(extents, 2):
            assert not a.overlaps(b), (ta, tb)
        for text, ext in extents:  # nothing is cut off at the figure's edges
            assert 0 <= ext.x0 and ext.x1 <= layout.width and 0 <= ext.y0 and ext.y1 <= layout.height, text
        legend_artist = ax.get_legend()
        assert legend_artist is not None
        legend = legend_artist.get_window_extent(renderer).transformed(to_inches)
        assert legend.y1 < min(b.bottom for b in layout.boxes.values())  # the legend is off the trees
        assert 0 <= legend.x0 and legend.x1 <= layout.width and 0 <= legend.y0
        texts = {t for t, _ in extents}
        assert {"layer 0\n(roots)", "layer 1"} <= texts
        assert any(t.startswith("MTC = 1 \u2212") for t in texts)
        legend_texts = [t.get_text() for t in legend_artist.get_texts()]
        assert any("toxic link" in t for t in legend_texts) and any("p \u00b7 type" in t for t in legend_texts)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("ext", ["png", "svg", "pdf"])
def test_every_format_is_written(tmp_path: Path, ext: str) -> None:
    out = render_tag(big_tag(3), tmp_path / f"tag.{ext}")
    head = out.read_bytes()[:8]
    assert head.startswith({"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[ext])
    if ext == "svg":
        text = out.read_text()
        assert "Visual association tree" in text and "weapons" in text  # real, searchable text


def test_a_vanilla_result_is_drawn_as_what_it_is(tmp_path: Path) -> None:
    rec = {"toxic": True, "category": "drugs", "reason": "an offer to sell cocaine", "models": {}}
    text = render_tag(rec, tmp_path / "v.svg").read_text()
    assert "TOXIC" in text and "drugs" in text and "an offer to sell cocaine" in text
    assert "No toxic pair" not in text and "MTC = 1.00" not in text
    benign = render_tag({"toxic": False, "category": None, "reason": "a picnic"}, tmp_path / "b.svg").read_text()
    assert "Not toxic" in benign and "TOXIC" not in benign


def test_a_tag_without_finding_says_so(tmp_path: Path) -> None:
    rec = big_tag(1)
    rec.update(toxic=False, mtc=1.0, finding=None, explanation="No toxic cross-modal association was found.")
    layout = layout_tag(rec)
    assert layout.link == []
    text = render_tag(rec, tmp_path / "n.svg").read_text()
    assert "Not toxic" in text and "no toxic pair found" in text and "TOXIC" not in text


def test_cli_vanilla_render_matches_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from unveil.cli import main

    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "vanilla_detector": [
                    {
                        "when": "",
                        "then": {"toxic": True, "category": "drugs", "reason": "white powder with a dealer's number"},
                    }
                ]
            }
        )
    )
    svg = tmp_path / "v.svg"
    rc = main(
        [
            "detect",
            "--method",
            "vanilla",
            "--model",
            f"scripted:{script}",
            "--image-description",
            "white powder",
            "--text",
            "call the usual number",
            "--render",
            str(svg),
        ]
    )
    assert rc == 0
    text = svg.read_text()
    assert "TOXIC" in text and "drugs" in text and "dealer" in text and "No toxic pair" not in text


def test_a_hand_edited_cycle_or_orphan_is_one_clear_error(tmp_path: Path) -> None:
    from graphs.tag.tree_check import TreeError

    cycle = small_tag()
    cycle["trees"]["visual"][0]["parent"] = "v1.0"  # root points at its own child: a cycle
    orphan = small_tag()
    orphan["trees"]["textual"][1]["parent"] = "nowhere"
    for rec, match in (
        (cycle, r"visual tree: parent cycle 'v0.0' -> 'v1.0' -> 'v0.0'"),
        (orphan, "textual tree: node 't1.0' names parent 'nowhere'"),
    ):
        with pytest.raises(TreeError, match=match):
            layout_tag(rec)
        with pytest.raises(TreeError, match=match):
            render_tag(rec, tmp_path / "c.png")


def test_a_failed_record_is_not_drawn_as_a_verdict(tmp_path: Path) -> None:
    text = render_tag({"status": "failed", "error": "backend down", "toxic": False}, tmp_path / "f.svg").read_text()
    assert "FAILED" in text and "backend down" in text and "Not toxic" not in text


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_dollar_signs_in_concepts_are_text_not_tex(tmp_path: Path, ext: str) -> None:
    """`$...$` in a concept, an edge type, the explanation or a reason broke the picture (matplotlib's mathtext
    parsed it and the save failed): every drawn text is plain."""
    rec = big_tag(2)
    weird = ["$\\badcommand{x}$", "costs $5 and $10", "$x^2$", "a lone $", "\\$ and $$"]
    for node, text in zip(rec["trees"]["visual"] + rec["trees"]["textual"], itertools.cycle(weird), strict=False):
        node["concept"] = text
    rec["explanation"] = "the $\\frac{a}{$ pair"
    out = render_tag(rec, tmp_path / f"tag.{ext}")
    assert out.stat().st_size > 0
    if ext == "svg":
        assert "$\\badcommand{x}$" in out.read_text()
    vanilla = {"toxic": True, "category": "fraud", "reason": "send $\\unknown$ to win $100"}
    assert "$\\unknown$" in render_tag(vanilla, tmp_path / "v.svg").read_text()
