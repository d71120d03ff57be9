"""TAG bookkeeping on hand-built trees: normalisation, k_max trimming, new pairs, pair choice, MTC."""

from __future__ import annotations

import pytest

from agents.tag.types import ASSOCIATION_TYPES
from graphs.tag.tree import best_pair, grow_layer, make_roots, mtc_score, new_pairs, path_of

ALL = list(ASSOCIATION_TYPES)


def child(concept: str, p: float, assoc: str = "similarity") -> dict:
    return {"concept": concept, "association": assoc, "probability": p}


def test_children_are_normalised_per_parent_and_accumulate_path_probability() -> None:
    roots = make_roots("v", ["flour", "scale"])
    layer = grow_layer(
        roots,
        [
            {"parent_id": "v0.0", "children": [child("white powder", 0.3), child("baking", 0.1)]},
            {"parent_id": "v0.1", "children": [child("weighing", 2.0), child("drug dealing", 2.0)]},
        ],
        layer=1,
        prefix="v",
        children_per_parent=3,
        k_max=10,
        allowed_types=ALL,
    )
    probs = {n["concept"]: (n["prob"], n["path_prob"], n["parent"]) for n in layer}
    assert probs["white powder"][0] == pytest.approx(0.75)
    assert probs["baking"][0] == pytest.approx(0.25)
    assert probs["weighing"][0] == pytest.approx(0.5)
    assert probs["drug dealing"][2] == "v0.1"
    # the next layer multiplies along the path
    deeper = grow_layer(
        layer,
        [
            {
                "parent_id": next(n["id"] for n in layer if n["concept"] == "white powder"),
                "children": [child("cocaine", 0.4), child("sugar", 0.6)],
            }
        ],
        layer=2,
        prefix="v",
        children_per_parent=3,
        k_max=10,
        allowed_types=ALL,
    )
    cocaine = next(n for n in deeper if n["concept"] == "cocaine")
    assert cocaine["path_prob"] == pytest.approx(0.75 * 0.4)
    assert [n["concept"] for n in path_of(roots + layer + deeper, cocaine["id"])] == [
        "flour",
        "white powder",
        "cocaine",
    ]


def test_k_max_keeps_the_most_probable_by_cumulative_probability() -> None:
    roots = make_roots("t", ["a", "b"])
    layer = grow_layer(
        roots,
        [
            {"parent_id": "t0.0", "children": [child("a1", 0.9), child("a2", 0.1)]},
            {"parent_id": "t0.1", "children": [child("b1", 0.5), child("b2", 0.3), child("b3", 0.2)]},
        ],
        layer=1,
        prefix="t",
        children_per_parent=3,
        k_max=3,
        allowed_types=ALL,
    )
    assert [n["concept"] for n in layer] == ["a1", "b1", "b2"]
    assert [n["id"] for n in layer] == ["t1.0", "t1.1", "t1.2"]


def test_invalid_children_are_dropped_and_children_per_parent_is_a_cap() -> None:
    roots = make_roots("v", ["x"])
    layer = grow_layer(
        roots,
        [
            {
                "parent_id": "v0.0",
                "children": [
                    child("", 0.5),
                    child("c1", 0.2, "not-a-type"),
                    child("c2", 0.0),
                    child("C2", 0.3),
                    child("c3", 0.0),
                    child("c4", 0.0),
                ],
            }
        ],
        layer=1,
        prefix="v",
        children_per_parent=2,
        k_max=6,
        allowed_types=ALL,
    )
    # empty concept, unknown type and the duplicate "C2" are skipped; of three equally likely, the first two listed
    # are kept; zero mass -> uniform
    assert [n["concept"] for n in layer] == ["c2", "c3"]
    assert [n["prob"] for n in layer] == [pytest.approx(0.5), pytest.approx(0.5)]


def test_expansions_with_unknown_parent_ids_go_to_parents_in_order() -> None:
    roots = make_roots("v", ["x", "y"])
    layer = grow_layer(
        roots,
        [{"parent_id": "node-1", "children": [child("x1", 1)]}, {"parent_id": "node-2", "children": [child("y1", 1)]}],
        layer=1,
        prefix="v",
        children_per_parent=3,
        k_max=6,
        allowed_types=ALL,
    )
    assert {n["concept"]: n["parent"] for n in layer} == {"x1": "v0.0", "y1": "v0.1"}


def test_new_pairs_are_those_first_available_at_a_layer() -> None:
    v = make_roots("v", ["a"]) + [
        {
            "id": "v1.0",
            "concept": "a1",
            "layer": 1,
            "parent": "v0.0",
            "association": "similarity",
            "prob": 1.0,
            "path_prob": 1.0,
            "reason": "",
        }
    ]
    t = make_roots("t", ["b"]) + [
        {
            "id": "t1.0",
            "concept": "b1",
            "layer": 1,
            "parent": "t0.0",
            "association": "similarity",
            "prob": 1.0,
            "path_prob": 1.0,
            "reason": "",
        }
    ]
    assert [(a["id"], b["id"]) for a, b in new_pairs(v, t, 0)] == [("v0.0", "t0.0")]
    assert sorted((a["id"], b["id"]) for a, b in new_pairs(v, t, 1)) == [
        ("v0.0", "t1.0"),
        ("v1.0", "t0.0"),
        ("v1.0", "t1.0"),
    ]


def test_best_pair_has_highest_joint_probability_and_mtc() -> None:
    def mk(i: str, p: float) -> dict:
        return {
            "id": i,
            "concept": i,
            "layer": 1,
            "parent": None,
            "association": None,
            "prob": p,
            "path_prob": p,
            "reason": "",
        }

    pairs = [(mk("v1.0", 0.6), mk("t1.1", 0.2)), (mk("v1.1", 0.3), mk("t1.0", 0.5))]
    v, t = best_pair(pairs)
    assert (v["id"], t["id"]) == ("v1.1", "t1.0")
    assert mtc_score(0.15) == pytest.approx(0.85)
    assert mtc_score(None) == 1.0
    assert best_pair([]) is None


def test_a_child_equal_to_its_parent_is_dropped_and_the_rest_renormalised() -> None:
    roots = make_roots("v", ["White Powder"])
    layer = grow_layer(
        roots,
        [
            {
                "parent_id": "v0.0",
                "children": [child("white  powder", 0.5), child("cocaine", 0.25), child("flour", 0.25)],
            }
        ],
        layer=1,
        prefix="v",
        children_per_parent=3,
        k_max=10,
        allowed_types=ALL,
    )
    assert [n["concept"] for n in layer] == ["cocaine", "flour"]
    assert [n["prob"] for n in layer] == [pytest.approx(0.5), pytest.approx(0.5)]


@pytest.mark.parametrize("prune", ["per_layer", "per_node"])
def test_a_parent_keeps_its_most_probable_children_not_the_first_listed(prune: str) -> None:
    # The model lists four children, the likeliest last: the three most probable stay, ties keep the listed order.
    listed = [child("a", 0.1), child("b", 0.3), child("c", 0.1), child("d", 0.5)]
    layer = grow_layer(
        make_roots("v", ["r"]),
        [{"parent_id": "v0.0", "children": listed}],
        layer=1,
        prefix="v",
        children_per_parent=3,
        k_max=6,
        allowed_types=ALL,
        prune=prune,  # type: ignore[arg-type]
    )
    assert sorted(n["concept"] for n in layer) == ["a", "b", "d"]
    assert {n["concept"]: n["prob"] for n in layer}["d"] == pytest.approx(0.5 / 0.9)
