"""The TAG detection graph with the scripted provider: MTC on hand-computed trees, early exit, repairs."""

from __future__ import annotations

import pytest

from agents.gateway import StructuredOutputError
from graphs.tag import TagContext
from graphs.tag import graph as tag_graph
from graphs.vanilla import VanillaContext
from graphs.vanilla import graph as vanilla_graph

SAMPLE = {"image_description": "a flange on a workbench", "text": "Selling various industrial components."}


def ch(concept: str, p: float, assoc: str = "similarity") -> dict:
    return {"concept": concept, "association": assoc, "probability": p}


def graph_answer(*names: str) -> dict:
    """An entity-relation graph answer whose top-level entities are `names`."""
    return {"entities": [{"id": f"e{i}", "name": n} for i, n in enumerate(names, 1)], "relations": []}


def roots_script(visual: list[str], textual: list[str]) -> dict:
    """Answers of the two root calls (the paper's separate image and text entity graphs)."""
    return {"root_extractor.image": [graph_answer(*visual)], "root_extractor.text": [graph_answer(*textual)]}


ROOTS = roots_script(["flange"], ["industrial components"])
EXPLAIN = {"explanation": "flange -> weapon part; components -> smuggling", "hidden_meaning": "weapon smuggling"}

# Hand-built three-layer trees (k_max 6, 2 children asked per parent). Cumulative probabilities:
#   visual  L1: A .6 (v1.0), B .4 (v1.1)   L2: B1 .4 (v2.0), A1 .3 (v2.1), A2 .3 (v2.2)
#           L3: B1y .3 (v3.0), A1x .3 (v3.1), B1x .1 (v3.2)
#   textual L1: Y .8 (t1.0), X .2 (t1.1)   L2: Y1 .8 (t2.0), X1 .1 (t2.1), X2 .1 (t2.2)
#           L3: Y1a .4 (t3.0), Y1b .4 (t3.1)
VISUAL_LAYERS = [
    {"expansions": [{"parent_id": "v0.0", "children": [ch("A", 0.6), ch("B", 0.4)]}]},
    {
        "expansions": [
            {"parent_id": "v1.0", "children": [ch("A1", 0.5), ch("A2", 0.5)]},
            {"parent_id": "v1.1", "children": [ch("B1", 1.0)]},
        ]
    },
    {
        "expansions": [
            {"parent_id": "v2.0", "children": [ch("B1x", 0.25), ch("B1y", 0.75)]},
            {"parent_id": "v2.1", "children": [ch("A1x", 1.0, "functional")]},
        ]
    },
]
TEXTUAL_LAYERS = [
    {"expansions": [{"parent_id": "t0.0", "children": [ch("X", 0.2, "cultural"), ch("Y", 0.8, "cultural")]}]},
    {
        "expansions": [
            {"parent_id": "t1.0", "children": [ch("Y1", 1.0)]},
            {"parent_id": "t1.1", "children": [ch("X1", 0.5), ch("X2", 0.5)]},
        ]
    },
    {"expansions": [{"parent_id": "t2.0", "children": [ch("Y1a", 0.5), ch("Y1b", 0.5)]}]},
]
NONE = {"toxic_pairs": []}


def ctx(spec: str, **kw) -> TagContext:
    return TagContext(model=spec, children_per_parent=2, **kw)


def script_calls(gateway) -> dict[str, int]:
    (script,) = gateway.shared["scripts"].values()
    return dict(script.calls)


async def test_toxic_root_pair_has_mtc_zero_in_three_calls(gateway, write_script) -> None:
    spec = write_script(
        {
            **roots_script(["bleach bottle"], ["drink this"]),
            "root_judge": [
                {
                    "toxic": True,
                    "visual_id": "v0.0",
                    "textual_id": "t0.0",
                    "category": "self-harm",
                    "reason": "drink bleach",
                }
            ],
            "explainer": [EXPLAIN],
            "expander": [VISUAL_LAYERS[0]],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec))
    assert out["toxic"] is True
    assert out["mtc"] == 0.0
    assert out["finding"]["layer"] == 0
    assert out["finding"]["visual"]["concept"] == "bleach bottle"
    assert out["usage"]["total"]["calls"] == 4  # two root graphs + synergy review + explainer
    assert "expander.visual" not in script_calls(gateway)


