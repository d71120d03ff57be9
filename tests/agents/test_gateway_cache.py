"""The response cache keys models by what they are, not only by their name: an edited script, a retrained adapter or
a replaced GGUF file is never answered from the entries of its previous version; and `when` rules of the scripted
provider match only the request's delimited data, never the role's own instructions."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings
from agents.providers.registry import model_fingerprint
from agents.spec import ModelSpec


class Verdict(BaseModel):
    toxic: bool
    reason: str = ""


def _msgs(text: str = "a pair", system: str = "You judge pairs.") -> list:
    return build_messages(system, {"text": text}, task="Return toxic.")


async def test_an_edited_script_is_not_answered_from_the_cache(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"judge": [{"toxic": True, "reason": "old"}]}))
    cache = str(tmp_path / "c.sqlite")
    first = await Gateway(GatewaySettings(cache_path=cache)).structured(
        role="judge", spec=f"scripted:{script}", schema=Verdict, messages=_msgs()
    )
    assert first.value.reason == "old"
    # unchanged script, new process: replayed from the cache
    same = await Gateway(GatewaySettings(cache_path=cache)).structured(
        role="judge", spec=f"scripted:{script}", schema=Verdict, messages=_msgs()
    )
    assert same.cache_hit and same.value.reason == "old"
    script.write_text(json.dumps({"judge": [{"toxic": False, "reason": "new"}]}))
    edited = await Gateway(GatewaySettings(cache_path=cache)).structured(
        role="judge", spec=f"scripted:{script}", schema=Verdict, messages=_msgs()
    )
    assert not edited.cache_hit and edited.value.reason == "new"


async def test_one_long_lived_gateway_answers_from_an_edited_script_at_once(tmp_path: Path) -> None:
    # A `langgraph dev` server keeps one gateway for its whole life: an edit must reach it without a restart, with
    # the default cache on and with it off.
    for cache in (str(tmp_path / "c.sqlite"), None):
        script = tmp_path / f"live-{cache is None}.json"
        script.write_text(json.dumps({"judge": [{"toxic": True, "reason": "old"}] * 3}))
        gw = Gateway(GatewaySettings(cache_path=cache))
        first = await gw.structured(role="judge", spec=f"scripted:{script}", schema=Verdict, messages=_msgs())
        assert first.value.reason == "old"
        script.write_text(json.dumps({"judge": [{"toxic": False, "reason": "new"}]}))
        edited = await gw.structured(role="judge", spec=f"scripted:{script}", schema=Verdict, messages=_msgs())
        assert not edited.cache_hit and edited.value.reason == "new", cache


def test_file_backed_models_are_fingerprinted_by_their_files(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 16)
    before = model_fingerprint(ModelSpec.parse(f"llamacpp:{gguf}"))
    gguf.write_bytes(b"GGUF" + b"\1" * 32)  # replaced by another file at the same path
    assert model_fingerprint(ModelSpec.parse(f"llamacpp:{gguf}")) != before

    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    spec = ModelSpec.parse(f"hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter={adapter}")
    before = model_fingerprint(spec)
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 24)  # retrained at the same path
    os.utime(adapter / "adapter_model.safetensors", ns=(1, 10**18))
    assert model_fingerprint(spec) != before
    # a Hub id alone and a remote API carry no files: their name is their identity
    assert model_fingerprint(ModelSpec.parse("hf:Qwen/Qwen2.5-VL-3B-Instruct")) == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert model_fingerprint(ModelSpec.parse("openai:gpt-4.1")) == ""


async def test_when_rules_match_the_data_not_the_system_prompt(gateway, write_script) -> None:
    spec = write_script(
        {
            "judge": [
                {"when": "grenade", "then": {"toxic": True, "reason": "rule"}},
                {"toxic": False, "reason": "ordered"},
            ]
        }
    )
    # the role's own instructions mention the word: the rule must not fire
    res = await gateway.structured(
        role="judge",
        spec=spec,
        schema=Verdict,
        messages=_msgs("a garden", system="Judge pairs, e.g. a grenade is a weapon."),
    )
    assert res.value.reason == "ordered"
    # the data holds it: the rule fires
    res = await gateway.structured(role="judge", spec=spec, schema=Verdict, messages=_msgs("a grenade on a table"))
    assert res.value.reason == "rule"
