"""TAG detection as the paper specifies it: separate root graphs, what each judge is given,
the two readings of k_max, and the vanilla baseline's prompt."""

from __future__ import annotations

import pytest

from agents.tag import judges, roots, vanilla
from graphs.tag import TagContext
from graphs.tag import graph as tag_graph
from graphs.tag.tree import Prune, grow_layer, make_roots
from graphs.vanilla import VanillaContext
from graphs.vanilla import graph as vanilla_graph

SAMPLE = {"image_description": "a bag of white powder next to a phone", "text": "text the usual number"}
IMAGE_GRAPH = {
    "entities": [
        {
            "id": "e1",
            "name": "bag of white powder",
            "attributes": [{"association": "similarity", "value": "illicit drug"}],
        },
        {"id": "e2", "name": "zip lock", "parent_id": "e1"},
        {"id": "e3", "name": "phone"},
    ],
    "relations": [{"source_id": "e3", "relation": "next to", "target_id": "e1"}],
}
TEXT_GRAPH = {"entities": [{"id": "e1", "name": "usual number"}], "relations": []}
NONE = {"toxic_pairs": []}


def _requests(gateway, role: str) -> list:
    (script,) = gateway.shared["scripts"].values()
    return [m for r, m in script.requests if r == role]


def _user_text(messages) -> str:
    content = messages[-1].content
    return content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content if isinstance(b, dict))


def _has_image_block(messages) -> bool:
    content = messages[-1].content
    return isinstance(content, list) and any(b.get("type") == "image_url" for b in content if isinstance(b, dict))


# -- item 2: root concepts ------------------------------------------------------------------------------------


def test_root_prompts_follow_the_paper() -> None:
    for prompt in (roots.IMAGE_ROOT_PROMPT, roots.TEXT_ROOT_PROMPT):
        assert "think beyond literal descriptions" in prompt
        assert "hierarchical" in prompt and "attributes" in prompt
        assert "{guide}" in prompt  # the association types are filled in
    assert "visual intelligence" in roots.IMAGE_ROOT_PROMPT and "textual analysis" in roots.TEXT_ROOT_PROMPT
    assert TagContext().roots_mode == "separate"


async def test_roots_are_two_calls_each_seeing_only_its_modality(gateway, write_script) -> None:
    spec = write_script(
        {"root_extractor.image": [IMAGE_GRAPH], "root_extractor.text": [TEXT_GRAPH], "root_judge": [{"toxic": False}]}
    )
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=spec, l_max=1))
    (image_req,) = _requests(gateway, "root_extractor.image")
    (text_req,) = _requests(gateway, "root_extractor.text")
    assert "white powder" in _user_text(image_req) and "usual number" not in _user_text(image_req)
    assert "usual number" in _user_text(text_req) and "white powder" not in _user_text(text_req)
    assert "visual intelligence" in image_req[0].content and "textual analysis" in text_req[0].content
    # roots are the top-level entities: the zip lock is part of the bag, not a root
    assert [n["concept"] for n in out["visual"]] == ["bag of white powder", "phone"]
    assert [n["concept"] for n in out["textual"]] == ["usual number"]
    assert out["entity_graphs"]["visual"]["entities"][1]["parent_id"] == "e1"
    assert out["usage"]["by_role"]["root_extractor"]["calls"] == 2
    assert out["usage"]["total"]["calls"] == 3


async def test_joint_roots_mode_is_one_call(gateway, write_script) -> None:
    spec = write_script(
        {
            "root_extractor": [{"visual_roots": ["white powder"], "textual_roots": ["usual number"]}],
            "root_judge": [{"toxic": False}],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=spec, l_max=1, roots_mode="joint"))
    assert out["usage"]["by_role"]["root_extractor"]["calls"] == 1
    assert [n["concept"] for n in out["visual"]] == ["white powder"]
    assert out["entity_graphs"]["textual"]["entities"][0]["name"] == "usual number"


