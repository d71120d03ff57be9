"""The answer deadline and size cap (`tools.http_limits`) on the two model clients of `tools/`: the OpenAI
moderation scorer and the OpenAI image generator. Both had only the openai SDK's per-read timeouts, so a server
that trickles a byte at a time held a scene as long as it liked, and an answer of any size was read whole. Each
case is a real HTTP server on loopback (`tests.hostile_server`) reached through the openai SDK, as a user's run
reaches one; the deadlines (1.5 s) are far shorter than the servers' hang (30 s)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from tests.cli_args import generate_args
from tests.graphs.test_ctd import accepting_script, write_script
from tests.hostile_server import HostileServer
from tests.moderation_server import ModerationServer
from tools import http_limits
from tools.http_limits import AnswerDeadlineError, AnswerTooLargeError
from tools.image_store import ImageStore
from tools.moderation import ModerationScorer
from tools.t2i import openai_backend
from tools.t2i.base import GenerationRequest
from tools.t2i.errors import T2IError
from tools.t2i.openai_backend import OpenAIImageGenerator

SMALL_CAP = 256 * 1024  # over every honest answer of these servers, under every flood


@pytest.fixture(autouse=True)
def _deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long beside the servers' 20 ms trickle, so httpx's read timeout (the same number) never fires first.
    monkeypatch.setenv("UNVEIL_REQUEST_TIMEOUT", "1.5")
    monkeypatch.setenv("UNVEIL_IMAGE_REQUEST_TIMEOUT", "1.5")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def _generator(server: HostileServer, tmp_path: Path) -> OpenAIImageGenerator:
    return OpenAIImageGenerator("gpt-image-1", base_url=server.base_url, store=ImageStore(tmp_path / "store"))


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


# -- the image generator ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers"])
async def test_a_trickling_image_server_fails_the_prompt_at_the_deadline(mode: str, tmp_path) -> None:
    with HostileServer(mode) as server:
        with pytest.raises(T2IError) as info:
            await _generator(server, tmp_path).generate(GenerationRequest(prompt="a lighthouse"))
    message = str(info.value)
    assert f"model server {server.base_url}" in message
    assert "no whole answer within the 1.5 s deadline (UNVEIL_IMAGE_REQUEST_TIMEOUT)" in message
    assert isinstance(info.value.__cause__, AnswerDeadlineError)


@pytest.mark.parametrize("mode", ["huge-declared", "huge-chunked", "gzip"])
async def test_an_image_answer_over_the_cap_is_refused_and_not_asked_again(mode: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(openai_backend.MAX_IMAGE_ANSWER_BYTES, "gpt-image-1", SMALL_CAP)
    with HostileServer(mode) as server:
        with pytest.raises(T2IError) as info:
            await _generator(server, tmp_path).generate(GenerationRequest(prompt="a lighthouse"))
    message = str(info.value)
    assert f"model server {server.base_url}" in message
    assert f"over {SMALL_CAP:,} bytes" in message or "compressed (gzip)" in message
    assert isinstance(info.value.__cause__, AnswerTooLargeError) and server.requests == 1


def test_the_image_cap_holds_the_largest_honest_answer_and_no_more_images_are_asked_for() -> None:
    """Ten gpt-image-1 images at its largest size, as PNGs that do not compress (the worst an honest answer
    carries), fit under the cap; a call for more than ten, which the cap is not sized for, is refused."""
    from PIL import Image

    from tools.t2i.errors import UnsupportedOptionError

    buf = io.BytesIO()
    Image.frombytes("RGBA", (1536, 1024), bytes(range(256)) * (1536 * 1024 * 4 // 256)).save(
        buf, format="PNG", compress_level=0
    )
    item = {"b64_json": base64.b64encode(buf.getvalue()).decode("ascii")}
    answer = json.dumps({"created": 0, "data": [item] * 10, "usage": {"total_tokens": 1}})
    assert len(answer) > http_limits.MAX_ANSWER_BYTES  # a chat answer's cap would refuse it
    assert len(answer) <= openai_backend.MAX_IMAGE_ANSWER_BYTES["gpt-image-1"] < 2 * len(answer)
    with pytest.raises(UnsupportedOptionError, match="over gpt-image-1's 10 a call"):
        OpenAIImageGenerator("gpt-image-1").build_params(GenerationRequest(prompt="a cat", num_images=11))


# -- a batch goes on -------------------------------------------------------------------------------------------


def _generate(tmp_path: Path, *extra: str) -> list[dict]:
    """`unveil generate` of 2 scenes rendered by gpt-image-1 (reached through OPENAI_BASE_URL); the records."""
    from unveil.cli import main

    out, spec = tmp_path / "ds", write_script(tmp_path, accepting_script())
    assert main(generate_args(out, spec, "openai:gpt-image-1", *extra, n=2, cache="off")) == 2
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_a_generate_batch_against_a_trickling_image_server_records_each_scene(tmp_path, monkeypatch) -> None:
    with HostileServer("trickle-body") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        records = _generate(tmp_path)
    assert len(records) == 2 and len({r["id"] for r in records}) == 2
    for record in records:
        assert record["status"] == "failed" and record["error"].startswith("T2IError: openai:gpt-image-1"), record
        assert server.base_url in record["error"] and "UNVEIL_IMAGE_REQUEST_TIMEOUT" in record["error"]


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
