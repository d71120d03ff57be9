"""The HTTP boundary of the graph server (`langgraph dev`, and any server of `langgraph.json`, whose `http.app`
names `graphs/served_app.py:app`, built by `build_app`): the checks every request passes before the server's own
routes see it.

CORS only stops a foreign page from *reading* an answer; a form or `fetch` with `Content-Type: text/plain` needs
no preflight, so without more a page the operator merely visits could start runs (and spend the operator's model
calls) on a server bound to loopback. So a state-changing request (POST, PUT, PATCH, DELETE):

- from a browser page of another origin is refused (403): its `Origin` must be the server's own or one that
  `langgraph.json` lets read answers (`http.cors.allow_origins`: Studio's); `Sec-Fetch-Site: cross-site` without
  such an origin, and the opaque origin `null`, are refused too. Clients that are no web page (the SDK, curl) send
  no `Origin` and pass;
- with a body that is not JSON is refused (415): every route of the server takes JSON, and a web page can send
  only form and text bodies without a preflight;
- naming a `webhook` is refused (403) unless its URL is one the operator allows (`UNVEIL_ALLOWED_WEBHOOKS`): the
  server would otherwise post the run's output to any address a caller chose;
- answering the CTD review with a reviewer `token` has the token checked here and replaced by the reviewer's name
  (`graphs.ctd.review_tokens`), so no run record or checkpoint holds it; a bad token is refused (403).

What the in-memory server writes (`.langgraph_api/`: runs, threads, checkpoints with every resume value) is made
private: the folder mode 0700 (and the files in it 0600) when the server loads this app, and every file its stores
write after that 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from graphs.ctd.review_tokens import activate_boundary, check_resume_tokens, refuse_client_checked
from tools.addresses import BadURLError, split_url
from tools.env import env_list
from tools.errors import UnveilError

if TYPE_CHECKING:
    from starlette.applications import Starlette

ALLOWED_WEBHOOKS_ENV = "UNVEIL_ALLOWED_WEBHOOKS"
SETTINGS_HELP = {
    ALLOWED_WEBHOOKS_ENV: "webhook URLs (comma-separated) a run sent to the graph server may name, each allowing "
    "the same scheme, host and port and any path below its own; any other `webhook` is refused (none by default)",
}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_BODY_BYTES = 64 * 1024 * 1024  # a run's input holds ids and paths; anything this big is no request of ours
SERVER_DATA = Path(".langgraph_api")  # where the in-memory server keeps its state, relative to where it runs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Refusal(UnveilError):
    """A request the boundary refuses, with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def studio_origins() -> list[str]:
    """The origins `langgraph.json` lets read the server's answers (`http.cors.allow_origins`), as the server
    parsed them; none when the server's configuration cannot be read (only same-origin pages then pass)."""
    try:
        from langgraph_api import config  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return []
    cors = getattr(config, "CORS_CONFIG", None) or {}
    return [str(o) for o in (cors.get("allow_origins") or [])]


def check_origin(headers: dict[str, str], allowed: list[str]) -> None:
    """Refuse (403) a state-changing request a web page of a foreign origin sent."""
    origin = headers.get("origin")
    site = headers.get("sec-fetch-site")
    if origin is None:
        if site in (None, "same-origin", "none"):
            return  # no web page's request (the SDK, curl), or the server's own page
        raise Refusal(403, f"refused: a cross-site request (Sec-Fetch-Site: {site}) without an allowed Origin")
    own = urlsplit(origin).netloc == headers.get("host", "") and origin != "null"
    if own or "*" in allowed or origin.rstrip("/") in [a.rstrip("/") for a in allowed]:
        return
    raise Refusal(403, f"refused: Origin {origin!r} may not change anything on this server")


def check_content_type(headers: dict[str, str], body: bytes) -> None:
    """Refuse (415) a request body that is not JSON."""
    if not body:
        return
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise Refusal(415, f"refused: the body must be JSON (Content-Type: application/json), not {kind or 'none'!r}")


def check_webhooks(body: object, allowed: list[str]) -> None:
    """Refuse (403) a `webhook` the operator does not allow (`UNVEIL_ALLOWED_WEBHOOKS`), in a run's request or in
    each of a batch's."""
    for one in body if isinstance(body, list) else [body]:
        hook = one.get("webhook") if isinstance(one, dict) else None
        if hook in (None, ""):
            continue
        if not _url_allowed(str(hook), allowed):
            raise Refusal(
                403,
                f"refused: webhook {str(hook)[:200]!r} is not one this server allows (its operator lists them in "
                f"{ALLOWED_WEBHOOKS_ENV})",
            )


