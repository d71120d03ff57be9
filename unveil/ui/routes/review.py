"""The review queue of a CTD dataset folder and the decisions taken in it: approve, reject, note, bulk decisions,
undo, the Parquet export, the reviewers' agreement page and the reviewer's name.

Every decision is one POST guarded by the CSRF token; it redirects back to `/review` with the queue's filters, so
a reload never sends it twice.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from unveil.ui.agreement import agreement
from unveil.ui.pages import LIST_PAGE_SIZE, REVIEWER_COOKIE, CtdDep, FiltersDep, Ui, UiDep, n_pages, page_no
from unveil.ui.sources import STATUS_LABELS, CtdSource, DatasetBusyError

BULK_MAX = 1000  # samples one bulk decision may name

router = APIRouter()


def _neighbours(ids: list[str], current_id: str | None) -> tuple[int, str | None, str | None]:
    """The shown sample's position in the filtered list (-1: not in it) and the ids before and after it; a sample
    outside the list leads to the list's first."""
    pos = ids.index(current_id) if current_id is not None and current_id in ids else -1
    prev_id = ids[pos - 1] if pos > 0 else None
    next_id = ids[pos + 1] if 0 <= pos < len(ids) - 1 else (ids[0] if pos < 0 and ids else None)
    return pos, prev_id, next_id


