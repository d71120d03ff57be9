"""The errors of a model call, and how the gateway tells failures apart: transient faults worth retrying (rate
limits, server errors, timeouts, dropped connections), a backend that lacks the structured-output method asked for
(the gateway falls back to the next), and a server that takes no images (the gateway sends the images' descriptions
instead). Servers say so in words with whatever status they like, so the words are read, never the status alone.
"""

from __future__ import annotations

import asyncio

from langchain_core.messages import BaseMessage

from agents.answers import answer_error
from agents.providers.registry import TEXT_ONLY_ENV
from tools.errors import UnveilError
from tools.http_limits import AnswerDeadlineError, limit_cause
from tools.redact import redact_secrets

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


class StructuredOutputError(UnveilError, RuntimeError):
    """A role's answer stayed malformed after the bounded repairs; `raw` keeps the last answer for inspection."""

    def __init__(self, role: str, spec: str, error: str, raw: str, attempts: int):
        super().__init__(f"role {role!r} ({spec}): no valid structured answer after {attempts} attempts: {error}")
        self.role, self.spec, self.error, self.raw, self.attempts = role, spec, error, raw, attempts


class ModelCallError(UnveilError, RuntimeError):
    """A backend kept failing (or failed permanently) for a role."""

    def __init__(self, role: str, spec: str, error: BaseException, attempts: int, request: str = ""):
        # `request` says what was asked (the output schema and structured method): a server that rejects or crashes
        # on one schema is then named with it.
        asked = f"; {request}" if request else ""
        super().__init__(
            f"role {role!r} ({spec}{asked}): model call failed after {attempts} attempts: {describe(error)}"
        )
        self.role, self.spec, self.attempts = role, spec, attempts


class ImagesUnsupportedError(ModelCallError):
    """The server refused the request's images: the model is text-only and was not declared so."""

    def __init__(self, role: str, spec: str, error: BaseException):
        RuntimeError.__init__(
            self,
            f"role {role!r} ({spec}): the server does not take images ({describe(error)[:300]}); declare the model "
            f"text-only with {TEXT_ONLY_ENV}={spec} (comma-separated spec prefixes) so it is sent image descriptions "
            "instead, or use a vision model",
        )
        self.role, self.spec, self.attempts = role, spec, 1


def describe(exc: BaseException) -> str:
    """An error as one short line, with any credentials a client or server put in it redacted; a client library's
    error that wraps an answer's deadline or size cap (`Request timed out.`, `Connection error.`) says which."""
    exc = limit_cause(exc) or exc
    # Never echo credentials that a client library or a server may have put in a message.
    return redact_secrets(f"{type(exc).__name__}: {exc}")[:500]


def server_message(exc: BaseException, limit: int = 400) -> str:
    """An error as one line for a warning: the server's own message where the error carries one (an OpenAI-style
    `body` with `message`), whole, with its HTTP status, else the error's text; redacted. Longer than `limit`, it
    is cut at a word and says so, never inside a quoted value without a mark."""
    message = ""
    for err in (exc, exc.__cause__, exc.__context__):
        body = getattr(err, "body", None) if err is not None else None
        if err is None or not isinstance(body, dict):
            continue
        inner = body["error"] if isinstance(body.get("error"), dict) else body
        said = inner.get("message")
        if isinstance(said, str) and said.strip():
            status = status_of(err)
            message = (f"HTTP {status}: " if status else "") + said
            break
    text = " ".join(redact_secrets(message or f"{type(exc).__name__}: {exc}").split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + f" … ({len(text) - limit}+ characters more)"


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an error carries (on itself or its response), if any."""
    for attr in ("status_code", "status", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


_TRANSIENT_NAMES = ("Timeout", "Connection", "RateLimit", "ServiceUnavailable", "RemoteProtocol", "ReadError")


def is_transient(exc: BaseException) -> bool:
    """Faults worth retrying: rate limits, server errors, timeouts, dropped connections; not an answer over the size
    cap (the server would send it again)."""
    limit = limit_cause(exc)
    if limit is not None:
        return isinstance(limit, AnswerDeadlineError)
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    return any(k in name for k in _TRANSIENT_NAMES)


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header, when the error carries a response."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# A server that lacks a structured-output method says so in words, with whatever status it likes: llama-cpp-python's
# server answers 500 "Input should be 'text' or 'json_object'" to `response_format: json_schema`, others 400/404/422
# "tools not supported". Recognised by the message (a method word and a refusal word), never by the status alone.
_METHOD_WORDS = ("response_format", "json_schema", "json_object", "tool_choice", "tools", "function", "structured")
_REFUSAL_WORDS = (
    "not support",
    "unsupported",
    "not implemented",
    "input should be",
    "literal_error",
    "not allowed",
    "extra inputs",
    "unrecognized",
    "unknown",
    "invalid",
    "not available",
    "not enabled",
)


def is_method_unsupported(exc: BaseException) -> bool:
    """Whether `exc` says the backend does not support the structured-output method that was asked for (any status
    code, 500 included); such an error is not retried, the gateway falls back to the next method instead."""
    if answer_error(exc) is not None or status_of(exc) in (401, 403, 429):
        return False  # a bad answer to repair, or an auth/rate fault, whatever its words
    text = str(exc).lower()
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + str(body).lower()
    if not any(k in text for k in _METHOD_WORDS):
        return False
    return isinstance(exc, (NotImplementedError, TypeError)) or any(k in text for k in _REFUSAL_WORDS)


# A text-only model behind an OpenAI-compatible server refuses image blocks in words, with any status (llama.cpp's
# server "image input is not supported", vLLM "is not a multimodal model" / "At most 0 image(s)", OpenAI "image_url
# is only supported by certain models", LM Studio "does not support images"). Recognised by an image word and a
# refusal word, and only for a request that holds images.
_IMAGE_WORDS = ("image", "multimodal", "multi-modal", "vision", "mmproj")
_IMAGE_REFUSALS = (
    "not support",
    "unsupported",
    "not a multimodal",
    "not a multi-modal",
    "only supported",
    "at most 0",
    "not enabled",
    "not implemented",
    "does not accept",
    "no vision",
)
# Servers that do not refuse in words but crash on a message whose content is a list of blocks (only a request with
# images has one: a text-only request's content is one string): llama-cpp-python's server answers 500 "can only
# concatenate str (not "list") to str" from its chat template.
_LIST_CONTENT_CRASHES = ('can only concatenate str (not "list") to str',)


def is_images_unsupported(exc: BaseException, messages: list[BaseMessage]) -> bool:
    """Whether `exc` is a server saying that it takes no images, in answer to a request with image blocks."""
    if not has_images(messages) or status_of(exc) in (401, 403, 408, 429):
        return False
    text = str(exc).lower()
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + str(body).lower()
    if any(crash.lower() in text for crash in _LIST_CONTENT_CRASHES):
        return True
    return any(w in text for w in _IMAGE_WORDS) and any(r in text for r in _IMAGE_REFUSALS)


def has_images(messages: list[BaseMessage]) -> bool:
    """Whether a request holds an image block."""
    return any(
        isinstance(block, dict) and block.get("type") in ("image_url", "image")
        for m in messages
        if isinstance(m.content, list)
        for block in m.content
    )
