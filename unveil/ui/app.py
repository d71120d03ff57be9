"""The web app: one FastAPI application per opened path, pages rendered on the server with Jinja2.

Why FastAPI/Starlette with server-rendered templates (and not Gradio): the pages are plain HTML forms that work
without a client framework, every state change is one POST we can guard (CSRF token, Origin, Sec-Fetch-Site)
and test in a browser, Jinja2 escapes all sample and model text by default, and nothing is fetched from a CDN
(the app runs offline). Starlette's test client and uvicorn are the same stack in tests and in use.

`create_app` opens the path, guards every request and includes one router per page kind (`unveil.ui.routes`);
what the routers share lives in `unveil.ui.pages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from tools.image_store import default_store_root
from tools.review_log import ReviewBusyError, ReviewWriteError
from tools.reviewers import load_reviewers, require_reviewers_file, reviewers_path
from unveil.ui.pages import HERE, SESSION_COOKIE, Ui
from unveil.ui.routes import calls, compare, detections, images, ipr, review
from unveil.ui.security import SECURITY_HEADERS, TOKEN_COOKIE, Guard
from unveil.ui.sources import (
    CtdSource,
    DetectionSource,
    IprSource,
    Kind,
    NotARegularFileError,
    default_reviewer,
    detect_kind,
)


def open_source(
    target: Path, kind: Kind, *, image_store: str | Path | None, min_reviewers: int, review_rule: str
) -> dict[str, Any]:
    """The source of the opened path by kind (`ctd`, `det` or `ipr`), indexed once now so that the run's store
    folders are known before any image is requested. A path that is not a regular file is a ValueError."""
    if kind == "ctd":
        sources: dict[str, Any] = {"ctd": CtdSource(target, min_reviewers=min_reviewers, rule=review_rule)}
    else:
        source = DetectionSource(target) if kind == "detection" else IprSource(target)
        source.images.add_root(Path(image_store) if image_store else default_store_root())
        sources = {"det" if kind == "detection" else "ipr": source}
    (opened,) = sources.values()
    try:
        opened.rows()
        if isinstance(opened, IprSource):
            opened.learn_roots()
    except NotARegularFileError as exc:
        raise ValueError(str(exc)) from exc
    return sources


async def guard_requests(request: Request, call_next: Any) -> Response:
    """Answer only allowed hosts and token holders, refuse cross-site changes, trade a URL token for a cookie,
    and add the security headers to every response."""
    guard: Guard = request.app.state.guard
    if not guard.host_allowed(request):
        response: Response = HTMLResponse("Refused: unexpected Host header.", status_code=400)
    elif not guard.token_ok(request):
        response = HTMLResponse(
            "Refused: this server needs its access token. Open the URL with ?token=... "
            "printed when `unveil ui` started.",
            status_code=401,
        )
    elif request.method not in ("GET", "HEAD") and not guard.same_origin(request):
        response = HTMLResponse("Refused: cross-site request.", status_code=403)
    elif "token" in request.query_params and guard.token:
        # Trade the URL token for a cookie and drop it from the address bar and history.
        query = urllib.parse.urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), status_code=303)
        response.set_cookie(TOKEN_COOKIE, guard.token, httponly=True, samesite="strict")
    else:
        response = await with_session(request, call_next)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def with_session(request: Request, call_next: Any) -> Response:
    """Run the request with its session (a new one when its cookie names none), whose id the routes read from the
    scope; a new or changed id (sign-in) goes back as an HttpOnly, SameSite=Strict cookie of ASCII characters."""
    ui: Ui = request.app.state.ui
    sid, new = ui.session_id(request)
    request.scope[SESSION_COOKIE] = sid
    response: Response = await call_next(request)
    now = str(request.scope.get(SESSION_COOKIE))
    if new or now != sid:
        response.set_cookie(SESSION_COOKIE, now, httponly=True, samesite="strict")
    return response


def create_app(
    path: str | Path,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    reviewer: str | None = None,
    image_store: str | Path | None = None,
    min_reviewers: int = 1,
    review_rule: str = "unanimous",
    compare_with: str | Path | None = None,
) -> FastAPI:
    """The app for `path` (a CTD dataset folder, a detection results file or an IPR results file).

    `host` is the address the server binds: any non-loopback one makes the access token mandatory (the app's
    `state.guard.token`, generated when `token` is None). `image_store` is the run's store for results files whose
    records name images by id only (`unveil evaluate ipr`; default: `$UNVEIL_IMAGE_STORE` or the user's store,
    as the commands use). `min_reviewers` and `review_rule` are the review policy, as `unveil review` takes
    them: with 2 or more, a sample waits until that many reviewers judged it, and the folder needs a reviewers
    file (`tools.reviewers`; its reviewers sign in with their tokens, a `ReviewerAuthError` otherwise).
    `compare_with` (a second detection results file) adds the page `/compare`, the two runs side by side."""
    target = Path(path)
    kind: Kind = detect_kind(target)
    if kind == "ctd":  # a rule of two reviewers needs the reviewers file that tells them apart
        require_reviewers_file(min_reviewers, load_reviewers(reviewers_path(target)), str(target))
    sources = open_source(target, kind, image_store=image_store, min_reviewers=min_reviewers, review_rule=review_rule)
    (source,) = sources.values()
    ui = Ui(
        kind=kind,
        target=target,
        guard=Guard.for_bind(host, token),
        images=source.images,
        default_reviewer=reviewer or default_reviewer(),
        **sources,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if ui.ctd is not None:  # the views follow every decision before the server stops
            await asyncio.to_thread(ui.ctd.views.flush)

    app = FastAPI(title="Unveil", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.ui = ui
    app.state.guard = ui.guard
    app.state.kind = kind
    app.state.source = source
    app.state.compare = None
    if compare_with is not None:
        if kind != "detection" or not Path(compare_with).is_file():
            raise ValueError(f"--compare {str(compare_with)!r}: give a detection results file beside one")
        app.state.compare = Path(compare_with)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.middleware("http")(guard_requests)
    for routes in (images, review, detections, ipr, compare, calls):
        app.include_router(routes.router)
    app.add_exception_handler(ReviewWriteError, not_saved)
    app.add_exception_handler(ReviewBusyError, not_saved)
    return app


async def not_saved(request: Request, exc: Exception) -> Response:
    """A change that could not be written: the folder busy (503, nothing saved, try again) or not writable (a
    full disk: 507 with what was saved), never a bare 500 (`Ui.not_saved`)."""
    ui: Ui = request.app.state.ui
    return ui.not_saved(request, exc)