def test_graph_normalisation_fixes_ids_and_dangling_references() -> None:
    g = roots.EntityGraph.model_validate(
        {
            "entities": [
                {"name": " flour "},
                {"id": "x", "name": "sack", "parent_id": "nope"},
                {"id": "x", "name": "scale", "parent_id": "x"},
            ],
            "relations": [
                {"source_id": "e1", "relation": "in", "target_id": "x"},
                {"source_id": "zz", "relation": "r", "target_id": "x"},
            ],
        }
    )
    norm = roots.normalize_graph(g)
    assert [e["id"] for e in norm["entities"]] == ["e1", "x", "e3"]
    assert norm["entities"][1]["parent_id"] is None and norm["entities"][2]["parent_id"] == "x"
    assert len(norm["relations"]) == 1
    assert roots.roots_of(norm) == ["flour", "sack"]


# -- item 5: the judges' inputs -------------------------------------------------------------------------------


async def test_root_judge_gets_the_graphs_and_pair_judge_the_image_and_graphs(
    gateway, write_script, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("UNVEIL_IMAGE_ROOTS", str(tmp_path))  # the server's own setting
    from PIL import Image

    img = tmp_path / "scene.png"
    Image.new("RGB", (8, 8), "white").save(img)
    one_child = {
        "expansions": [
            {"parent_id": "?", "children": [{"concept": "cocaine", "association": "similarity", "probability": 1}]}
        ]
        * 2
    }
    spec = write_script(
        {
            "root_extractor.image": [IMAGE_GRAPH],
            "root_extractor.text": [TEXT_GRAPH],
            "root_judge": [{"toxic": False}],
            "expander": [{"when": "", "then": one_child}],
            "pair_judge": [NONE],
        }
    )
    await tag_graph.ainvoke(
        {"image": str(img), "text": "text the usual number"},
        context=TagContext(model=spec, l_max=2),
    )
    (root_req,) = _requests(gateway, "root_judge")
    body = _user_text(root_req)
    assert '<data name="image_graph">' in body and '<data name="text_graph">' in body and "zip lock" in body
    assert not _has_image_block(root_req)  # §10.2: the root judge works on the graphs
    (pair_req,) = _requests(gateway, "pair_judge")
    body = _user_text(pair_req)
    assert '<data name="image_graph">' in body and '<data name="text_graph">' in body and "cocaine" in body
    assert _has_image_block(pair_req)  # the original scene, as an image block built in the node
    assert "scene evidence" in judges.PAIR_JUDGE_PROMPT
    assert "forbidden from making any associations" in judges.ROOT_JUDGE_PROMPT


# -- item 4: the vanilla baseline -----------------------------------------------------------------------------


def test_vanilla_prompt_is_the_papers_three_class_synergy_judge() -> None:
    prompt = vanilla.VANILLA_PROMPT
    assert "either one" not in prompt
    assert "Synergy is everything" in prompt and "Presumption of innocence" in prompt
    for name in (
        "Dangerous Misuse Of Items",
        "Harmful Acts Or Threats",
        "Cultural Insensitivity Or Hate Speech",
        "No Risk",
    ):
        assert name in prompt
    assert len(vanilla.VANILLA_RISK_CLASSES) == 3
    # the six-group checklist of the TA-CTD judges is not the baseline's
    assert "sexual content" not in prompt and "intellectual-property" not in prompt


async def test_vanilla_call_carries_the_papers_prompt(gateway, write_script) -> None:
    spec = write_script({"vanilla_detector": [{"toxic": True, "category": "Dangerous Misuse Of Items", "reason": "r"}]})
    out = await vanilla_graph.ainvoke(SAMPLE, context=VanillaContext(model=spec))
    (req,) = _requests(gateway, "vanilla_detector")
    assert "Dangerous Misuse Of Items" in req[0].content and out["category"] == "Dangerous Misuse Of Items"


# -- item 3: pruning ------------------------------------------------------------------------------------------


def _children(n: int, prefix: str = "c") -> list[dict]:
    # Children are named by layer (c, d, e ...): a child equal to its parent is dropped by the tree rules.
    return [{"concept": f"{prefix}{i}", "association": "similarity", "probability": 1.0 / n} for i in range(n)]


def _grow(parents: list[dict], children: str, *, layer: int, k_max: int, prune: Prune) -> list[dict]:
    """One layer of three similarity children (named `children`0..2) under every parent."""
    expansions = [{"parent_id": p["id"], "children": _children(3, children)} for p in parents]
    return grow_layer(
        parents,
        expansions,
        layer=layer,
        prefix="v",
        children_per_parent=3,
        k_max=k_max,
        allowed_types=["similarity"],
        prune=prune,
    )


def test_per_layer_keeps_k_max_nodes_per_layer() -> None:
    parents = _grow(make_roots("v", ["r"]), "c", layer=1, k_max=6, prune="per_layer")
    layer2 = _grow(parents, "d", layer=2, k_max=6, prune="per_layer")
    assert len(layer2) == 6


def test_per_node_keeps_up_to_k_max_children_of_every_node() -> None:
    parents = _grow(make_roots("v", ["r"]), "c", layer=1, k_max=6, prune="per_node")
    layer2 = _grow(parents, "d", layer=2, k_max=6, prune="per_node")
    assert len(layer2) == 9  # 3 parents x 3 children, no layer cap
    capped = _grow(parents, "d", layer=2, k_max=2, prune="per_node")
    assert len(capped) == 6 and all(sum(1 for n in capped if n["parent"] == p["id"]) == 2 for p in parents)
    assert sum(n["prob"] for n in capped if n["parent"] == parents[0]["id"]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="prune"):
        grow_layer(parents, [], layer=2, prefix="v", children_per_parent=3, k_max=2, allowed_types=[], prune="bogus")  # type: ignore[arg-type]


def test_default_pruning_is_per_node_as_section_3_2_defines_k_max() -> None:
    # §3.2 Step 2: "for any node ... up to k_max ... child nodes"; per_layer is the named cheaper option
    assert TagContext().prune == "per_node" and TagContext().k_max == 6 and TagContext().l_max == 4


def layered(probs: tuple[float, ...] = (0.5, 0.3, 0.2)) -> list[dict]:
    """Expander rules whose children are named by layer: c0, c1 ... under the roots, d0 ... under c-nodes, e0 ...
    under d-nodes (the rule matches the parents' concepts in the request), with the given probabilities."""

    def expansion(prefix: str) -> dict:
        children = [
            {"concept": f"{prefix}{i}", "association": "similarity", "probability": p} for i, p in enumerate(probs)
        ]
        return {"expansions": [{"parent_id": "?", "children": children}] * 12}

    return [
        {"when": '"concept": "d', "then": expansion("e")},
        {"when": '"concept": "c', "then": expansion("d")},
        {"when": "", "then": expansion("c")},
    ]


SKEWED = layered()


def _c2c2(nodes: list[dict]) -> str | None:
    """The id of the layer-2 node on the path root -> c2 -> d2, if the tree kept it."""
    by_id = {n["id"]: n for n in nodes}
    return next(
        (n["id"] for n in nodes if n["layer"] == 2 and n["concept"] == "d2" and by_id[n["parent"]]["concept"] == "c2"),
        None,
    )


@pytest.mark.parametrize("prune", ["per_layer", "per_node"])
async def test_per_node_reaches_the_low_probability_path_that_per_layer_prunes(gateway, write_script, prune) -> None:
    # The toxic pair sits on root -> c2 -> d2 in both trees (path probability 0.2 * 0.2 = 0.04 each): per_layer
    # keeps the six most probable of nine layer-2 nodes and drops it; per_node keeps all nine.
    script = {
        "root_extractor.image": [{"entities": [{"name": "powder"}]}],
        "root_extractor.text": [{"entities": [{"name": "number"}]}],
        "root_judge": [{"toxic": False}],
        "expander": SKEWED,
        "pair_judge": [{"when": "", "then": NONE}],
        "explainer": [{"explanation": "e", "hidden_meaning": "h"}],
    }
    ctx = {"l_max": 3, "k_max": 6, "children_per_parent": 3, "prune": prune}
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=write_script(script), **ctx))
    assert sum(1 for n in out["visual"] if n["layer"] == 2) == (9 if prune == "per_node" else 6)
    vid, tid = _c2c2(out["visual"]), _c2c2(out["textual"])
    if prune == "per_layer":
        assert vid is None and tid is None and out["mtc"] == 1.0
        return
    assert vid and tid
    # a judge that confirms exactly that pair: per_node reports it with MTC 1 - 0.04 * 0.04
    hit = {"toxic_pairs": [{"pair_id": f"{vid}|{tid}", "category": "drugs", "reason": "r"}]}
    script["pair_judge"] = [{"when": f'"{vid}|{tid}"', "then": hit}, {"when": "", "then": NONE}]
    out = await tag_graph.ainvoke(SAMPLE, context=TagContext(model=write_script(script, "hit.json"), **ctx))
    assert out["toxic"] and out["finding"]["layer"] == 2 and out["mtc"] == pytest.approx(1 - 0.04 * 0.04)


