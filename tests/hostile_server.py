"""A hostile OpenAI-compatible server on loopback, for the tests of the answer deadline and size cap
(`tools.http_limits`) through each client that reaches a model server: the gateway's chat models, the moderation
scorer and the image generator.

`HostileServer(mode)` is a real HTTP/1.1 server (asyncio streams in a background thread, bound to 127.0.0.1 on a
free port) that answers every request, whatever its path, the way `mode` says: `trickle-body` (headers at once,
then a byte every 20 ms), `trickle-headers` (a header line every 20 ms, never the end of the headers),
`huge-declared` (a 1 GiB Content-Length), `huge-chunked` (1 MiB of padding with no length said, then the answer),
`gzip` (10 MB of padding compressed to 10 KB) or `ok` (the answer). The answer is `answer` (a chat completion by
default). `requests` counts the requests it got.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from typing import Any

CHAT_ANSWER: dict[str, Any] = {
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

    def __init__(self, mode: str, lifetime_s: float = 30.0, answer: dict[str, Any] | None = None):
        self.mode, self.lifetime_s, self.requests, self.port = mode, lifetime_s, 0, 0
        self.answer = CHAT_ANSWER if answer is None else answer
        self._ready, self._loop = threading.Event(), asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)
        self.packed = gzip.compress(b" " * 10_000_000 + json.dumps(self.answer).encode()) if mode == "gzip" else b""

    def __enter__(self) -> HostileServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL of this server."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def spec(self) -> str:
        """A model spec that reaches this server."""
        return f"openai:m@{self.base_url}"

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
        body = json.dumps(self.answer).encode()
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
