"""A hostile model server (`tools.http_limits`): `UNVEIL_REQUEST_TIMEOUT` is one deadline for the whole
answer, not a read timeout that restarts at every byte (a server that sent its headers and then a byte a second
held a batch for 240 s), and an answer body is capped (a 1 GiB answer was read whole, 3.7 GB, and the run crashed).
Each case is a real HTTP server on loopback reached by the gateway through langchain-openai."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, ModelCallError
from agents.tag.vanilla import VanillaVerdict
from tests.hostile_server import HostileServer
from tools import http_limits


@pytest.fixture(autouse=True)
def _deadline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Long beside the 20 ms trickle, so httpx's read timeout (the same number) never fires first.
    monkeypatch.setenv("UNVEIL_REQUEST_TIMEOUT", "1")
    yield


async def _ask(server: HostileServer, retries: int) -> str:
    gw = Gateway(GatewaySettings(cache_path=None, max_retries=retries, backoff_base=0.01, max_repairs=0))
    messages = build_messages("You judge pairs.", {"text": "a kitchen table"})
    with pytest.raises(ModelCallError) as info:
        await gw.structured(role="vanilla_detector", spec=server.spec, schema=VanillaVerdict, messages=messages)
    return str(info.value)


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers"])
async def test_a_trickling_server_is_cut_at_one_deadline_per_call(mode: str) -> None:
    """Every byte on time for the read timeout, the whole answer never: each attempt ends at its deadline."""
    with HostileServer(mode) as server:
        message = await _ask(server, retries=0)
    assert "deadline" in message and "UNVEIL_REQUEST_TIMEOUT" in message and server.requests == 1


@pytest.mark.parametrize("mode", ["huge-declared", "huge-chunked", "gzip"])
async def test_an_answer_over_the_cap_is_refused_and_not_asked_again(mode: str, monkeypatch) -> None:
    monkeypatch.setattr(http_limits, "MAX_ANSWER_BYTES", 256 * 1024)
    with HostileServer(mode) as server:
        message = await _ask(server, retries=2)
    assert "AnswerTooLargeError" in message and ("bytes" in message or "compressed" in message)
    assert server.requests == 1


async def test_an_ordinary_answer_still_arrives(monkeypatch) -> None:
    monkeypatch.setattr(http_limits, "MAX_ANSWER_BYTES", 256 * 1024)
    with HostileServer("ok") as server:
        gw = Gateway(GatewaySettings(cache_path=None))
        messages = build_messages("You judge pairs.", {"text": "a kitchen table"})
        result = await gw.structured(
            role="vanilla_detector", spec=server.spec, schema=VanillaVerdict, messages=messages
        )
    assert result.value == VanillaVerdict(toxic=False, reason="fine")


@pytest.mark.parametrize("mode", ["trickle-body", "huge-chunked"])
def test_a_batch_against_such_a_server_ends_with_every_record_written(tmp_path, monkeypatch, mode: str) -> None:
    """The issue's batch: 6 samples against a server that trickles (0 records after 240 s) or answers 1 MiB (over
    the cap here; 1 GiB crashed the run with exit 70). Each sample fails on its own, with a record naming why."""
    from unveil.cli import main

    monkeypatch.setattr(http_limits, "MAX_ANSWER_BYTES", 256 * 1024)
    monkeypatch.setenv("UNVEIL_MAX_RETRIES", "0")
    src, out = tmp_path / "pairs.jsonl", tmp_path / "out.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"s{n}", "image_description": "a room", "text": "hi"}) + "\n" for n in range(6))
    )
    with HostileServer(mode) as server:
        args = ["detect", "--method", "vanilla", "--input", str(src), "--output", str(out), "--model", server.spec]
        assert main([*args, "--cache", "off", "--no-progress"]) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == [f"s{n}" for n in range(6)]
    said = "UNVEIL_REQUEST_TIMEOUT" if mode == "trickle-body" else "AnswerTooLargeError"
    assert all(r["status"] == "failed" and said in r["error"] for r in records), records[0]
