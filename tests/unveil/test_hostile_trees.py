"""A detection record whose tree is not a tree (a parent cycle, a dangling parent) is one clear error for that
record, in the web app's loader and in the renderer, never a walk that spins for ever."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from graphs.tag.tree_check import TreeError, check_tree, check_trees


def _node(node_id: str, parent: Any, layer: int) -> dict[str, Any]:
    return {"id": node_id, "concept": node_id, "layer": layer, "parent": parent, "prob": 1.0, "path_prob": 1.0}


GOOD = [_node("v0.0", None, 0), _node("v1.0", "v0.0", 1), _node("v2.0", "v1.0", 2)]


@pytest.mark.parametrize(
    "nodes, match",
    [
        ([_node("a", "a", 0)], r"parent cycle 'a' -> 'a'"),
        ([_node("r", None, 0), _node("a", "b", 1), _node("b", "a", 2)], r"parent cycle 'a' -> 'b' -> 'a'"),
        ([_node(f"n{i}", f"n{(i + 1) % 500}", i) for i in range(500)], "parent cycle"),
        ([_node("a", None, 0), _node("b", "nowhere", 1)], r"node 'b' names parent 'nowhere'"),
        ([_node("a", None, 0), _node("b", 7, 1)], "names parent 7"),
        ([_node("a", None, 0), _node("a", None, 0)], "'a' appears twice"),
        ([{"concept": "no id"}], "node 0 has no string id"),
        ("not a list", "expected a list"),
    ],
)
def test_a_malformed_tree_is_one_error_naming_the_node(nodes: Any, match: str) -> None:
    with pytest.raises(TreeError, match=match):
        check_tree(nodes, side="visual", where="record 's1'")


def test_a_good_tree_passes_in_either_record_form() -> None:
    check_tree(GOOD, side="visual")
    check_trees({"id": "x", "trees": {"visual": GOOD, "textual": []}})
    check_trees({"id": "x", "visual": GOOD, "textual": GOOD})
    with pytest.raises(TreeError, match="record 'x': textual tree"):
        check_trees({"id": "x", "trees": {"visual": GOOD, "textual": [_node("t", "t", 0)]}})


def _results(tmp_path: Path) -> Path:
    cyc = [_node("v0.0", "v1.0", 0), _node("v1.0", "v0.0", 1)]
    recs = [
        {
            "id": "bad",
            "status": "ok",
            "toxic": True,
            "mtc": 0.5,
            "trees": {"visual": cyc, "textual": GOOD},
            "finding": {"visual": {"id": "v1.0", "concept": "x"}, "textual": {"id": "v2.0", "concept": "y"}},
        },
        {
            "id": "good",
            "status": "ok",
            "toxic": True,
            "mtc": 0.5,
            "trees": {"visual": GOOD, "textual": GOOD},
            "finding": {"visual": {"id": "v2.0", "concept": "x"}, "textual": {"id": "v2.0", "concept": "y"}},
        },
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_the_web_app_loader_shows_a_cycle_as_a_bad_record_and_does_not_spin(tmp_path: Path) -> None:
    from unveil.ui.sources import DetectionSource

    source = DetectionSource(_results(tmp_path))
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(source.record("bad")), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the loader spins on a parent cycle"
    (bad,) = out
    assert "record 'bad': visual tree: parent cycle" in bad["error"]
    assert bad["trees_view"] == {"visual": [], "textual": []}
    good = source.record("good")
    assert not good.get("error") and [n["id"] for n in good["trees_view"]["visual"]] == ["v0.0", "v1.0", "v2.0"]


def test_the_renderer_refuses_the_same_record(tmp_path: Path) -> None:
    from unveil.render import render_tag

    bad = json.loads(_results(tmp_path).read_text().splitlines()[0])
    with pytest.raises(TreeError, match="record 'bad': visual tree: parent cycle"):
        render_tag(bad, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