def _sidebar_page(request: Request, n_shown: int, pos: int) -> tuple[int, int]:
    """The sidebar's page (the one asked for, else the one holding the shown sample) and the number of pages."""
    pages = n_pages(n_shown, LIST_PAGE_SIZE)
    if "list" in request.query_params:
        return page_no(request, pages, "list"), pages
    return (pos // LIST_PAGE_SIZE + 1 if pos >= 0 else 1), pages


def _queue_facts(ui: Ui, ctd: CtdSource, rows: list[dict[str, Any]], request: Request) -> dict[str, Any]:
    """What the queue's header shows of the whole dataset: progress, filter choices, policy, problems."""
    return {
        "progress": ctd.progress(rows),
        "categories": sorted({r.get("category") or "" for r in rows} - {""}),
        "n_blind": max([int(r.get("n_blind") or 0) for r in rows] + [0]),
        "statuses": STATUS_LABELS,
        "problems": ctd.index.all_problems(),
        "views_error": ctd.views.last_error,
        "reviewers": sorted({w for r in rows for w in r.get("judgements") or {}} | {ui.reviewer(request)}),
        "policy": {"min_reviewers": ctd.min_reviewers, "rule": ctd.rule},
    }


@router.get("/review", response_class=HTMLResponse)
async def review(
    request: Request,
    ui: UiDep,
    ctd: CtdDep,
    f: FiltersDep,
) -> HTMLResponse:
    """The review queue: filters, progress, one page of the sample list and one card."""
    rows = await asyncio.to_thread(ctd.rows)
    shown = [r for r in rows if ctd.matches(r, **f.as_dict())]
    wanted = request.query_params.get("id")
    current_id = wanted if wanted else (shown[0]["id"] if shown else None)
    card = await asyncio.to_thread(ctd.record, current_id) if current_id else None
    problem = ctd.problem(current_id) if current_id else None
    if current_id and card is None and problem is None and wanted:
        raise HTTPException(404, f"no sample {current_id!r} in this dataset")
    pos, prev_id, next_id = _neighbours([r["id"] for r in shown], current_id)
    list_page, list_pages = _sidebar_page(request, len(shown), pos)
    start = (list_page - 1) * LIST_PAGE_SIZE
    return ui.page(
        request,
        "review.html",
        cards=shown[start : start + LIST_PAGE_SIZE],
        n_shown=len(shown),
        list_start=start,
        list_page=list_page,
        list_pages=list_pages,
        card=card,
        card_id=current_id,
        problem=problem,
        pos=pos,
        filters=f.as_dict(),
        prev_id=prev_id,
        next_id=next_id,
        filter_query=f.query(),
        conflict=card["review"] if card is not None and request.query_params.get("flash") == "conflict" else None,
        undo_id=request.query_params.get("undo_id", ""),
        undo_k=request.query_params.get("undo_k", ""),
        exported=request.query_params.get("exported", ""),
        **_queue_facts(ui, ctd, rows, request),
    )


async def _skipped_flash(ctd: CtdSource, sample_id: str) -> str:
    """Why a decision changed nothing: an unknown sample is 404, an unreadable record 409, else it was already
    recorded (the same decision sent twice)."""
    if sample_id not in ctd.index.where:
        raise HTTPException(404, f"no sample {sample_id!r} in this dataset")
    problem = ctd.problem(sample_id)
    if problem is not None:
        raise HTTPException(
            409, f"sample {sample_id!r} cannot take a decision: its record is unreadable ({problem.reason})"
        )
    return "already"


@router.post("/review/decide")
async def decide(
    request: Request,
    ui: UiDep,
    ctd: CtdDep,
    f: FiltersDep,
    id: str = Form(...),
    decision: str = Form(...),
    note: str = Form(""),
) -> Response:
    """Apply approve / reject / note to one sample, then show the next one of the filtered list. The same
    decision sent twice (a double click) is applied once and answers as the first did."""
    await ui.check_csrf(request)
    if decision not in ("approve", "reject", "note"):
        raise HTTPException(400, "decision must be approve, reject or note")
    before = [r["id"] for r in await asyncio.to_thread(ctd.rows) if ctd.matches(r, **f.as_dict())]
    try:
        counts = await asyncio.to_thread(ctd.decide, id, decision, note, ui.reviewer(request))
    except DatasetBusyError as exc:  # another reviewer or writer held the lock too long: nothing was written
        raise HTTPException(503, f"{exc} (your decision was not saved; press it again)") from exc
    if counts.get("conflicts"):
        return RedirectResponse(f"/review?{f.query(id=id, flash='conflict')}", 303)
    flash = await _skipped_flash(ctd, id) if counts.get("skipped") else decision
    nxt = id if decision == "note" else None
    if nxt is None and id in before:
        later = before[before.index(id) + 1 :]
        nxt = later[0] if later else None
    more = {"flash": flash, **({"id": nxt} if nxt else {})}
    if flash == decision:  # offer to take it back from the next page (the entry just appended)
        rec = await asyncio.to_thread(ctd.index.get, id)
        more.update(undo_id=id, undo_k=str(len((rec or {}).get("review_history") or []) - 1))
    return RedirectResponse(f"/review?{f.query(**more)}", status_code=303)


@router.post("/review/bulk")
async def bulk(
    request: Request,
    ui: UiDep,
    ctd: CtdDep,
    f: FiltersDep,
    decision: str = Form(...),
    note: str = Form(""),
) -> Response:
    """Approve or reject the selected samples together (one lock, one append; the page asks to confirm)."""
    await ui.check_csrf(request)
    if decision not in ("approve", "reject"):
        raise HTTPException(400, "decision must be approve or reject")
    ids = [str(v) for v in (await request.form()).getlist("ids")]
    chosen = list(dict.fromkeys(ids))[:BULK_MAX]
    if not chosen:
        raise HTTPException(400, "no sample selected")
    try:
        counts = await asyncio.to_thread(ctd.decide_many, chosen, decision, note, ui.reviewer(request))
    except DatasetBusyError as exc:
        raise HTTPException(503, f"{exc} (nothing was saved; press it again)") from exc
    done = counts["approved"] + counts["rejected"] + counts["pending"]
    return RedirectResponse(f"/review?{f.query(flash='bulk', bulk=f'{decision}:{done}:{len(chosen)}')}", 303)


@router.post("/review/undo")
async def undo(
    request: Request,
    ui: UiDep,
    ctd: CtdDep,
    f: FiltersDep,
    id: str = Form(...),
    undoes: int = Form(...),
) -> Response:
    """Take back one entry of a sample's review history (a decision or a note); the sample stays shown."""
    await ui.check_csrf(request)
    try:
        counts = await asyncio.to_thread(ctd.undo, id, undoes, ui.reviewer(request))
    except DatasetBusyError as exc:
        raise HTTPException(503, f"{exc} (nothing was undone; press it again)") from exc
    if id not in ctd.index.where:
        raise HTTPException(404, f"no sample {id!r} in this dataset")
    flash = "undone" if counts.get("undone") else "already"
    return RedirectResponse(f"/review?{f.query(id=id, flash=flash)}", status_code=303)


@router.post("/review/export")
async def export(request: Request, ui: UiDep, ctd: CtdDep) -> Response:
    """Write the Parquet export (DIR/export/data.parquet)."""
    await ui.check_csrf(request)
    try:
        out = await asyncio.to_thread(ctd.export)
    except Exception as exc:  # noqa: BLE001 - shown to the reviewer (e.g. an image file missing from the folder)
        raise HTTPException(500, f"export failed: {type(exc).__name__}: {exc}") from exc
    return RedirectResponse(f"/review?{urllib.parse.urlencode({'flash': 'exported', 'exported': str(out)})}", 303)


@router.get("/reviewers", response_class=HTMLResponse)
async def reviewers_page(request: Request, ui: UiDep, ctd: CtdDep) -> HTMLResponse:
    """Who reviewed what, and how much reviewers agree per category (Fleiss' and Cohen's kappa)."""
    rows = await asyncio.to_thread(ctd.rows)
    return ui.page(
        request,
        "reviewers.html",
        stats=agreement(rows),
        policy={"min_reviewers": ctd.min_reviewers, "rule": ctd.rule},
        pending=sum(1 for r in rows if r.get("status") == "pending_review"),
    )


@router.post("/reviewer")
async def set_reviewer(request: Request, ui: UiDep, name: str = Form(...), back: str = Form("/")) -> Response:
    """Remember the reviewer's name (kept with each decision) in a cookie."""
    await ui.check_csrf(request)
    local = back.startswith("/") and not back.startswith("//") and "\\" not in back  # no open redirect
    response = RedirectResponse(back if local else "/", 303)
    response.set_cookie(REVIEWER_COOKIE, name.strip()[:200] or ui.default_reviewer, httponly=True, samesite="strict")
    return response