async def test_per_node_splits_wide_layers_over_several_expander_calls(gateway, write_script) -> None:
    spec = write_script(
        {
            "root_extractor.image": [{"entities": [{"name": "a"}]}],
            "root_extractor.text": [{"entities": [{"name": "b"}]}],
            "root_judge": [{"toxic": False}],
            "expander": layered((0.25, 0.25, 0.25, 0.25)),
            "pair_judge": [{"when": "", "then": NONE}],
        }
    )
    out = await tag_graph.ainvoke(
        SAMPLE, context=TagContext(model=spec, l_max=4, k_max=4, children_per_parent=4, prune="per_node")
    )
    assert sum(1 for n in out["visual"] if n["layer"] == 3) == 64
    # layer 3 has 16 parents: two calls per tree (12 + 4 parents)
    (script,) = gateway.shared["scripts"].values()
    assert script.calls.get("expander.visual.1") == 1 and script.calls.get("expander.textual.1") == 1
    assert out["usage"]["by_role"]["expander"]["calls"] == 2 * (1 + 1 + 2)


def test_detect_cli_switches_roots_mode_and_pruning(write_script, capsys) -> None:
    import json as _json

    from unveil.cli import main

    spec = write_script(
        {
            "root_extractor": [{"when": "", "then": {"visual_roots": ["powder"], "textual_roots": ["number"]}}],
            "root_judge": [{"when": "", "then": {"toxic": False}}],
            "expander": SKEWED,
            "pair_judge": [{"when": "", "then": NONE}],
        }
    )
    args = ["detect", "--model", spec, "--image-description", "d", "--text", "t", "--l-max", "3", "--json"]
    assert main([*args, "--roots-mode", "joint", "--prune", "per_node"]) == 0
    out = _json.loads(capsys.readouterr().out)
    assert out["usage"]["by_role"]["root_extractor"]["calls"] == 1
    assert sum(1 for n in out["trees"]["visual"] if n["layer"] == 2) == 9


