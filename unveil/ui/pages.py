"""What every page router of the web app shares: the app's state, page rendering, the CSRF check, the review
filters and the small helpers of paging and flash messages.

Each router reaches the state of the app that serves the request (`ui_of`), never a module global, so several apps
(one per opened path) can live in one process.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import jinja2
from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from unveil.ui.security import CSRF_FIELD, CSRF_HEADER, Guard
from unveil.ui.sources import CtdSource, DetectionSource, ImageIndex, IprSource, Kind

HERE = Path(__file__).resolve().parent
REVIEWER_COOKIE = "unveil_reviewer"
LIST_PAGE_SIZE = 100  # rows of the detections table and of the review sidebar per page
FILTER_TEXT_MAX = 200  # characters kept of the free-text filters (search words, reviewer name)
FLASHES = {
    "approve": "Approved.",
    "reject": "Rejected.",
    "note": "Note saved.",
    "exported": "Export written.",
    "reviewer": "Reviewer name saved.",
    "already": "Already recorded: this decision was applied before (nothing changed).",
    "undone": "Undone (kept in the history).",
}


def load_templates() -> Jinja2Templates:
    """The page templates, with autoescape on for every one: captions, reasons and model answers are untrusted."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["pct"] = lambda v: f"{100 * float(v):.0f}%"
    env.filters["num"] = lambda v, d=3: "" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
    return Jinja2Templates(env=env)


@dataclass
class Ui:
    """The state of one app: the opened path, its source (one of `ctd`, `det`, `ipr`), the guard and the pages."""

    kind: Kind
    target: Path
    guard: Guard
    images: ImageIndex
    default_reviewer: str
    ctd: CtdSource | None = None
    det: DetectionSource | None = None
    ipr: IprSource | None = None
    templates: Jinja2Templates = field(default_factory=load_templates)
    # The TAG pictures drawn last (key `fmt:id`), oldest first.
    tag_pictures: OrderedDict[str, bytes] = field(default_factory=OrderedDict)

    def reviewer(self, request: Request) -> str:
        """The reviewer's name: the cookie set on the page, else the app's default."""
        return request.cookies.get(REVIEWER_COOKIE) or self.default_reviewer

    def page(self, request: Request, name: str, **ctx: Any) -> HTMLResponse:
        """Template `name` with `ctx` and what every page shows (kind, path, CSRF token, reviewer, flash)."""
        ctx.update(
            request=request,
            kind=self.kind,
            target=str(self.target),
            csrf=self.guard.csrf,
            csrf_field=CSRF_FIELD,
            reviewer=self.reviewer(request),
            flash=FLASHES.get(request.query_params.get("flash", ""), "") or bulk_flash(request),
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


def ctd_source(ui: UiDep) -> CtdSource:
    """The opened CTD dataset; 404 when the app shows another kind of file."""
    if ui.ctd is None:
        raise HTTPException(404)
    return ui.ctd


def detection_source(ui: UiDep) -> DetectionSource:
    """The opened detection results; 404 when the app shows another kind of file."""
    if ui.det is None:
        raise HTTPException(404)
    return ui.det


def ipr_source(ui: UiDep) -> IprSource:
    """The opened IPR results; 404 when the app shows another kind of file."""
    if ui.ipr is None:
        raise HTTPException(404)
    return ui.ipr


CtdDep = Annotated[CtdSource, Depends(ctd_source)]
DetectionDep = Annotated[DetectionSource, Depends(detection_source)]
IprDep = Annotated[IprSource, Depends(ipr_source)]


@dataclass(frozen=True)
class ReviewFilters:
    """The filters of the review queue, carried by its page's query string and by every form posted from it (so
    a decision returns to the same filtered list). An empty filter matches any sample."""

    status: str = "pending_review"
    category: str = ""
    blind: str = ""
    q: str = ""  # search words
    todo: str = ""  # a reviewer: keep the samples they have not judged

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
        return cls(**found)

    def as_dict(self) -> dict[str, str]:
        """The filters by name, in the order the page's links and forms carry them."""
        return dataclasses.asdict(self)

    def query(self, **more: str) -> str:
        """A `/review` query string of these filters and `more`."""
        return urllib.parse.urlencode({**self.as_dict(), **more})


def bulk_flash(request: Request) -> str:
    """The message after a bulk decision, built from its counts (no text of the URL is shown)."""
    if request.query_params.get("flash") != "bulk":
        return ""
    try:
        decision, done, asked = request.query_params.get("bulk", "").split(":")
        n_done, n_asked = int(done), int(asked)
    except ValueError:
        return ""
    verb = "Approved" if decision == "approve" else "Rejected"
    rest = n_asked - n_done
    return (
        f"{verb} {n_done} of {n_asked} selected"
        + (f"; {rest} already decided or unknown, left as they were" if rest else "")
        + "."
    )


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
