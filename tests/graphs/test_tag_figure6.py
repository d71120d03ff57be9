"""The TAG paper's own worked example (Figure 6) comes out of the defaults: a run with no flags, through the CLI and
through the graph as Studio runs it, finds the weapon-smuggling pair with MTC 1 - (0.3 * 0.2) * (0.6 * 0.25 * 0.3)
= 0.9973, although every parent has three children and the two paths run through low-probability siblings.

The concept names are Figure 6's; which middle concept sits on which path is our reading of the garbled figure
(the probabilities, which give the MTC, are the figure's). The per-layer cut (`--prune per_layer`, a named cheaper
option) drops both ends of the pair and reports nothing: that contrast is pinned here too."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from graphs.tag import TagContext
from graphs.tag.tree import Node, grow_layer, make_roots

IMAGE_ROOT, TEXT_ROOT = "flange", "items with undefined function"
IMAGE_PATH = [("component for modified tool", 0.3), ("weapon component", 0.2)]
TEXT_PATH = [("unmanned system component", 0.6), ("illegal modification", 0.25), ("selling weaponized component", 0.3)]
# The siblings of each path step: together with the step they sum to 1 (the paper normalises per parent).
SIBLINGS = {0.3: (0.5, 0.2), 0.2: (0.5, 0.3), 0.6: (0.25, 0.15), 0.25: (0.45, 0.3)}
OFF_PATH = (0.5, 0.3, 0.2)  # every node off the two paths has three children too
SAMPLE = {
    "image_description": "a steel flange on a workbench",
    "text": "Selling various industrial components designed for high-performance machinery, with no indication "
    "of their original use.",
}
MTC = 1 - (0.3 * 0.2) * (0.6 * 0.25 * 0.3)


def children_of(concept: str, path: list[tuple[str, float]], root: str) -> list[dict[str, Any]]:
    """Three children of `concept`: the next step of the figure's path (with its probability and two siblings)
    when `concept` is on it, else three generic children."""
    chain = [root, *(c for c, _ in path)]
    if concept in chain[:-1]:
        nxt, p = path[chain.index(concept)]
        probs = [(nxt, p), *((f"{concept} / alt {i}", q) for i, q in enumerate(SIBLINGS[p]))]
    else:
        probs = [(f"{concept} / {i}", q) for i, q in enumerate(OFF_PATH)]
    return [{"concept": c, "association": "similarity", "probability": q} for c, q in probs]


def expander_answers(prefix: str, root: str, path: list[tuple[str, float]], layers: int = 3) -> tuple[list, list]:
    """(the expander's answers layer by layer, the full per-node tree). Each answer names every parent of the
    per-node tree by id; a per-layer run keeps a prefix of those parents (both number a layer by cumulative
    probability), so the same answers serve both readings."""
    nodes: list[Node] = make_roots(prefix, [root])
    answers = []
    for layer in range(1, layers + 1):
        frontier = [n for n in nodes if n["layer"] == layer - 1]
        entries = [{"parent_id": p["id"], "children": children_of(p["concept"], path, root)} for p in frontier]
        answers.append({"expansions": entries})
        nodes += grow_layer(
            frontier,
            entries,
            layer=layer,
            prefix=prefix,
            children_per_parent=3,
            k_max=6,
            allowed_types=["similarity"],
            prune="per_node",
        )
    return answers, nodes


def figure6_script() -> tuple[dict[str, Any], str]:
    """The scripted answers of Figure 6 and the id of its toxic pair in the per-node trees."""
    v_answers, v_nodes = expander_answers("v", IMAGE_ROOT, IMAGE_PATH)
    t_answers, t_nodes = expander_answers("t", TEXT_ROOT, TEXT_PATH)
    vid = next(n["id"] for n in v_nodes if n["concept"] == IMAGE_PATH[-1][0])
    tid = next(n["id"] for n in t_nodes if n["concept"] == TEXT_PATH[-1][0])
    pair = f"{vid}|{tid}"
    hit = {"toxic_pairs": [{"pair_id": pair, "category": "weapons", "reason": "weapon smuggling"}]}
    script = {
        "root_extractor.image": [{"entities": [{"id": "e1", "name": IMAGE_ROOT}], "relations": []}],
        "root_extractor.text": [{"entities": [{"id": "e1", "name": TEXT_ROOT}], "relations": []}],
        "root_judge": [{"when": "", "then": {"toxic": False}}],
        "expander.visual": v_answers,
        "expander.textual": t_answers,
        "pair_judge": [{"when": f'"{pair}"', "then": hit}, {"when": "", "then": {"toxic_pairs": []}}],
        "explainer": [
            {"when": "", "then": {"explanation": "flange -> weapon component", "hidden_meaning": "smuggling"}}
        ],
    }
    return script, pair


def test_figure6_through_the_cli_with_no_flags(write_script, capsys) -> None:
    from unveil.cli import main

    script, pair = figure6_script()
    spec = write_script(script)
    assert main(["detect", "--model", spec, *_pair_args(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["toxic"] is True
    assert out["mtc"] == pytest.approx(MTC) and round(out["mtc"], 4) == 0.9973
    finding = out["finding"]
    assert f"{finding['visual']['id']}|{finding['textual']['id']}" == pair
    assert [s["concept"] for s in finding["visual"]["path"]] == [IMAGE_ROOT, *(c for c, _ in IMAGE_PATH)]
    assert [s["concept"] for s in finding["textual"]["path"]] == [TEXT_ROOT, *(c for c, _ in TEXT_PATH)]
    assert finding["layer"] == 3 and finding["source"] == "model"  # the pair belongs to its deeper node
    assert out["tag_reading"] == {
        "prune": "per_node",
        "roots_mode": "separate",
        "l_max": 4,
        "k_max": 6,
        "children_per_parent": 3,
        "toxic_pairs": "",
    }
    # 2 root graphs + root judge + 3 layers x 2 expander calls + judge calls (1 + 1 + 8: layer 3 has 1,431 new
    # pairs, 200 a call) + the explainer
    assert out["usage"]["total"]["calls"] == 20


def test_the_per_layer_cut_loses_figure6(write_script, capsys) -> None:
    from unveil.cli import main

    script, _ = figure6_script()
    spec = write_script(script)
    assert main(["detect", "--model", spec, *_pair_args(), "--prune", "per_layer", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["toxic"] is False and out["mtc"] == 1.0
    assert out["tag_reading"]["prune"] == "per_layer"
    assert out["usage"]["total"]["calls"] == 12
    # both ends of the pair were cut: neither concept is in its tree
    assert IMAGE_PATH[-1][0] not in {n["concept"] for n in out["trees"]["visual"]}
    assert TEXT_PATH[-1][0] not in {n["concept"] for n in out["trees"]["textual"]}


async def test_figure6_through_the_graph_as_studio_runs_it(gateway, write_script, monkeypatch) -> None:
    from graphs import studio

    script, pair = figure6_script()
    spec = write_script(script)
    # a server reads a context's scripted file only from its own folders (UNVEIL_FILE_ROOTS)
    monkeypatch.setenv("UNVEIL_FILE_ROOTS", str(Path(spec.partition(":")[2]).parent))
    context = {"model": spec}  # what Studio's form sends when only the model is filled in
    graph = await studio.tag(SimpleNamespace(context=context))  # type: ignore[arg-type]
    out = await graph.ainvoke(SAMPLE, context=TagContext(**context))
    assert out["toxic"] is True and round(out["mtc"], 4) == 0.9973
    assert f"{out['finding']['visual']['id']}|{out['finding']['textual']['id']}" == pair
    # the explainer is given the MTC value c (§3.3 Step 4), as delimited data
    (script_state,) = gateway.shared["scripts"].values()
    (request,) = [m for role, m in script_state.requests if role == "explainer"]
    body = request[-1].content if isinstance(request[-1].content, str) else str(request[-1].content)
    assert '<data name="detection">' in body and '"mtc": 0.9973' in body


def _pair_args() -> list[str]:
    return ["--image-description", SAMPLE["image_description"], "--text", SAMPLE["text"]]
