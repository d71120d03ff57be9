"""The web app: one FastAPI application per opened path, pages rendered on the server with Jinja2.

Why FastAPI/Starlette with server-rendered templates (and not Gradio): the pages are plain HTML forms that work
without a client framework, every state change is one POST we can guard (CSRF token, Origin, Sec-Fetch-Site)
and test in a browser, Jinja2 escapes all sample and model text by default, and nothing is fetched from a CDN
(the app runs offline). Starlette's test client and uvicorn are the same stack in tests and in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import urllib.parse
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from tools.image_store import default_store_root
from unveil.ui.agreement import agreement
from unveil.ui.security import CSRF_FIELD, CSRF_HEADER, SECURITY_HEADERS, TOKEN_COOKIE, Guard
from unveil.ui.sources import (
    MTC_BIN_LABELS,
    MTC_BINS,
    STATUS_LABELS,
    CtdSource,
    DatasetBusyError,
    DetectionSource,
    IprSource,
    Kind,
    NotARegularFileError,
    default_reviewer,
    detect_kind,
)

HERE = Path(__file__).resolve().parent
REVIEWER_COOKIE = "unveil_reviewer"
IPR_PAGE_SIZE = 20
BULK_MAX = 1000  # samples one bulk decision may name
LIST_PAGE_SIZE = 100  # rows of the detections table and of the review sidebar per page
TAG_PICTURES_KEPT = 32
FLASHES = {
    "approve": "Approved.",
    "reject": "Rejected.",
    "note": "Note saved.",
    "exported": "Export written.",
    "reviewer": "Reviewer name saved.",
    "already": "Already recorded: this decision was applied before (nothing changed).",
    "undone": "Undone (kept in the history).",
}


def _bulk_flash(request: Request) -> str:
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


def _page_no(request: Request, pages: int, key: str = "page") -> int:
    """The 1-based page number asked for, clamped to the pages there are."""
    try:
        return min(max(1, int(request.query_params.get(key, "1"))), pages)
    except ValueError:
        return 1


def _templates() -> Jinja2Templates:
    # Autoescape on for every template: captions, reasons and model answers are untrusted text.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["pct"] = lambda v: f"{100 * float(v):.0f}%"
    env.filters["num"] = lambda v, d=3: "" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
    return Jinja2Templates(env=env)


def create_app(
    path: str | Path,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    reviewer: str | None = None,
    image_store: str | Path | None = None,
    min_reviewers: int = 1,
    review_rule: str = "unanimous",
) -> FastAPI:
    """The app for `path` (a CTD dataset folder, a detection results file or an IPR results file).

    `host` is the address the server binds: any non-loopback one makes the access token mandatory (the app's
    `state.guard.token`, generated when `token` is None). `image_store` is the run's store for results files whose
    records name images by id only (`unveil evaluate ipr`; default: `$UNVEIL_IMAGE_STORE` or the user's store,
    as the commands use). `min_reviewers` and `review_rule` are the review policy, as `unveil review` takes
    them: with 2 or more, a sample waits until that many reviewers judged it."""
    target = Path(path)
    kind: Kind = detect_kind(target)
    guard = Guard.for_bind(host, token)
    templates = _templates()
    ctd = CtdSource(target, min_reviewers=min_reviewers, rule=review_rule) if kind == "ctd" else None
    det = DetectionSource(target) if kind == "detection" else None
    ipr = IprSource(target) if kind == "ipr" else None
    for source in (det, ipr):
        if source is not None:
            source.images.add_root(Path(image_store) if image_store else default_store_root())
    try:
        # Index the file once now (and learn the run's store folders before any image is requested).
        (ctd or det or ipr).rows()  # type: ignore[union-attr]
        if ipr is not None:
            ipr.learn_roots()
    except NotARegularFileError as exc:
        raise ValueError(str(exc)) from exc

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if ctd is not None:  # the views follow every decision before the server stops
            await asyncio.to_thread(ctd.views.flush)

    app = FastAPI(title="Unveil", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.guard = guard
    app.state.kind = kind
    app.state.source = ctd or det or ipr
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    images = (ctd or det or ipr).images  # type: ignore[union-attr]
    tag_pictures: OrderedDict[str, bytes] = OrderedDict()
    default_name = reviewer or default_reviewer()

    @app.middleware("http")
    async def guard_requests(request: Request, call_next: Any) -> Response:
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
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def check_csrf(request: Request) -> None:
        form = await request.form()
        if not guard.csrf_ok(str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")):
            raise HTTPException(403, "Refused: missing or wrong CSRF token (reload the page).")

    def page(request: Request, name: str, **ctx: Any) -> HTMLResponse:
        ctx.update(
            request=request,
            kind=kind,
            target=str(target),
            csrf=guard.csrf,
            csrf_field=CSRF_FIELD,
            reviewer=request.cookies.get(REVIEWER_COOKIE) or default_name,
            flash=FLASHES.get(request.query_params.get("flash", ""), "") or _bulk_flash(request),
        )
        return templates.TemplateResponse(request, name, ctx)

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse({"ctd": "/review", "detection": "/detections", "ipr": "/ipr"}[kind], status_code=303)

    @app.get("/images/{image_id}")
    async def image(image_id: str) -> StreamingResponse:
        """A stored image by its id, streamed; anything not a regular file in an allowed store, under the image
        size cap and hashing to its id, is 404."""
        opened = await asyncio.to_thread(images.open_file, image_id)
        if opened is None:
            raise HTTPException(404, "no such image in the store")
        fh, size = opened

        def chunks() -> Iterator[bytes]:
            with fh:
                left = size  # never more than was checked, even if the file grows meanwhile
                while left > 0:
                    data = fh.read(min(left, 1 << 16))
                    if not data:
                        return
                    left -= len(data)
                    yield data

        return StreamingResponse(chunks(), media_type="image/png", headers={"Content-Length": str(size)})

    # ---- CTD review --------------------------------------------------------------------------------------------

    def filters_of(request: Request) -> dict[str, str]:
        q = request.query_params
        return {
            "status": q.get("status", "pending_review"),
            "category": q.get("category", ""),
            "blind": q.get("blind", ""),
            "q": q.get("q", "")[:200],
            "todo": q.get("todo", "")[:200],
        }

    @app.get("/review", response_class=HTMLResponse)
    async def review(request: Request) -> HTMLResponse:
        """The review queue: filters, progress, one page of the sample list and one card."""
        if ctd is None:
            raise HTTPException(404)
        f = filters_of(request)
        rows = await asyncio.to_thread(ctd.rows)
        shown = [r for r in rows if ctd.matches(r, **f)]
        wanted = request.query_params.get("id")
        current_id = wanted if wanted else (shown[0]["id"] if shown else None)
        ids = [r["id"] for r in shown]
        pos = ids.index(current_id) if current_id is not None and current_id in ids else -1
        card = await asyncio.to_thread(ctd.record, current_id) if current_id else None
        problem = ctd.problem(current_id) if current_id else None
        if current_id and card is None and problem is None and wanted:
            raise HTTPException(404, f"no sample {current_id!r} in this dataset")
        conflict = None
        if card is not None and request.query_params.get("flash") == "conflict":
            conflict = card["review"]
        prev_id = ids[pos - 1] if pos > 0 else None
        next_id = ids[pos + 1] if 0 <= pos < len(ids) - 1 else (ids[0] if pos < 0 and ids else None)
        pages = max(1, -(-len(shown) // LIST_PAGE_SIZE))
        list_page = (
            _page_no(request, pages, "list")
            if "list" in request.query_params
            else (pos // LIST_PAGE_SIZE + 1 if pos >= 0 else 1)
        )
        start = (list_page - 1) * LIST_PAGE_SIZE
        return page(
            request,
            "review.html",
            cards=shown[start : start + LIST_PAGE_SIZE],
            n_shown=len(shown),
            list_start=start,
            list_page=list_page,
            list_pages=pages,
            card=card,
            card_id=current_id,
            problem=problem,
            pos=pos,
            filters=f,
            prev_id=prev_id,
            next_id=next_id,
            progress=ctd.progress(rows),
            categories=sorted({r.get("category") or "" for r in rows} - {""}),
            n_blind=max([int(r.get("n_blind") or 0) for r in rows] + [0]),
            statuses=STATUS_LABELS,
            filter_query=urllib.parse.urlencode(f),
            conflict=conflict,
            problems=ctd.index.all_problems(),
            views_error=ctd.views.last_error,
            reviewers=sorted(
                {w for r in rows for w in r.get("judgements") or {}}
                | {request.cookies.get(REVIEWER_COOKIE) or default_name}
            ),
            policy={"min_reviewers": ctd.min_reviewers, "rule": ctd.rule},
            undo_id=request.query_params.get("undo_id", ""),
            undo_k=request.query_params.get("undo_k", ""),
            exported=request.query_params.get("exported", ""),
        )

    @app.post("/review/decide")
    async def decide(
        request: Request,
        id: str = Form(...),
        decision: str = Form(...),
        note: str = Form(""),
        status: str = Form("pending_review"),
        category: str = Form(""),
        blind: str = Form(""),
        q: str = Form(""),
        todo: str = Form(""),
    ) -> Response:
        """Apply approve / reject / note to one sample, then show the next one of the filtered list. The same
        decision sent twice (a double click) is applied once and answers as the first did."""
        if ctd is None:
            raise HTTPException(404)
        await check_csrf(request)
        if decision not in ("approve", "reject", "note"):
            raise HTTPException(400, "decision must be approve, reject or note")
        f = {"status": status, "category": category, "blind": blind, "q": q, "todo": todo}
        before = [r["id"] for r in await asyncio.to_thread(ctd.rows) if ctd.matches(r, **f)]
        name = request.cookies.get(REVIEWER_COOKIE) or default_name
        try:
            counts = await asyncio.to_thread(ctd.decide, id, decision, note, name)
        except DatasetBusyError as exc:  # another reviewer or writer held the lock too long: nothing was written
            raise HTTPException(503, f"{exc} (your decision was not saved; press it again)") from exc
        if counts.get("conflicts"):
            return RedirectResponse(f"/review?{urllib.parse.urlencode({**f, 'id': id, 'flash': 'conflict'})}", 303)
        flash = decision
        if counts.get("skipped"):
            if id not in ctd.index.where:
                raise HTTPException(404, f"no sample {id!r} in this dataset")
            problem = ctd.problem(id)
            if problem is not None:
                raise HTTPException(
                    409, f"sample {id!r} cannot take a decision: its record is unreadable ({problem.reason})"
                )
            flash = "already"
        nxt = id if decision == "note" else None
        if nxt is None and id in before:
            later = before[before.index(id) + 1 :]
            nxt = later[0] if later else None
        query = {**f, "flash": flash, **({"id": nxt} if nxt else {})}
        if flash == decision:  # offer to take it back from the next page (the entry just appended)
            rec = await asyncio.to_thread(ctd.index.get, id)
            query.update(undo_id=id, undo_k=str(len((rec or {}).get("review_history") or []) - 1))
        return RedirectResponse(f"/review?{urllib.parse.urlencode(query)}", status_code=303)

    @app.post("/review/bulk")
    async def bulk(
        request: Request,
        decision: str = Form(...),
        note: str = Form(""),
        status: str = Form("pending_review"),
        category: str = Form(""),
        blind: str = Form(""),
        q: str = Form(""),
        todo: str = Form(""),
    ) -> Response:
        """Approve or reject the selected samples together (one lock, one append; the page asks to confirm)."""
        if ctd is None:
            raise HTTPException(404)
        await check_csrf(request)
        if decision not in ("approve", "reject"):
            raise HTTPException(400, "decision must be approve or reject")
        ids = [str(v) for v in (await request.form()).getlist("ids")]
        chosen = list(dict.fromkeys(ids))[:BULK_MAX]
        if not chosen:
            raise HTTPException(400, "no sample selected")
        name = request.cookies.get(REVIEWER_COOKIE) or default_name
        try:
            counts = await asyncio.to_thread(ctd.decide_many, chosen, decision, note, name)
        except DatasetBusyError as exc:
            raise HTTPException(503, f"{exc} (nothing was saved; press it again)") from exc
        done = counts["approved"] + counts["rejected"] + counts["pending"]
        query = {
            "status": status,
            "category": category,
            "blind": blind,
            "q": q,
            "todo": todo,
            "flash": "bulk",
            "bulk": f"{decision}:{done}:{len(chosen)}",
        }
        return RedirectResponse(f"/review?{urllib.parse.urlencode(query)}", status_code=303)

    @app.post("/review/undo")
    async def undo(
        request: Request,
        id: str = Form(...),
        undoes: int = Form(...),
        status: str = Form("pending_review"),
        category: str = Form(""),
        blind: str = Form(""),
        q: str = Form(""),
        todo: str = Form(""),
    ) -> Response:
        """Take back one entry of a sample's review history (a decision or a note); the sample stays shown."""
        if ctd is None:
            raise HTTPException(404)
        await check_csrf(request)
        name = request.cookies.get(REVIEWER_COOKIE) or default_name
        try:
            counts = await asyncio.to_thread(ctd.undo, id, undoes, name)
        except DatasetBusyError as exc:
            raise HTTPException(503, f"{exc} (nothing was undone; press it again)") from exc
        if id not in ctd.index.where:
            raise HTTPException(404, f"no sample {id!r} in this dataset")
        flash = "undone" if counts.get("undone") else "already"
        query = {"status": status, "category": category, "blind": blind, "q": q, "todo": todo, "id": id, "flash": flash}
        return RedirectResponse(f"/review?{urllib.parse.urlencode(query)}", status_code=303)

    @app.post("/review/export")
    async def export(request: Request) -> Response:
        """Write the Parquet export (DIR/export/data.parquet)."""
        if ctd is None:
            raise HTTPException(404)
        await check_csrf(request)
        try:
            out = await asyncio.to_thread(ctd.export)
        except Exception as exc:  # noqa: BLE001 - shown to the reviewer (e.g. an image file missing from the folder)
            raise HTTPException(500, f"export failed: {type(exc).__name__}: {exc}") from exc
        return RedirectResponse(f"/review?{urllib.parse.urlencode({'flash': 'exported', 'exported': str(out)})}", 303)

    @app.get("/reviewers", response_class=HTMLResponse)
    async def reviewers_page(request: Request) -> HTMLResponse:
        """Who reviewed what, and how much reviewers agree per category (Fleiss' and Cohen's kappa)."""
        if ctd is None:
            raise HTTPException(404)
        rows = await asyncio.to_thread(ctd.rows)
        return page(
            request,
            "reviewers.html",
            stats=agreement(rows),
            policy={"min_reviewers": ctd.min_reviewers, "rule": ctd.rule},
            pending=sum(1 for r in rows if r.get("status") == "pending_review"),
        )

    @app.post("/reviewer")
    async def set_reviewer(request: Request, name: str = Form(...), back: str = Form("/")) -> Response:
        """Remember the reviewer's name (kept with each decision) in a cookie."""
        await check_csrf(request)
        local = back.startswith("/") and not back.startswith("//") and "\\" not in back  # no open redirect
        response = RedirectResponse(back if local else "/", 303)
        response.set_cookie(REVIEWER_COOKIE, name.strip()[:200] or default_name, httponly=True, samesite="strict")
        return response

    # ---- detection results -------------------------------------------------------------------------------------

    @app.get("/detections", response_class=HTMLResponse)
    async def detections(request: Request) -> HTMLResponse:
        """The table of detection results, filtered by verdict and MTC bin, one page at a time."""
        if det is None:
            raise HTTPException(404)
        verdict, mbin = request.query_params.get("verdict", ""), request.query_params.get("bin", "")
        rows = await asyncio.to_thread(det.rows)
        shown = [r for r in rows if (not verdict or r.get("verdict") == verdict) and (not mbin or r.get("bin") == mbin)]
        pages = max(1, -(-len(shown) // LIST_PAGE_SIZE))
        n = _page_no(request, pages)
        part = [{**r, "image_id": det.image_of(r)} for r in shown[(n - 1) * LIST_PAGE_SIZE : n * LIST_PAGE_SIZE]]
        return page(
            request,
            "detections.html",
            rows=part,
            n_shown=len(shown),
            total=len(rows),
            verdict=verdict,
            bin=mbin,
            bins=[(b, MTC_BIN_LABELS[b]) for b in MTC_BINS],
            page_no=n,
            pages=pages,
            problems=det.index.all_problems(),
        )

    @app.get("/detections/view", response_class=HTMLResponse)
    async def detection(request: Request, id: str) -> HTMLResponse:
        """One detection: the TAG picture, both trees with the toxic path, the explanation, usage per role."""
        if det is None:
            raise HTTPException(404)
        rec = await asyncio.to_thread(det.record, id)
        if rec is None:
            problem = det.index.problem(id)
            if problem is None:
                raise HTTPException(404, f"no result {id!r} in this file")
            return page(request, "bad.html", problem=problem, back="/detections")
        return page(request, "detection.html", rec=rec)

    @app.get("/detections/tag.{fmt}")
    async def tag_picture(fmt: str, id: str) -> Response:
        """The TAG picture of one result, as PNG or as SVG (zoomable without blur), drawn by `unveil.render` and
        kept in memory for the last few results."""
        if det is None or fmt not in ("png", "svg"):
            raise HTTPException(404)
        key = f"{fmt}:{id}"
        if key not in tag_pictures:
            rec = await asyncio.to_thread(det.record, id)
            if rec is None or rec.get("status") == "failed" or rec.get("tree_error"):
                raise HTTPException(404)
            try:
                tag_pictures[key] = await asyncio.to_thread(_render, rec, fmt)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise HTTPException(422, f"cannot draw result {id!r}: {exc}") from exc
            while len(tag_pictures) > TAG_PICTURES_KEPT:
                tag_pictures.popitem(last=False)
        tag_pictures.move_to_end(key)
        return Response(tag_pictures[key], media_type="image/png" if fmt == "png" else "image/svg+xml")

    # ---- IPR results -------------------------------------------------------------------------------------------

    @app.get("/ipr", response_class=HTMLResponse)
    async def ipr_page(request: Request) -> HTMLResponse:
        """Per prompt, every step's images side by side with its prompt, the refiner's answer and the scores."""
        if ipr is None:
            raise HTTPException(404)
        rows = await asyncio.to_thread(ipr.rows)
        action = request.query_params.get("stop", "")
        shown = [r for r in rows if not action or action in r.get("stops", ())]
        pages = max(1, -(-len(shown) // IPR_PAGE_SIZE))
        n = _page_no(request, pages)
        part = shown[(n - 1) * IPR_PAGE_SIZE : n * IPR_PAGE_SIZE]
        records = await asyncio.to_thread(lambda: [ipr.prompt(r["id"]) for r in part])
        problems = ipr.index.all_problems()
        return page(
            request,
            "ipr.html",
            records=[r for r in records if r is not None],
            total=len(rows),
            page_no=n,
            pages=pages,
            stop=action,
            problems=problems,
            stops=sorted({s for r in rows for s in r.get("stops", ())}),
        )

    return app


def _render(rec: dict[str, Any], fmt: str) -> bytes:
    """Draw a detection record with the project's TAG renderer and return the file's bytes (png or svg)."""
    from unveil.render import render_tag

    with tempfile.TemporaryDirectory() as tmp:
        return Path(render_tag(rec, Path(tmp) / f"tag.{fmt}")).read_bytes()
