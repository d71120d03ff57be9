"""What every page router of the web app shares: the app's state, page rendering, the CSRF check, the review
filters, the sessions (who the reviewer is, and the message and Undo of their last decision, kept on the server)
and the small helpers of paging.

Each router reaches the state of the app that serves the request (`ui_of`), never a module global, so several apps
(one per opened path) can live in one process.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import jinja2
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from tools.review_log import ReviewBusyError
from tools.reviewers import REVIEWERS, Reviewer, ReviewerAuthError, authenticate, load_reviewers
from unveil.ui.page_kind import PageKind
from unveil.ui.security import CSRF_FIELD, CSRF_HEADER, Guard
from unveil.ui.sources.common import ImageIndex, PageSource

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "unveil_session"
MAX_SESSIONS = 10_000  # beyond this the oldest anonymous session is forgotten first, then the oldest signed-in one
LIST_PAGE_SIZE = 100  # rows of the detections table and of the review sidebar per page
FILTER_TEXT_MAX = 200  # characters kept of the free-text filters (search words, reviewer name)
FLASHES = {
    "approved": "Approved.",
    "rejected": "Rejected.",
    "note": "Comment saved: it decides nothing.",
    "reviewer": "Reviewer name saved.",
    "already": "Already recorded: this decision was applied before (nothing changed).",
    "already_judged": "Already judged by you: not counted again.",
    "undone": "Undone (kept in the history).",
    "override": "Undone as adjudicator: an override of another reviewer's entry (kept in the history).",
    "refused": "Not undone: you can undo only your own decisions (an adjudicator may override).",
    "sent_back": "Rejected and sent back to the Eraser: the next `unveil generate` on this folder (for a Studio "
    "sample, its run once resumed) gives it another attempt with your note.",
    "signed_in": "Signed in.",
    "skip": "Skipped: nothing recorded; the sample comes back after the others of this queue.",
    "signed_out": "Signed out.",
}


@dataclass
class Session:
    """One browser's session, kept on the server (its cookie holds only a random id): who reviews (in single-user
    mode a name the page sets, with a reviewers file the signed-in reviewer), and what the next page shows of the
    last action (its message, the Undo of the entry it appended, a conflict, the export's path). Nothing of it
    comes from the query string, so a link cannot forge a message or an Undo prompt."""

    reviewer: str = ""
    role: str = ""  # "" signed out; reviewer or adjudicator when signed in (reviewers file); unused otherwise
    token_sha256: str = ""  # the digest of the token signed in with: a new token for the reviewer ends the session
    flash: str = ""
    undo: tuple[str, int] | None = None
    conflict: str | None = None
    exported: str = ""
    skipped: list[str] = field(default_factory=list)  # samples skipped in this session: shown after the others
    shown: dict[str, str] = field(default_factory=dict)  # when each pending sample was first shown (time per sample)

    def take(self) -> dict[str, Any]:
        """What the next page shows of the last action, cleared (each is shown once)."""
        out = {"flash": self.flash, "undo": self.undo, "conflict": self.conflict, "exported": self.exported}
        self.flash, self.undo, self.conflict, self.exported = "", None, None, ""
        return out


def load_templates() -> Jinja2Templates:
    """The page templates, with autoescape on for every one: captions, reasons and model answers are untrusted."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["pct"] = lambda v: f"{100 * float(v):.0f}%"
    env.filters["num"] = shown_number
    return Jinja2Templates(env=env)


def shown_number(value: object, digits: int = 3) -> str:
    """A score as a page shows it: a float to `digits` places, a flag as yes/no (Python's True/False mean
    nothing to a reader), nothing for None, anything else as text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


@dataclass
class Ui:
    """The state of one app: the opened path, its kind and source, the guard and the pages."""

    page_kind: PageKind
    target: Path
    source: PageSource
    guard: Guard
    images: ImageIndex
    default_reviewer: str
    templates: Jinja2Templates = field(default_factory=load_templates)
    # The TAG pictures drawn last (key `fmt:id`), oldest first.
    tag_pictures: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)

    @property
    def kind(self) -> str:
        """The name of the opened path's page kind (`unveil.ui.kinds`)."""
        return self.page_kind.name

    @property
    def reviewers_file(self) -> Path | None:
        """The folder's reviewers file, for a kind whose folders may have one (None for results files)."""
        return self.target / REVIEWERS if self.page_kind.reviewers else None

    def people(self) -> dict[str, dict[str, Any]] | None:
        """The reviewers of the folder's reviewers file, read now (a reviewer added or removed counts at once);
        None in single-user mode (no file)."""
        path = self.reviewers_file
        return load_reviewers(path) if path is not None else None

    def session_id(self, request: Request) -> str:
        """The id of the request's stored session, or "" when its cookie names none (nothing is stored for a
        request until a route keeps something: `kept_session`)."""
        sid = str(request.cookies.get(SESSION_COOKIE, ""))  # fastapi's types are Any without the ui extra
        if sid in self.sessions:
            self.sessions.move_to_end(sid)
            return sid
        return ""

    def new_session(self, session: Session | None = None) -> str:
        """A new random session id holding `session` (a fresh one by default). Beyond `MAX_SESSIONS` the oldest
        anonymous session goes first, so a flood of requests without a cookie cannot sign anyone out."""
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = session or Session()
        while len(self.sessions) > MAX_SESSIONS:
            anonymous = next((k for k, v in self.sessions.items() if not v.role), None)
            if anonymous is None:
                self.sessions.popitem(last=False)
            else:
                del self.sessions[anonymous]
        return sid

    def session(self, request: Request) -> Session:
        """The session of `request` to read: its stored one, else an empty one that is not kept (a request that
        stores something asks for `kept_session`)."""
        return self.sessions.get(str(request.scope.get(SESSION_COOKIE, "")), None) or Session()

    def kept_session(self, request: Request) -> Session:
        """The session of `request` to store something in: its stored one, else a new one (the middleware then
        sends its id as a cookie)."""
        sid = str(request.scope.get(SESSION_COOKIE, ""))
        if sid not in self.sessions:
            sid = self.new_session()
            request.scope[SESSION_COOKIE] = sid
        return self.sessions[sid]

    def reviewer(self, request: Request) -> str:
        """The reviewer's name: with a reviewers file the signed-in reviewer's ("" when signed out), else the name
        set on the page, else the app's default."""
        session = self.session(request)
        people = self.people()
        if people is not None:
            return session.reviewer if self.signed_in_entry(session, people) is not None else ""
        return session.reviewer or self.default_reviewer

    def actor(self, request: Request) -> tuple[str, str]:
        """Who takes a decision (name, role): the signed-in reviewer, still in the reviewers file, or in
        single-user mode the local user (role `local`); 401 when the folder has a reviewers file and nobody is
        signed in."""
        people = self.people()
        if people is None:
            return self.reviewer(request), "local"
        session = self.session(request)
        entry = self.signed_in_entry(session, people)
        if entry is None:
            raise HTTPException(401, "Sign in with your reviewer token first (/signin).")
        return session.reviewer, str(entry.get("role", "reviewer"))

    def require_reader(self, request: Request) -> None:
        """With a reviewers file, only a signed-in reviewer reads the folder's pages, images and calls (401
        otherwise); in single-user mode anyone who reaches the app does."""
        people = self.people()
        if people is not None and self.signed_in_entry(self.session(request), people) is None:
            raise HTTPException(401, "Sign in with your reviewer token first (/signin).")

    @staticmethod
    def signed_in_entry(session: Session, people: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """The reviewers-file entry of the session's reviewer while it still holds the token they signed in with;
        None (and the session signed out) when nobody is signed in, the reviewer was removed, or their token was
        replaced (`unveil reviewers add DIR NAME --new-token` ends the sessions of the old one)."""
        entry = people.get(session.reviewer) if session.role else None
        digest = str((entry or {}).get("token_sha256", ""))
        if entry is None or not hmac.compare_digest(digest.encode(), session.token_sha256.encode()):
            if session.role:
                session.reviewer, session.role, session.token_sha256 = "", "", ""
            return None
        return entry

    def sign_in(self, request: Request, token: str) -> tuple[str, Reviewer]:
        """A new session for the reviewer `token` belongs to (a new id, so an id known before sign-in is worth
        nothing after it); `ReviewerAuthError` for a token of nobody."""
        people = self.people()
        if people is None:
            raise ReviewerAuthError("this folder has no reviewers file: no sign-in needed")
        who = authenticate(people, token)
        self.sessions.pop(str(request.scope.get(SESSION_COOKIE, "")), None)
        digest = str(people[who.name]["token_sha256"])
        signed_in = Session(reviewer=who.name, role=who.role, token_sha256=digest, flash=FLASHES["signed_in"])
        return self.new_session(signed_in), who

    def not_saved(self, request: Request, exc: Exception, *, back: str = "/review") -> HTMLResponse:
        """The answer to a change that could not be written: 503 (with `Retry-After`) when the folder was busy and
        nothing was saved, 507 when the folder could not be written, with the error's own account of what was
        saved and the way back to the sample (the session's pending message and Undo are kept for that page)."""
        busy = isinstance(exc, ReviewBusyError)
        response = self.page(
            request,
            "not_saved.html",
            title="Busy: not saved, try again" if busy else "Could not be written",
            message=str(exc),
            back=back,
            flash="",
        )
        response.status_code = 503 if busy else 507
        if busy:
            response.headers["Retry-After"] = "5"
        return response

    def page(self, request: Request, name: str, **ctx: object) -> HTMLResponse:
        """Template `name` with `ctx` and what every page shows (kind, path, CSRF token, reviewer, sign-in state,
        the session's message)."""
        session = self.session(request)
        people = self.people()
        ctx.setdefault("flash", session.take()["flash"])
        ctx.update(
            request=request,
            kind=self.kind,
            reviews=self.page_kind.reviewers,
            target=str(self.target),
            csrf=self.guard.csrf,
            csrf_field=CSRF_FIELD,
            reviewer=self.reviewer(request),
            multi_user=people is not None,
            role=(session.role if people is not None else "local"),
        )
        return self.templates.TemplateResponse(request, name, ctx)

    async def check_csrf(self, request: Request) -> None:
        """Refuse (403) a state-changing request without the page's CSRF token (form field or header)."""
        form = await request.form()
        if not self.guard.csrf_ok(str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")):
            raise HTTPException(403, "Refused: missing or wrong CSRF token (reload the page).")


def ui_of(request: Request) -> Ui:
    """The state of the app serving `request` (a dependency of every route)."""
    ui: Ui = request.app.state.ui
    return ui


UiDep = Annotated[Ui, Depends(ui_of)]


S = TypeVar("S")


def source_of(cls: type[S]) -> Callable[[Ui], S]:
    """A route dependency giving the opened source when it is a `cls` (a page kind's routes declare theirs with
    it, e.g. `Annotated[CtdSource, Depends(source_of(CtdSource))]`); 404 when the app shows another kind."""

    def opened_source(ui: UiDep) -> S:
        if not isinstance(ui.source, cls):
            raise HTTPException(404)
        return ui.source

    return opened_source


@dataclass(frozen=True)
class ReviewFilters:
    """The filters of the review queue, carried by its page's query string and by every form posted from it (so
    a decision returns to the same filtered list). An empty filter matches any sample."""

    status: str = "pending_review"
    category: str = ""
    blind: str = ""
    q: str = ""  # search words
    todo: str = ""  # a reviewer: keep the samples they have not judged (of those assigned to them, if any)
    disagree: str = ""  # "1": keep the samples where reviewers disagree, not yet settled by an adjudicator
    others: str = ""  # "1": a reviewer's queue also shows the samples assigned to others (after their own)

    @classmethod
    async def of(cls, request: Request) -> ReviewFilters:
        """The filters of a GET's query string or of a POST's form (a dependency); missing ones keep their
        default, and the free-text ones are cut to `FILTER_TEXT_MAX` characters."""
        values = request.query_params if request.method in ("GET", "HEAD") else await request.form()
        found: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            value = values.get(f.name, f.default)
            if not isinstance(value, str):
                raise HTTPException(422, f"review filter {f.name!r} must be text")
            found[f.name] = value[:FILTER_TEXT_MAX] if f.name in ("q", "todo") else value
        if "todo" not in values and found["status"] == "pending_review":
            found["todo"] = ui_of(request).reviewer(request)  # the default queue: what this reviewer has not judged
        return cls(**found)

    def as_dict(self) -> dict[str, str]:
        """The filters by name, in the order the page's links and forms carry them."""
        return dataclasses.asdict(self)

    def query(self, **more: str) -> str:
        """A `/review` query string of these filters and `more`."""
        return urllib.parse.urlencode({**self.as_dict(), **more})


def page_no(request: Request, pages: int, key: str = "page") -> int:
    """The 1-based page number asked for, clamped to the pages there are."""
    try:
        return min(max(1, int(request.query_params.get(key, "1"))), pages)
    except ValueError:
        return 1


def n_pages(n_rows: int, size: int) -> int:
    """How many pages of `size` rows `n_rows` fill (at least one, for the empty list)."""
    return max(1, -(-n_rows // size))


FiltersDep = Annotated[ReviewFilters, Depends(ReviewFilters.of)]
