"""The answer deadline and size cap (`tools.http_limits`) on the model clients of `tools/`: the OpenAI moderation
scorer. It had only the openai SDK's per-read timeouts, so a server that trickles a byte at a time held a scene as
long as it liked, and an answer of any size was read whole. Each case is a real HTTP server on loopback
(`tests.hostile_server`) reached through the openai SDK, as a user's run reaches one; the deadlines (1.5 s) are far
shorter than the servers' hang (30 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_args import generate_args
from tests.graphs.test_ctd import accepting_script, write_script
from tests.hostile_server import HostileServer
from tests.moderation_server import ModerationServer
from tools import http_limits
from tools.http_limits import AnswerDeadlineError, AnswerTooLargeError
from tools.moderation import ModerationScorer

SMALL_CAP = 256 * 1024  # over every honest answer of these servers, under every flood


@pytest.fixture(autouse=True)
def _deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long beside the servers' 20 ms trickle, so httpx's read timeout (the same number) never fires first.
    monkeypatch.setenv("UNVEIL_REQUEST_TIMEOUT", "1.5")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


# -- the moderation scorer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers"])
async def test_a_trickling_moderation_server_is_cut_at_the_deadline(mode: str) -> None:
    with HostileServer(mode) as server:
        with pytest.raises(AnswerDeadlineError) as info:
            await ModerationScorer(server.spec).score_text("flour for baking")
    message = str(info.value)
    assert f"model server {server.base_url}" in message
    assert "no whole answer within the 1.5 s deadline (UNVEIL_REQUEST_TIMEOUT)" in message


@pytest.mark.parametrize("mode", ["huge-declared", "huge-chunked", "gzip"])
async def test_a_moderation_answer_over_the_cap_is_refused_and_not_asked_again(mode: str, monkeypatch) -> None:
    monkeypatch.setattr(http_limits, "MAX_ANSWER_BYTES", SMALL_CAP)
    with HostileServer(mode) as server:
        with pytest.raises(AnswerTooLargeError) as info:
            await ModerationScorer(server.spec).score_text("flour for baking")
    message = str(info.value)
    assert f"model server {server.base_url}" in message
    assert f"over {SMALL_CAP:,} bytes" in message or "compressed (gzip)" in message
    assert server.requests == 1  # the SDK's retries would only get it again


# -- a batch goes on -------------------------------------------------------------------------------------------


def _generate(tmp_path: Path, *extra: str) -> list[dict]:
    """`unveil generate` of 2 scenes rendered by gpt-image-1 (reached through OPENAI_BASE_URL); the records."""
    from unveil.cli import main

    out, spec = tmp_path / "ds", write_script(tmp_path, accepting_script())
    assert main(generate_args(out, spec, "openai:gpt-image-1", *extra, n=2, cache="off")) == 2
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_a_generate_batch_against_a_flooding_moderation_server_records_each_scene(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(http_limits, "MAX_ANSWER_BYTES", SMALL_CAP)
    with ModerationServer() as images, HostileServer("huge-chunked") as moderation:
        monkeypatch.setenv("OPENAI_BASE_URL", images.base_url)
        records = _generate(tmp_path, "--moderation", moderation.spec)
    assert len(records) == 2 and len({r["id"] for r in records}) == 2
    for record in records:
        assert record["status"] == "failed", record
        where = f"{moderation.base_url}/moderations"
        assert record["error"] == f"AnswerTooLargeError: model server {where}: answer over {SMALL_CAP:,} bytes"
