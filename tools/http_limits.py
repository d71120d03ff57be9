"""One deadline and a size cap for every answer a model server sends, as the image fetcher has (`tools.image_input`).

Every client Unveil builds for a model served elsewhere uses it: the chat models of the gateway (`agents/`), the
OpenAI moderation scorer (`tools.moderation`) and the OpenAI image generator (`tools.t2i.openai_backend`).

httpx's timeouts bound each connect and each read, not a request: a server that sent its headers and then one byte
a second held a 6-sample batch for 240 s with no record written, and a 1 GiB answer was read whole (3.7 GB of
memory) before the run ended in a crash. So:

- `limited_client`, the HTTP client Unveil builds for a LangChain provider (`langchain_api.build_chat_model`):
  every byte of an answer's body must arrive within one deadline (`UNVEIL_REQUEST_TIMEOUT` from when the request
  started), and a body larger than `MAX_ANSWER_BYTES` (declared or counted) is refused; it asks for an
  uncompressed answer and a compressed one is refused, since its size says nothing of what it expands to;
- `within_deadline`, the bound around every call to a model served elsewhere (the same deadline, whatever client
  its library uses: the wait for the headers included, and any retries the client makes on its own).

A client whose answers are larger or slower by nature (images: `tools.t2i.openai_backend`) passes a cap of its own
to `limited_client` and reads its deadline from `UNVEIL_IMAGE_REQUEST_TIMEOUT` (`image_request_timeout`). Around a
client library that retries on its own (the openai SDK), `within_deadline` starts before the first attempt, so it
ends the call before the library could wrap a late body's error in its own ("Request timed out.").

A missed deadline is an `AnswerDeadlineError` (an httpx read timeout: retried as any timeout, each attempt with a
deadline of its own); a body over the cap an `AnswerTooLargeError` (not retried: the server would send it again).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import httpx

from tools.env import env_float
from tools.errors import UnveilError
from tools.redact import redact_url

# The largest answer body read: a chat answer is text, a few KB to a few hundred (a long structured answer); 32 MiB
# is far above any and far below what hurts a machine.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
TIMEOUT_ENV = "UNVEIL_REQUEST_TIMEOUT"
IMAGE_TIMEOUT_ENV = "UNVEIL_IMAGE_REQUEST_TIMEOUT"

T = TypeVar("T")


def request_timeout() -> float | None:
    """The deadline of one request to a model server in seconds, its whole answer included (`UNVEIL_REQUEST_TIMEOUT`,
    default 120); a bad value raises `SettingError` naming the variable (commands check it before their first
    sample)."""
    return env_float(TIMEOUT_ENV, 120.0, minimum=0, strict=True)


def image_request_timeout() -> float | None:
    """The deadline of one request to an image-generation API in seconds, its whole answer included
    (`UNVEIL_IMAGE_REQUEST_TIMEOUT`, default 300: OpenAI says a complex gpt-image-1 prompt may take up to two
    minutes, so the chat models' 120 s would cut images the account has paid for); a bad value raises
    `SettingError` naming the variable."""
    return env_float(IMAGE_TIMEOUT_ENV, 300.0, minimum=0, strict=True)


class AnswerDeadlineError(UnveilError, httpx.ReadTimeout):
    """A model server's whole answer did not arrive within the request's deadline."""


class AnswerTooLargeError(UnveilError, ValueError):
    """A model server's answer is over its client's cap (`MAX_ANSWER_BYTES` unless the client has one of its own), or
    compressed though an uncompressed one was asked for."""


def _where(url: object) -> str:
    """A server's URL as errors name it: its credentials redacted (the errors are kept in failure records)."""
    return redact_url(str(url))


def _late(url: object, seconds: float, setting: str) -> str:
    return f"model server {_where(url)}: no whole answer within the {seconds:g} s deadline ({setting})"


async def within_deadline(call: Awaitable[T], seconds: float | None, what: str, setting: str = TIMEOUT_ENV) -> T:
    """Await `call` for at most `seconds` (no bound when None); past it, an `AnswerDeadlineError` naming `what` and
    the variable that sets the deadline (`setting`)."""
    if seconds is None:
        return await call
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError as exc:
        raise AnswerDeadlineError(_late(what, seconds, setting)) from exc


class _LimitedBody(httpx.AsyncByteStream):
    """An answer's body read under the request's deadline and the size cap."""

    def __init__(
        self, inner: httpx.AsyncByteStream, request: httpx.Request, deadline: float | None, late: str, cap: int
    ):
        self.inner, self.request, self.deadline, self.late, self.cap = inner, request, deadline, late, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        chunks = self.inner.__aiter__()
        while True:
            try:
                async with asyncio.timeout_at(self.deadline):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise AnswerDeadlineError(self.late, request=self.request) from exc
            size += len(chunk)
            if size > self.cap:
                raise AnswerTooLargeError(f"model server {_where(self.request.url)}: answer over {self.cap:,} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


_DEADLINE = "unveil_deadline"  # the request extension that carries its deadline (event loop time)


def limited_client(
    seconds: float | None, max_bytes: int | None = None, setting: str = TIMEOUT_ENV
) -> httpx.AsyncClient:
    """An HTTP client for a model server: httpx's own timeouts (each connect and read), uncompressed answers asked
    for, and through its event hooks (which every request takes, whatever transport or proxy it goes through) each
    request's deadline (`seconds`, set by the variable `setting`) set when it starts and its answer's body read
    under that deadline and the cap (`max_bytes`, else `MAX_ANSWER_BYTES`)."""
    cap = MAX_ANSWER_BYTES if max_bytes is None else max_bytes

    async def start(request: httpx.Request) -> None:
        if seconds is not None:
            request.extensions[_DEADLINE] = asyncio.get_running_loop().time() + seconds

    async def limit(response: httpx.Response) -> None:
        check_answer(response, cap)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # an async client's answers are
        deadline = response.request.extensions.get(_DEADLINE)
        late = _late(response.request.url, seconds or 0, setting)
        response.stream = _LimitedBody(response.stream, response.request, deadline, late, cap)

    return httpx.AsyncClient(
        timeout=seconds,
        headers={"Accept-Encoding": "identity"},
        event_hooks={"request": [start], "response": [limit]},
    )


def check_answer(response: httpx.Response, cap: int) -> None:
    """Refuse an answer whose headers declare a body over `cap` bytes, or a compressed one (its size says nothing of
    what it expands to)."""
    declared = response.headers.get("content-length", "")
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if declared.isdigit() and int(declared) > cap:
        problem = f"answer of {int(declared):,} bytes is over {cap:,} bytes"
    elif encoding not in ("", "identity"):
        problem = f"answer compressed ({encoding}) though an uncompressed one was asked for"
    else:
        return
    raise AnswerTooLargeError(f"model server {_where(response.request.url)}: {problem}")


def limit_cause(exc: BaseException) -> BaseException | None:
    """The answer deadline or size cap behind `exc`, if one is among its causes (a client library wraps it in an
    error of its own, with a message that no longer names the server or the limit)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a client wraps it once or twice; the bound only guards against a cycle
        if seen is None:
            return None
        if isinstance(seen, (AnswerDeadlineError, AnswerTooLargeError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
