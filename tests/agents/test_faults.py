"""Backend faults through a real OpenAI-compatible HTTP server (`tests/faultserver.py`) reached by the gateway via
langchain-openai: every fault kind is retried or repaired, retries are bounded and back off (Retry-After
honoured), and in a batch a sample that can never succeed fails alone with its reason while nothing is lost or
written twice."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, ModelCallError, StructuredOutputError
from agents.tag.vanilla import VanillaVerdict
from tests.faultserver import ANSWER_FAULTS, FAULT_KINDS, TRANSPORT_FAULTS, FaultServer, UnveilAnswers

VERDICT = {"toxic": False, "reason": "an ordinary pair"}


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server hangs for hang_s on a timeout fault; the client must give up well before. The timeout is one
    # deadline for the whole call (issue 44): 0.4 s was passed by healthy calls on a loaded 2-core machine.
    monkeypatch.setenv("UNVEIL_REQUEST_TIMEOUT", "1.5")


def _gateway(**kw) -> Gateway:
    return Gateway(GatewaySettings(cache_path=None, **{"backoff_base": 0.01, "max_retries": 3, "max_repairs": 2, **kw}))


def _messages(text: str = "a kitchen table / baking day"):
    return build_messages("You judge pairs.", {"text": text})


@pytest.mark.parametrize("kind", FAULT_KINDS)
async def test_each_fault_kind_is_retried_or_repaired(kind: str) -> None:
    # The server hangs 5 s on a timeout fault, far beyond the client's 1.5 s: finishing sooner proves the client
    # gave up, however loaded the machine is.
    with FaultServer({"VanillaVerdict": VERDICT}, kinds=(kind,), fault_first=1, hang_s=5.0) as server:
        gw = _gateway()
        started = time.monotonic()
        result = await gw.structured(
            role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
        )
        elapsed = time.monotonic() - started
    assert result.value == VanillaVerdict(**VERDICT)
    assert server.stats[f"fault:{kind}"] == 1 and server.stats["clean"] == 1 and len(server.bodies) == 2
    assert result.usage["total"]["retries"] == 1 and result.usage["total"]["calls"] == 2
    if kind in ANSWER_FAULTS:
        # A bad answer is repaired: the second request shows the model its answer as data and says what was wrong.
        repair = server.bodies[1]["messages"][-1]["content"]
        assert '<data name="previous_answer">' in repair and "could not be used" in repair
        if kind == "length":
            assert "cut at the token limit" in repair
    else:
        # A transport fault repeats the very same request.
        assert server.bodies[0] == server.bodies[1]
    if kind == "timeout":
        assert elapsed < 5.0  # the client timed out (1.5 s) instead of waiting for the hanging server


async def test_retries_are_bounded_and_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delays the gateway asks for, not the gaps a loaded machine measures: exponential in the attempt, with
    jitter in [0.5, 1.5) (fixed here), and each one really waited before the next attempt."""
    import agents.gateway as gateway_module

    monkeypatch.setattr(gateway_module.random, "random", lambda: 0.5)  # jitter factor 1.0
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: object) -> None:
        if sys._getframe(1).f_globals.get("__name__") == "agents.gateway":  # the retry waits, not other sleeps
            asked.append(delay)
        await real_sleep(delay, *args)

    monkeypatch.setattr(gateway_module.asyncio, "sleep", sleep)
    with FaultServer({"VanillaVerdict": VERDICT}, kinds=("500",), rate=1.0) as server:
        gw = _gateway(backoff_base=0.05, max_retries=3)
        with pytest.raises(ModelCallError, match="after 4 attempts.*500"):
            await gw.structured(
                role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
            )
        assert len(server.bodies) == 4  # one try + max_retries, then it stops
        gaps = [b - a for a, b in zip(server.times, server.times[1:], strict=False)]
    assert asked == pytest.approx([0.05, 0.1, 0.2])  # base * 2**attempt
    assert all(gap >= delay for gap, delay in zip(gaps, asked, strict=True)), (gaps, asked)


async def test_retry_after_is_honoured() -> None:
    with FaultServer({"VanillaVerdict": VERDICT}, kinds=("429",), fault_first=2, retry_after=0.4) as server:
        gw = _gateway(backoff_base=0.001)
        result = await gw.structured(
            role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
        )
        gaps = [b - a for a, b in zip(server.times, server.times[1:], strict=False)]
    assert result.value.toxic is False and len(gaps) == 2
    assert all(g >= 0.38 for g in gaps), gaps  # the server's Retry-After, not the 1 ms backoff