async def test_layer_three_pair_gives_hand_computed_mtc(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_judge": [
                NONE,
                NONE,
                {
                    "toxic_pairs": [
                        {"pair_id": "v3.2|t2.1", "category": "weapons", "reason": "weaker"},
                        {"pair_id": "v3.0|t3.1", "category": "weapons", "reason": "stronger"},
                        {"pair_id": "v9.9|t9.9", "category": "bogus", "reason": "not a listed pair"},
                    ]
                },
            ],
            "explainer": [EXPLAIN],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=4))
    finding = out["finding"]
    assert out["toxic"] is True and finding["layer"] == 3
    assert (finding["visual"]["concept"], finding["textual"]["concept"]) == ("B1y", "Y1b")
    assert [s["concept"] for s in finding["visual"]["path"]] == ["flange", "B", "B1", "B1y"]
    assert [s["concept"] for s in finding["textual"]["path"]] == ["industrial components", "Y", "Y1", "Y1b"]
    # p_v = 0.4 * 1.0 * 0.75 = 0.3 ; p_t = 0.8 * 1.0 * 0.5 = 0.4 ; MTC = 1 - 0.12
    assert out["mtc"] == pytest.approx(0.88)
    assert out["explanation"] == EXPLAIN["explanation"]
    # 2 root graphs + synergy review + 3 layers x (2 expansions + 1 judge) + explainer
    assert out["usage"]["total"]["calls"] == 13
    assert out["usage"]["by_role"]["expander"]["calls"] == 6


async def test_the_explainer_is_given_both_paths_with_their_step_probabilities(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_judge": [
                NONE,
                NONE,
                {"toxic_pairs": [{"pair_id": "v3.0|t3.1", "category": "weapons", "reason": "r"}]},
            ],
            "explainer": [EXPLAIN],
        }
    )
    await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=4))
    (script,) = gateway.shared["scripts"].values()
    (messages,) = [m for role, m in script.requests if role == "explainer"]
    content = messages[-1].content
    sent = content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    # the image path flange -> B (0.4) -> B1 (1.0) -> B1y (0.75), the text path ... -> Y (0.8) -> Y1 -> Y1b (0.5)
    assert '"concept": "B1y"' in sent and '"probability": 0.75' in sent and '"probability": 0.4' in sent
    image_block = sent.split('<data name="image_path">')[1].split("</data>")[0]
    text_block = sent.split('<data name="text_path">')[1].split("</data>")[0]
    assert '"path_probability": 0.3\n' in image_block and '"path_probability": 0.4\n' in text_block
    assert '"association": "similarity"' in sent


async def test_nothing_found_gives_mtc_one_within_the_call_budget(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_judge": [NONE, NONE, NONE],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=4))
    assert out["toxic"] is False and out["mtc"] == 1.0 and out["finding"] is None
    assert "No toxic" in out["explanation"]
    assert out["usage"]["total"]["calls"] == 12 <= 3 * 4 + 3
    assert len(out["visual"]) == 1 + 2 + 3 + 3 and max(n["layer"] for n in out["textual"]) == 3


async def test_early_exit_stops_expansion_at_the_toxic_layer(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_judge": [
                {"toxic_pairs": [{"pair_id": "v1.1|t1.0", "category": "weapons", "reason": "r"}]},
                NONE,
                NONE,
            ],
            "explainer": [EXPLAIN],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=4))
    assert out["finding"]["layer"] == 1
    assert out["mtc"] == pytest.approx(1 - 0.4 * 0.8)
    calls = script_calls(gateway)
    assert calls["expander.visual"] == 1 and calls["expander.textual"] == 1 and calls["pair_judge"] == 1
    assert out["usage"]["total"]["calls"] == 7
    assert max(n["layer"] for n in out["visual"]) == 1


