"""A hostile model server (`tools.http_limits`): `UNVEIL_REQUEST_TIMEOUT` is one deadline for the whole
answer, not a read timeout that restarts at every byte (a server that sent its headers and then a byte a second
held a batch for 240 s), and an answer body is capped (a 1 GiB answer was read whole, 3.7 GB, and the run crashed).
Each case is a real HTTP server on loopback reached by the gateway through langchain-openai."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Iterator

import pytest

from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, ModelCallError
from agents.tag.vanilla import VanillaVerdict
from tools import http_limits

ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": json.dumps({"toxic": False, "reason": "fine"})},
        }
    ],
}


class HostileServer:
    """An OpenAI-compatible loopback server that answers every request the way `mode` says; it stops after
    `lifetime_s` (closing every connection), so a client without a deadline ends too, with another error."""

    def __init__(self, mode: str, lifetime_s: float = 30.0):
        self.mode, self.lifetime_s, self.requests, self.port = mode, lifetime_s, 0, 0
        self._ready, self._loop = threading.Event(), asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)
        self.packed = gzip.compress(b" " * 10_000_000 + json.dumps(ANSWER).encode()) if mode == "gzip" else b""

    def __enter__(self) -> HostileServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def spec(self) -> str:
        return f"openai:m@http://127.0.0.1:{self.port}/v1"

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await asyncio.wait_for(self._stop.wait(), self.lifetime_s)
        except TimeoutError:
            pass
        server.close()
        for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
        )
        await reader.readexactly(length)
        self.requests += 1
        body = json.dumps(ANSWER).encode()
        try:
            if self.mode == "trickle-body":  # headers at once, then a space (valid JSON padding) every 20 ms
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                while True:
                    writer.write(b" ")
                    await writer.drain()
                    await asyncio.sleep(0.02)
            if self.mode == "trickle-headers":  # a header line every 20 ms, never the end of the headers
                writer.write(b"HTTP/1.1 200 OK\r\n")
                for n in range(10**9):
                    writer.write(f"X-Padding-{n}: a\r\n".encode())
                    await writer.drain()
                    await asyncio.sleep(0.02)
            if self.mode == "huge-declared":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n")
                writer.write(b" " * 65536)
            elif self.mode == "huge-chunked":  # no length said: 1 MiB of padding, then the answer
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                for part in [b" " * 65536] * 16 + [body]:
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                writer.write(b"0\r\n\r\n")
            elif self.mode == "gzip":  # 10 MB of padding in 10 KB: its size says nothing of what it expands to
                packed = self.packed
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(packed), packed)
                )
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


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