def _endpoint(url: str) -> tuple[str, str, int, list[str]]:
    """A URL's scheme, host, port (the scheme's default when none is written) and path segments."""
    parts, host, port = split_url(url, what="webhook")
    return (
        parts.scheme,
        host.lower(),
        port or (443 if parts.scheme == "https" else 80),
        [p for p in parts.path.split("/") if p],
    )


def _url_allowed(url: str, allowed: list[str]) -> bool:
    """Whether `url` has the scheme, host and port of an allowed URL and a path at or below its path."""
    try:
        scheme, host, port, path = _endpoint(url)
    except BadURLError:
        return False
    for entry in allowed:
        try:
            a_scheme, a_host, a_port, a_path = _endpoint(entry)
        except BadURLError:
            continue
        if (scheme, host, port) == (a_scheme, a_host, a_port) and path[: len(a_path)] == a_path:
            return True
    return False


def checked_body(headers: dict[str, str], body: bytes) -> bytes:
    """The body the server's routes get: the same bytes, or, where a review answer carried a reviewer token, the
    JSON with the reviewer in its place. A `Refusal` for a body the boundary refuses."""
    check_content_type(headers, body)
    if not body:
        return body
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refusal(400, f"refused: the body is not valid JSON ({exc})") from exc
    check_webhooks(data, env_list(ALLOWED_WEBHOOKS_ENV))
    try:
        refuse_client_checked(data)
        data, changed = check_resume_tokens(data)
    except (UnveilError, ValueError) as exc:
        raise Refusal(403, f"refused: {exc}") from exc
    return json.dumps(data).encode("utf-8") if changed else body


class Boundary:
    """ASGI middleware: the checks of the module docstring, before the server's own routes and CORS."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            check_origin(headers, studio_origins())
            body = await _read_body(receive)
            new = checked_body(headers, body)
        except Refusal as exc:
            await _refuse(send, exc)
            return
        if new is not body:
            scope = dict(scope)
            scope["headers"] = [
                (k, v) for k, v in scope.get("headers", []) if k.lower() not in (b"content-length",)
            ] + [(b"content-length", str(len(new)).encode())]
        await self.app(scope, _replay(new, receive), send)


async def _read_body(receive: Receive) -> bytes:
    """The whole request body (a `Refusal` past `MAX_BODY_BYTES`)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refusal(400, "refused: the client left before sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise Refusal(413, f"refused: the body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the (checked) body once, then whatever the client sends next (its disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _refuse(send: Send, refusal: Refusal) -> None:
    """Answer a refused request with its status and a JSON `detail`, as the server's own errors read."""
    payload = json.dumps({"detail": str(refusal)}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": refusal.status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def make_server_data_private(folder: Path = SERVER_DATA) -> None:
    """The server's state folder mode 0700 (made so when missing) and its files 0600: it holds every run's
    request and every checkpoint."""
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o600)


def private_server_files() -> None:
    """Have the in-memory server write its state files with mode 0600 (each store it flushes: runs and threads,
    checkpoints, the store), where its runtime is the in-memory one; nothing otherwise."""
    try:
        from langgraph_runtime_inmem import _persistence  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return
    for ref in list(getattr(_persistence, "_stores", {}).values()):
        store = ref()
        if store is not None:
            store.mode = 0o600  # PersistentDict.sync chmods the file it wrote to this mode


@contextlib.asynccontextmanager
async def _lifespan(_: object) -> AsyncIterator[None]:
    """Inside the server's own lifespan: once its stores exist, they write private files; as it stops (before
    it writes them last), the stores made since too."""
    private_server_files()
    yield
    private_server_files()


def build_app() -> Starlette:
    """The app `langgraph.json` names: no routes of its own, only the boundary around the server's. Building it
    says that this process is such a server (the CTD review then trusts the reviewer the boundary checked) and
    makes the server's state folder private."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    activate_boundary()
    make_server_data_private()
    return Starlette(middleware=[Middleware(Boundary)], lifespan=_lifespan)
