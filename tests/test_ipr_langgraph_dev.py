"""The IPR graph under `langgraph dev` (blocking-IO guard on), driven through `langgraph_sdk`: tiny SD + scripted refiner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


async def test_ipr_runs_under_langgraph_dev(langgraph_server, tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    from tests.tiny import build_tiny_sd

    sd = build_tiny_sd(tmp_path / "sd")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refiner.0": ["<reason>gore</reason><answer>a calm meadow</answer>"],
                                  "refiner.1": ["[keep]"]}))
    client = get_client(url=langgraph_server.url)
    assert "ipr" in {a["graph_id"] for a in await client.assistants.search(limit=50)}
    thread = await client.threads.create()
    context = {"refiner_model": f"scripted:{script}", "generator": f"diffusers:{sd}", "size": 32, "steps": 2,
               "image_store": str(tmp_path / "store")}
    out = await client.runs.wait(thread["thread_id"], "ipr", input={"prompt": "a gory battlefield"}, context=context)
    assert [s["prompt"] for s in out["trajectory"]] == ["a gory battlefield", "a calm meadow"]
    assert out["keep_step"] == 1 and out["stop_reason"] == "keep"
    assert Path(out["final_image_path"]).is_file()
    # Server state and checkpoints hold ids and paths, never image data.
    state = await client.threads.get_state(thread["thread_id"])
    assert "data:image" not in json.dumps(state)
