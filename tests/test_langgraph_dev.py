"""The detection graphs under `langgraph dev`, driven through `langgraph_sdk` with the scripted provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


async def test_tag_and_vanilla_run_under_langgraph_dev(langgraph_server, tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    script = tmp_path / "script.json"
    script.write_text(json.dumps({
        "root_extractor.image": [{"entities": [{"name": "white powder"}]}],
        "root_extractor.text": [{"entities": [{"name": "text the usual number"}]}],
        "root_judge": [{"toxic": False}],
        "expander.visual": [{"expansions": [{"parent_id": "v0.0", "children": [
            {"concept": "cocaine", "association": "similarity", "probability": 0.4},
            {"concept": "flour", "association": "similarity", "probability": 0.6}]}]}],
        "expander.textual": [{"expansions": [{"parent_id": "t0.0", "children": [
            {"concept": "dealer contact", "association": "cultural", "probability": 0.5},
            {"concept": "friend", "association": "categorical", "probability": 0.5}]}]}],
        "pair_judge": [{"toxic_pairs": [{"pair_id": "v1.1|t1.0", "category": "drugs", "reason": "drug sale"}]}],
        "explainer": [{"explanation": "white powder -> cocaine; number -> dealer", "hidden_meaning": "drug sale"}],
        "vanilla_detector": [{"toxic": False, "reason": "looks benign"}],
    }))
    client = get_client(url=langgraph_server.url)
    assistants = {a["graph_id"] for a in await client.assistants.search(limit=50)}
    assert {"tag", "vanilla"} <= assistants
    # Studio draws the graph and its input/context forms from these schemas
    for assistant in await client.assistants.search(limit=50):
        if assistant["graph_id"] in ("tag", "vanilla"):
            schemas = await client.assistants.get_schemas(assistant["assistant_id"])
            assert "text" in json.dumps(schemas["input_schema"])
            assert "model" in json.dumps(schemas.get("context_schema") or schemas.get("config_schema"))
    sample = {"image_description": "a bag of white powder", "text": "Fresh batch. Text the usual number."}

    thread = await client.threads.create()
    out = await client.runs.wait(thread["thread_id"], "tag", input=sample,
                                 context={"model": f"scripted:{script}", "l_max": 3, "children_per_parent": 2})
    assert out["toxic"] is True
    assert out["mtc"] == pytest.approx(1 - 0.4 * 0.5)
    assert out["finding"]["visual"]["concept"] == "cocaine"
    assert out["usage"]["total"]["calls"] == 7  # two root graphs, synergy review, 1 layer (2 + 1), explainer

    # ids follow probability order: cocaine (0.4) is v1.1 after flour (0.6)
    # state and checkpoints on the server hold ids and text, never image data
    state = await client.threads.get_state(thread["thread_id"])
    assert "data:image" not in json.dumps(state)

    thread2 = await client.threads.create()
    van = await client.runs.wait(thread2["thread_id"], "vanilla", input=sample, context={"model": f"scripted:{script}"})
    assert van["toxic"] is False and van["usage"]["total"]["calls"] == 1