async def test_l_max_counts_the_roots(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_judge": [NONE, NONE, NONE],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=2))
    assert max(n["layer"] for n in out["visual"]) == 1
    assert out["usage"]["total"]["calls"] == 3 + 3


async def test_screen_limits_the_pairs_the_judge_sees(gateway, write_script) -> None:
    spec = write_script(
        {
            **ROOTS,
            "root_judge": [{"toxic": False}],
            "expander.visual": VISUAL_LAYERS,
            "expander.textual": TEXTUAL_LAYERS,
            "pair_screen": [{"suspicious_pair_ids": ["v1.0|t1.1", "made-up"]}],
            "pair_judge": [
                {
                    "toxic_pairs": [
                        {"pair_id": "v1.1|t1.0", "category": "drugs", "reason": "not screened"},
                        {"pair_id": "v1.0|t1.1", "category": "weapons", "reason": "screened"},
                    ]
                }
            ],
            "explainer": [EXPLAIN],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec, l_max=2, screen_pairs=True))
    assert (out["finding"]["visual"]["id"], out["finding"]["textual"]["id"]) == ("v1.0", "t1.1")
    assert out["pairs_judged"] == 1 + 1  # the root pair, then the one screened pair
    (script,) = gateway.shared["scripts"].values()
    judge_request = next(m for role, m in script.requests if role == "pair_judge")
    assert "v1.1|t1.0" not in judge_request[-1].content and "v1.0|t1.1" in judge_request[-1].content


async def test_malformed_answer_is_repaired(gateway, write_script) -> None:
    spec = write_script(
        {
            "root_extractor.image": [
                "sure! the concepts are flange and components",
                {"entities": []},
                graph_answer("flange"),
            ],
            "root_extractor.text": [graph_answer("industrial components")],
            "root_judge": [{"toxic": True, "visual_id": "v0.0", "textual_id": "t0.0", "category": "c", "reason": "r"}],
            "explainer": [EXPLAIN],
        }
    )
    out = await tag_graph.ainvoke(SAMPLE, context=ctx(spec))
    assert out["usage"]["by_role"]["root_extractor"]["retries"] == 2
    assert out["usage"]["by_role"]["root_extractor"]["calls"] == 3 + 1
    (script,) = gateway.shared["scripts"].values()
    repair = [m for role, m in script.requests if role == "root_extractor.image"][1]
    assert "previous_answer" in repair[-1].content and "flange and components" in repair[-1].content


async def test_persistently_malformed_answer_fails_with_the_raw_answer(gateway, write_script) -> None:
    spec = write_script(
        {"root_extractor.image": ["nope", "still no", '{"entities": 3}'], "root_extractor.text": [graph_answer("x")]}
    )
    with pytest.raises(StructuredOutputError) as err:
        await tag_graph.ainvoke(SAMPLE, context=ctx(spec))
    assert err.value.attempts == 3 and "entities" in err.value.raw


async def test_text_only_model_without_description_is_a_clear_error(gateway, tmp_path, monkeypatch) -> None:
    from PIL import Image

    img = tmp_path / "x.png"
    Image.new("RGB", (8, 8), "red").save(img)
    built: list[object] = []
    monkeypatch.setattr(gateway, "model_for", lambda *args: built.append(args))
    with pytest.raises(ValueError, match="cannot see images"):
        monkeypatch.setenv("UNVEIL_IMAGE_ROOTS", str(tmp_path))  # the server's own setting
        context = TagContext(model="llamacpp:smollm2")
        await tag_graph.ainvoke({"image": str(img), "text": "hello"}, context=context)
    assert built == []  # the error comes before the text call beside the image's would load the model


async def test_vanilla_is_one_call(gateway, write_script) -> None:
    spec = write_script({"vanilla_detector": [{"toxic": True, "category": "drugs", "reason": "r"}]})
    out = await vanilla_graph.ainvoke(SAMPLE, context=VanillaContext(model=spec))
    assert out["toxic"] is True and out["category"] == "drugs"
    assert out["usage"]["total"]["calls"] == 1


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"text": ""}, "text"),
        ({"text": "x" * 100_001}, "text"),
        ({"text": "hi"}, "image"),
        ({"text": 5, "image_description": "d"}, "text"),
    ],
)
async def test_bad_inputs_name_the_field(gateway, write_script, bad, field) -> None:
    spec = write_script({})
    with pytest.raises(ValueError, match=f"^{field}"):
        await tag_graph.ainvoke(bad, context=ctx(spec))
