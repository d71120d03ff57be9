"""The guard detector graph under `langgraph dev`, driven through `langgraph_sdk` with the scripted provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


async def test_guard_graph_runs_under_langgraph_dev(langgraph_server, tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "guard.llavaguard": [
                    {
                        "when": "",
                        "then": json.dumps(
                            {
                                "rating": "Unsafe",
                                "category": "O6: Illegal Weapons or Substance Abuse",
                                "rationale": "drug sale",
                            }
                        ),
                    }
                ],
            }
        )
    )
    client = get_client(url=langgraph_server.url)
    guard = next(a for a in await client.assistants.search(limit=50) if a["graph_id"] == "guard")
    schemas = await client.assistants.get_schemas(guard["assistant_id"])
    assert "guard_model" in json.dumps(schemas.get("context_schema") or schemas.get("config_schema"))
    thread = await client.threads.create()
    out = await client.runs.wait(
        thread["thread_id"],
        "guard",
        input={"image_description": "a bag of white powder", "text": "Text the usual number."},
        context={"guard": "llavaguard", "guard_model": f"scripted:{script}"},
    )
    assert (out["toxic"], out["category"], out["guard_codes"]) == (True, "drugs", ["O6"])
    assert out["usage"]["total"]["calls"] == 1
