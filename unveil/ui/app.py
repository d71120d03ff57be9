"""The web app: one FastAPI application per opened path, pages rendered on the server with Jinja2.

Why FastAPI/Starlette with server-rendered templates (and not Gradio): the pages are plain HTML forms that work
without a client framework, every state change is one POST we can guard (CSRF token, Origin, Sec-Fetch-Site)
and test in a browser, Jinja2 escapes all sample and model text by default, and nothing is fetched from a CDN
(the app runs offline). Starlette's test client and uvicorn are the same stack in tests and in use.

`create_app` finds the path's page kind in the registry (`unveil.ui.kinds`), opens it, guards every request and
includes the router of every registered kind and the pages all kinds share (`unveil.ui.routes`); what the routers
share lives in `unveil.ui.pages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from tools.review_log import ReviewBusyError, ReviewWriteError
from unveil.ui.kinds import KINDS, detect_kind
from unveil.ui.pages import HERE, SESSION_COOKIE, Ui
from unveil.ui.routes import calls, compare, images
from unveil.ui.security import SECURITY_HEADERS, TOKEN_COOKIE, Guard
from unveil.ui.sources.common import OpenOptions
from unveil.ui.sources.ctd import default_reviewer

CallNext = Callable[[Request], Awaitable[Response]]


async def guard_requests(request: Request, call_next: CallNext) -> Response:
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


async def with_session(request: Request, call_next: CallNext) -> Response:
    """Run the request with its stored session, if its cookie names one, whose id the routes read from the scope;
    a route that stores something in a request without one makes it (`Ui.kept_session`), and a new or changed id
    (sign-in) goes back as an HttpOnly, SameSite=Strict cookie of ASCII characters. A request that stores
    nothing makes no session, so requests without a cookie cannot crowd the signed-in sessions out."""
    ui: Ui = request.app.state.ui
    sid = ui.session_id(request)
    request.scope[SESSION_COOKIE] = sid
    response: Response = await call_next(request)
    now = str(request.scope.get(SESSION_COOKIE) or "")
    if now and now != sid:
        response.set_cookie(SESSION_COOKIE, now, httponly=True, samesite="strict")
    return response


def create_app(
    path: str | Path,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    reviewer: str | None = None,
    image_store: str | Path | None = None,
    min_reviewers: int | None = None,
    review_rule: str | None = None,
    compare_with: str | Path | None = None,
) -> FastAPI:
    """The app for `path` (a CTD dataset folder, a detection results file or an IPR results file).

    `host` is the address the server binds: any non-loopback one makes the access token mandatory (the app's
    `state.guard.token`, generated when `token` is None). `image_store` is the run's store for results files whose
    records name images by id only (`unveil evaluate ipr`; default: `$UNVEIL_IMAGE_STORE` or the user's store,
    as the commands use). `min_reviewers` and `review_rule` ask for a review policy (None: the folder's stored
    one, `tools.review_policy`; a value the folder stores otherwise is refused, one it lacks is stored): with 2 or
    more reviewers, a sample waits until that many judged it, and the folder needs a reviewers file
    (`tools.reviewers`; its reviewers sign in with their tokens, a `ReviewerAuthError` otherwise).
    `compare_with` (a second detection results file) adds the page `/compare`, the two runs side by side."""
    target = Path(path)
    kind = detect_kind(target)
    options = OpenOptions(image_store=image_store, min_reviewers=min_reviewers, review_rule=review_rule)
    source = kind.open(target, options)
    ui = Ui(
        page_kind=kind,
        target=target,
        source=source,
        guard=Guard.for_bind(host, token),
        images=source.images,
        default_reviewer=reviewer or default_reviewer(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if kind.stop is not None:  # e.g. the views follow every decision before the server stops
            await asyncio.to_thread(kind.stop, source)

    app = FastAPI(title="Unveil", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.ui = ui
    app.state.guard = ui.guard
    app.state.kind = kind.name
    app.state.source = source
    app.state.compare = None
    if compare_with is not None:
        if kind.name != "detection" or not Path(compare_with).is_file():
            raise ValueError(f"--compare {str(compare_with)!r}: give a detection results file beside one")
        app.state.compare = Path(compare_with)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.middleware("http")(guard_requests)
    app.include_router(images.router)
    for each in KINDS:  # every kind's pages: a page of another kind than the opened path answers 404
        app.include_router(each.router)
    for routes in (compare, calls):
        app.include_router(routes.router)
    app.add_exception_handler(ReviewWriteError, not_saved)
    app.add_exception_handler(ReviewBusyError, not_saved)
    return app


async def not_saved(request: Request, exc: Exception) -> Response:
    """A change that could not be written: the folder busy (503, nothing saved, try again) or not writable (a
    full disk: 507 with what was saved), never a bare 500 (`Ui.not_saved`)."""
    ui: Ui = request.app.state.ui
    return ui.not_saved(request, exc)