# -- the readings of §3.3 Step 2 the paper leaves open ----------------------------------------------------------


def _fidelity_row(element_start: str) -> str:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "tag.md").read_text(encoding="utf-8")
    return next(line for line in doc.splitlines() if line.startswith(f"| {element_start}"))


def test_tie_rule_reports_the_highest_joint_probability_and_is_labelled_a_reading() -> None:
    from graphs.tag.tree import best_pair

    v = make_roots("v", ["a", "b"])
    t = make_roots("t", ["x"])
    v[0]["path_prob"], v[1]["path_prob"] = 0.2, 0.5
    assert best_pair([(v[0], t[0]), (v[1], t[0])]) == (v[1], t[0])
    v[0]["path_prob"] = 0.5  # a tie: the lowest ids
    assert best_pair([(v[1], t[0]), (v[0], t[0])]) == (v[0], t[0])
    assert "| named reading |" in _fidelity_row("(which toxic pair of a layer is reported: the tie rule)")


def test_pair_layer_rule_puts_a_pair_at_its_deeper_node_and_is_labelled_a_reading() -> None:
    from graphs.tag.tree import new_pairs

    visual = _grow(make_roots("v", ["r"]), "c", layer=1, k_max=6, prune="per_node")
    visual = make_roots("v", ["r"]) + visual
    textual = make_roots("t", ["s"])
    textual = textual + _grow(textual, "c", layer=1, k_max=6, prune="per_node")
    layer1 = new_pairs(visual, textual, 1)
    # the root of one tree pairs with every layer-1 node of the other at layer 1, as do the layer-1 nodes
    assert len(layer1) == 4 * 4 - 1
    assert all(max(v["layer"], t["layer"]) == 1 for v, t in layer1)
    assert new_pairs(visual, textual, 0) == [(visual[0], textual[0])]
    row = _fidelity_row("(the layer a pair belongs to: the pair-layer rule)")
    assert "| named reading |" in row and "max(i, j)" in row
