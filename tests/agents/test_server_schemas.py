"""Schemas a self-hosted server can turn into a grammar: length bounds above `SERVER_BOUND_LIMIT` stay out of what
such a server gets (llama.cpp fails, or crashes, on a `maxLength` of a thousand or more), the answer is still checked
against the full schema, and a server that fails a request is named with the role, schema and method it was asked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.answers import SERVER_BOUND_LIMIT, wire_schema
from agents.content import build_messages
from agents.ctd.architect import Scene
from agents.gateway import Gateway, GatewaySettings, ModelCallError
from agents.spec import ModelSpec
from tests.faultserver import FaultServer

SCENE = {
    "subcategory": "cocaine dealing",
    "dangerous_items": ["cocaine"],
    "behaviour": "selling",
    "setting": "a kitchen",
    "harmful_image_description": "white powder on a scale",
    "harmful_text": "fresh batch",
    "erase_routine": "physical steganography",
}


def _bounds(node: Any, key: str) -> list[int]:
    if isinstance(node, dict):
        own = [node[key]] if isinstance(node.get(key), int) else []
        return own + [b for v in node.values() for b in _bounds(v, key)]
    if isinstance(node, list):
        return [b for v in node for b in _bounds(v, key)]
    return []


def test_only_self_hosted_servers_get_the_loosened_schema() -> None:
    assert max(_bounds(Scene.model_json_schema(), "maxLength")) > SERVER_BOUND_LIMIT  # what CTD really asks for
    assert wire_schema(Scene, ModelSpec.parse("openai:gpt-4.1")) is Scene
    assert wire_schema(Scene, ModelSpec.parse("openai:gpt-4.1@https://api.openai.com/v1")) is Scene
    sent = wire_schema(Scene, ModelSpec.parse("openai:smollm2@http://127.0.0.1:8081/v1"))
    assert isinstance(sent, dict) and sent["title"] == "Scene"
    assert max(_bounds(sent, "maxLength")) <= SERVER_BOUND_LIMIT
    assert _bounds(sent, "maxItems") == [3]  # small bounds that shape the answer stay


async def test_a_llama_cpp_like_server_gets_bounded_tools_and_the_answer_is_still_checked() -> None:
    long_scene = {**SCENE, "behaviour": "x" * 1500}  # over Scene's own bound
    answers = iter([long_scene, SCENE])
    with FaultServer({"Scene": lambda body: next(answers)}, unsupported=("json_schema",)) as server:
        gw = Gateway(GatewaySettings(cache_path=None, backoff_base=0.001))
        res = await gw.structured(
            role="architect",
            spec=server.spec(),
            schema=Scene,
            messages=build_messages("Draft a scene.", {"risk_category": "drugs"}),
        )
    assert res.value.behaviour == "selling" and res.usage["total"]["retries"] == 1  # one repair of the long answer
    tools = [b["tools"][0]["function"]["parameters"] for b in server.bodies if b.get("tools")]
    assert len(tools) == 2 and all(max(_bounds(t, "maxLength")) <= SERVER_BOUND_LIMIT for t in tools)


async def test_a_failing_server_is_named_with_the_role_schema_and_method() -> None:
    with FaultServer({"Scene": SCENE}, fault_first=100, kinds=("500",)) as server:
        gw = Gateway(GatewaySettings(cache_path=None, max_retries=1, backoff_base=0.001))
        with pytest.raises(ModelCallError) as err:
            await gw.structured(
                role="architect",
                spec=server.spec(),
                schema=Scene,
                messages=build_messages("Draft a scene.", {"risk_category": "drugs"}),
            )
    message = str(err.value)
    assert "role 'architect'" in message and "schema Scene by json_schema" in message, message
    assert json.dumps(server.bodies[0]).count("maxLength") >= 1
