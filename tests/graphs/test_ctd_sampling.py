"""Roles sampled more than once from the same request stay separate samples with the response cache on (the
default): the Architect drafts one scene per scene seed, several blind judges of one model each vote, and a rerun
replays every sample from the cache without a model call.

The CLI tests leave the cache at its default place (HOME points at a temporary folder), as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, get_gateway, set_gateway
from agents.providers.scripted import request_data
from graphs.ctd import graph
from tests.cli_args import generate_args
from tests.faultserver import FaultServer
from tests.graphs.test_ctd import (
    BENIGN,
    DISSIMILAR,
    context,
    fresh_gateway,
    merge,
    panel_rules,
    tiny_sd,
    vote,
    write_script,
)

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd


class Verdict(BaseModel):
    toxic: bool
    reason: str = ""


async def test_calls_that_differ_only_by_their_seed_are_cached_apart(tmp_path: Path) -> None:
    spec = write_script(tmp_path, {"judge": [{"toxic": True, "reason": "first"}, {"toxic": False, "reason": "second"}]})
    messages = build_messages("You judge pairs.", {"text": "one pair"})
    cache = str(tmp_path / "c.sqlite")
    gw = Gateway(GatewaySettings(cache_path=cache))
    a = await gw.structured(role="judge", spec=spec, schema=Verdict, messages=messages, seed=1)
    b = await gw.structured(role="judge", spec=spec, schema=Verdict, messages=messages, seed=2)
    assert (a.value.reason, b.value.reason) == ("first", "second") and not b.cache_hit
    # a new process replays each seed's own answer, with no model call
    replay = Gateway(GatewaySettings(cache_path=cache))
    again = [
        await replay.structured(role="judge", spec=spec, schema=Verdict, messages=messages, seed=s) for s in (2, 1)
    ]
    assert [r.value.reason for r in again] == ["second", "first"] and all(r.cache_hit for r in again)
    assert replay.usage["total"]["calls"] == 0


async def test_blind_judges_of_one_model_each_vote_with_the_cache_on(tmp_path: Path, tiny_sd: str) -> None:
    # Blind judges on an OpenAI-compatible server (the role does not key a real model's answers); the rest scripted.
    set_gateway(Gateway(GatewaySettings(cache_path=str(tmp_path / "c.sqlite"), backoff_base=0.0)))
    script = merge(_scene_script(1), {k: v for k, v in panel_rules("0").items() if not k.startswith("judge.blind")})
    spec = write_script(tmp_path, script)
    blind = iter([True, True, False, False] * 2)

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return vote(next(blind))

    with FaultServer({"Vote": answer}) as server:
        ctx = context(tmp_path, spec, tiny_sd, blind_judge_model=server.spec())
        out = await graph.ainvoke({"id": "s", "category": "drugs", "seed": 0}, context=ctx)
        assert out["status"] == "accepted", out.get("drop_reason")
        assert len(server.bodies) == 4  # four blind judges, four requests: none replays another's vote
        assert sorted(v["has_risk"] for v in out["votes"] if v["kind"] == "blind") == [False, False, True, True]
        # the same scene again: every vote comes from the cache
        again = await graph.ainvoke({"id": "s", "category": "drugs", "seed": 0}, context=ctx)
        assert len(server.bodies) == 4 and again["votes"] == out["votes"]


# -- the command ----------------------------------------------------------------------------------------------


def _scene(i: int) -> dict[str, Any]:
    return {
        "subcategory": f"sub-{i}",
        "dangerous_items": [f"item {i}"],
        "behaviour": f"behaviour {i}",
        "setting": f"setting {i}",
        "harmful_image_description": f"image {i}",
        "harmful_text": f"text {i}",
        "erase_routine": "physical steganography",
    }


def _erasure(i: int) -> dict[str, Any]:
    return {
        "t2i_prompt": f"a kitchen table with object number {i}",
        "caption": f"CAPTION-{i}: scene {i} of the run",
        "erasure_reason": f"risk {i} -> object {i}, due to a shared look, using physical steganography",
        "risk_item": f"risk {i}",
        "normal_item": f"object {i}",
        "shared_property": "a shared look",
        "technique": "physical steganography",
        "association_type": "similarity",
    }


def _scene_script(n: int) -> dict[str, list[Any]]:
    """The Architect has one answer per scene, used in call order (a request replayed from the cache uses none); the
    Eraser answers by the scene's subcategory; every judge accepts."""
    return {
        "architect": [_scene(i) for i in range(n)],
        "eraser": [{"when": f'"sub-{i}"', "then": _erasure(i)} for i in range(n)],
        "modality_judge": [{"when": "", "then": BENIGN}],
        "gatekeeper": [],
        "concept_similarity": [{"when": "", "then": DISSIMILAR}],
    }


def _accepting(n: int) -> dict[str, list[Any]]:
    judges = {role: [{"when": "", "then": answers[0]["then"]}] for role, answers in panel_rules("x").items()}
    return merge(_scene_script(n), judges)


def _generate(out: Path, spec: str, t2i: str, n: int) -> list[str]:
    # cache=None: the default response cache, under HOME.
    return generate_args(out, spec, t2i, "--review", "auto", "--concurrency", "4", n=n, cache=None)


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted((json.loads(line) for line in lines if line.strip()), key=lambda r: r["id"])


@pytest.mark.slow
def test_generate_20_with_the_default_cache_gives_20_scenes_and_replays_them(
    tmp_path: Path, tiny_sd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unveil.cli import main

    monkeypatch.delenv("UNVEIL_CACHE", raising=False)  # the default cache, as a user has it
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    n = 20
    spec = write_script(tmp_path, _accepting(n))
    out = tmp_path / "ds"
    assert main(_generate(out, spec, tiny_sd, n)) == 0
    assert (tmp_path / "home" / ".cache" / "unveil" / "responses.sqlite").is_file()
    records = _records(out)
    assert [r["status"] for r in records] == ["accepted"] * n
    assert len({r["text"] for r in records}) == n  # twenty distinct scenes, none a replay of another
    assert {r["text"] for r in records} == {_erasure(i)["caption"] for i in range(n)}
    assert get_gateway().usage["by_role"]["architect"]["cache_hits"] == 0
    # each scene's request carried its own seed, as data the model reads
    (script,) = get_gateway().shared["scripts"].values()
    sent = [request_data(m) for role, m in script.requests if role == "architect"]
    assert sorted(int(t.split('"scene_seed">')[1].split("<")[0]) for t in sent) == [1000 * i for i in range(n)]

    # The same command again: every scene is already there, and nothing reaches a model.
    assert main(_generate(out, spec, tiny_sd, n)) == 0
    assert _records(out) == records and get_gateway().usage["total"]["calls"] == 0

    # The same command into a new folder: all twenty scenes are replayed from the cache, with no model call.
    fresh = tmp_path / "ds2"
    assert main(_generate(fresh, spec, tiny_sd, n)) == 0
    replayed = _records(fresh)
    assert [r["text"] for r in replayed] == [r["text"] for r in records]
    # 9 calls a scene: architect, eraser, six judges, concept similarity (no single-modality gate by default)
    assert get_gateway().usage["total"]["calls"] == 0 and get_gateway().usage["total"]["cache_hits"] >= 9 * n