async def test_a_permanently_bad_answer_fails_with_its_raw_text() -> None:
    with FaultServer({"VanillaVerdict": VERDICT}, kinds=("malformed",), rate=1.0) as server:
        gw = _gateway(max_repairs=2)
        with pytest.raises(StructuredOutputError) as err:
            await gw.structured(
                role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
            )
    assert len(server.bodies) == 3 and err.value.attempts == 3
    assert "unfinished" in err.value.raw


async def test_free_text_calls_retry_transport_faults() -> None:
    with FaultServer({"text": "keep"}, kinds=TRANSPORT_FAULTS, fault_first=3, hang_s=4.0) as server:
        gw = _gateway()
        result = await gw.text(role="refiner", spec=server.spec(), messages=_messages())
    assert result.value == "keep" and result.usage["total"]["retries"] == 3 and len(server.bodies) == 4


def test_detect_batch_under_faults_poisoned_sample_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from unveil.cli import main

    src = tmp_path / "pairs.jsonl"
    n = 16
    rows = [
        {
            "id": f"s{i}",
            "image_description": f"a kitchen table {i}",
            "text": f"baking day {i}" + (" UNVEIL-POISON" if i == 5 else ""),
        }
        for i in range(n)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    # The seed fixes which requests fault; with the two root-graph calls per sample, seed 3 gave one healthy sample
    # three malformed answers in a row (0.3^3 per call), which no repair budget survives.
    with FaultServer(UnveilAnswers(), rate=0.3, seed=4, hang_s=3.0) as server:
        rc = main(
            [
                "detect",
                "--method",
                "tag",
                "--l-max",
                "2",
                "--input",
                str(src),
                "--output",
                str(out),
                "--model",
                server.spec(),
                "--cache",
                "off",
                "--no-progress",
                "--concurrency",
                "4",
            ]
        )
    assert rc == 2  # the batch ran; the poisoned sample failed (the batch exit rule)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [r["id"] for r in records]
    assert sorted(ids) == sorted(r["id"] for r in rows) and len(ids) == len(set(ids))  # none lost, none twice
    failed = {r["id"]: r for r in records if r["status"] == "failed"}
    assert list(failed) == ["s5"]  # only the sample that can never succeed
    assert "ModelCallError" in failed["s5"]["error"] and "500" in failed["s5"]["error"]
    faults = sum(v for k, v in server.stats.items() if k.startswith("fault:"))
    assert faults >= 10  # the other samples really went through faults
    retries = sum(r["usage"]["total"]["retries"] for r in records if r["status"] == "ok")
    assert retries > 0
    assert all(r["toxic"] is False for r in records if r["status"] == "ok")


async def test_unsupported_structured_method_falls_back_at_once_and_is_remembered_per_backend() -> None:
    # llama-cpp-python's server refuses json_schema with a 500: not a transient fault, a method it lacks.
    with FaultServer({"VanillaVerdict": VERDICT}, unsupported=("json_schema",)) as server:
        gw = _gateway(max_retries=3)
        first = await gw.structured(
            role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
        )
        # another model on the same server: the backend's method is remembered, json_schema is not tried again
        second = await gw.structured(
            role="vanilla_detector",
            spec=server.spec("other-model"),
            schema=VanillaVerdict,
            messages=_messages("another pair"),
        )
    assert first.value == second.value == VanillaVerdict(**VERDICT)
    # one refused request (not retried as transient), then the fallback method for both calls
    assert server.stats["unsupported"] == 1 and len(server.bodies) == 3
    assert "tools" in server.bodies[1] and "tools" in server.bodies[2]
    assert first.usage["total"]["retries"] == 0 and second.usage["total"]["retries"] == 0


async def test_a_backend_supporting_no_method_fails_with_the_servers_own_message() -> None:
    with FaultServer({"VanillaVerdict": VERDICT}, unsupported=("json_schema", "tools")) as server:
        gw = _gateway(structured_method="function_calling")  # an explicit method: no fallback
        with pytest.raises(ModelCallError) as err:
            await gw.structured(
                role="vanilla_detector", spec=server.spec(), schema=VanillaVerdict, messages=_messages()
            )
    assert "Input should be 'text' or 'json_object'" in str(err.value) and err.value.attempts == 1
    assert server.stats["unsupported"] == 1  # refused once, not retried as a transient 500
