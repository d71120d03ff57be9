"""Secret redaction for everything Unveil writes (errors, logs, failure records): one home, below every layer that
writes, so the gateway, the batch runner and the CLI all use the same rules."""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

from tools.env import env_items

_SECRET_NAME = re.compile(r"(?i)(key|token|secret|passw)")
# Credentials in any URL inside free text: `scheme://user:password@host` or `scheme://token@host`.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@'\"<>]+@")
# A key given a value: `api_key=...`, `api-key: ...`, `"api_key": "..."`. An `=` or `:` must separate the two, so
# prose that names a variable ("set OPENAI_API_KEY in the environment that runs it") keeps its words.
_KEY_ASSIGNMENT = re.compile(r"(?i)(api[_-]?key['\"]?\s*[=:]\s*['\"]?)[^\s'\",]+")
# A URL query parameter whose name says it holds a credential (`?key=`, `&api-key=`, `?access_token=`, `?sig=`,
# `?code=`): its value, as a password in the user part is.
_QUERY_SECRET = re.compile(
    r"(?i)([?&;][^=&;#\s'\"<>]*(?:key|token|secret|passw|pwd|sig|auth|credential|session|code)[^=&;#\s'\"<>]*=)"
    r"[^&;#\s'\"<>]+"
)


def redact_url(url: str) -> str:
    """`url` with its user name and password (if any) and the value of every query parameter named as a credential
    replaced by `***`; the host, port, path and other parameters stay readable.

    `http://user:pw@host:8000/v1?api-key=k&v=2` -> `http://***@host:8000/v1?api-key=***&v=2`. Text that is not a
    URL passes through unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _QUERY_SECRET.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", url))
    query = _QUERY_SECRET.sub(r"\1***", f"?{parts.query}")[1:] if parts.query else ""
    if "@" not in parts.netloc and query == parts.query:
        return url
    netloc = f"***@{parts.netloc.rsplit('@', 1)[1]}" if "@" in parts.netloc else parts.netloc
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_secrets(text: str) -> str:
    """`text` without credentials: the value of every secret-looking environment variable (an API key of any
    shape, e.g. a self-hosted server's token that a 401 answer echoes back), `sk-...` keys, `api_key=...` and the
    user name and password of any URL and its query parameters named as credentials."""
    for name, value in env_items().items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    text = _QUERY_SECRET.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", text))
    text = re.sub(r"(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-]+", r"\1…", text)
    return _KEY_ASSIGNMENT.sub(r"\1***", text)


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record's final message through `redact_secrets` (HTTP client libraries
    log request URLs, credentials included, at INFO level)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message in place; never drops a record."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True  # a malformed record: leave it to the handler's own error path
        redacted = redact_secrets(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


# Loggers of the HTTP clients that model calls go through; they log every request's URL.
HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "anthropic")


def install_log_redaction(handlers: list[logging.Handler] | None = None) -> None:
    """Redact secrets from what the HTTP client loggers emit (any handler, e.g. a server's) and, when given, from
    everything `handlers` write. Idempotent."""
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in HTTP_LOGGERS]
    targets += list(handlers or [])
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())
