"""The review queue of a CTD dataset folder and the decisions taken in it: approve, reject, note, bulk decisions,
undo, the Parquet export, the reviewers' agreement page, sign-in (a folder with a reviewers file) and the
reviewer's name (single-user mode).

Every decision is one POST guarded by the CSRF token, taken as the session's reviewer; it redirects back to
`/review` with the queue's filters, so a reload never sends it twice, and leaves its message and the Undo of the
entry it appended in the session (never in the URL, which a link could forge).
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from agents.categories import CATEGORIES
from graphs.ctd.labels import LabelSchemaError
from graphs.ctd.review import now_iso
from graphs.ctd.rules import latest_by_reviewer
from runner.ctd_export import export_summary
from tools.review_log import ReviewWriteError, review_lock_async
from tools.reviewers import Assignment, ReviewerAuthError
from unveil.ui.agreement import agreement, reviewer_progress
from unveil.ui.markdown import render_guidelines
from unveil.ui.pages import (
    FLASHES,
    LIST_PAGE_SIZE,
    SESSION_COOKIE,
    FiltersDep,
    ReviewFilters,
    Session,
    Ui,
    UiDep,
    n_pages,
    page_no,
    source_of,
)
from unveil.ui.sources.ctd import STATUS_LABELS, CtdSource, DatasetBusyError

BULK_MAX = 1000  # samples one bulk decision may name

router = APIRouter()
CtdDep = Annotated[CtdSource, Depends(source_of(CtdSource))]  # the opened dataset folder (404 for another kind)


def _neighbours(ids: list[str], current_id: str | None) -> tuple[int, str | None, str | None]:
    """The shown sample's position in the filtered list (-1: not in it) and the ids before and after it; a sample
    outside the list leads to the list's first."""
    pos = ids.index(current_id) if current_id is not None and current_id in ids else -1
    prev_id = ids[pos - 1] if pos > 0 else None
    next_id = ids[pos + 1] if 0 <= pos < len(ids) - 1 else (ids[0] if pos < 0 and ids else None)
    return pos, prev_id, next_id


def _ordered(
    shown: list[dict[str, Any]], f: ReviewFilters, assignment: Assignment | None, skipped: list[str]
) -> list[dict[str, Any]]:
    """The queue in the order it is worked through: in a reviewer's queue that shows the samples assigned to
    others too, their own come first; the samples skipped in this session come last, in the order they were
    skipped (so each comes back once the others are done); file order otherwise."""
    rank = {sid: n + 1 for n, sid in enumerate(skipped)}
    theirs = f.todo and assignment is not None and f.todo in assignment.reviewers

    def key(row: dict[str, Any]) -> tuple[int, bool]:
        other = bool(theirs and assignment is not None and f.todo not in assignment.of(row["id"]))
        return rank.get(row["id"], 0), other

    return sorted(shown, key=key)


Rows = list[dict[str, Any]]


async def _queue(ui: Ui, ctd: CtdSource, request: Request, f: ReviewFilters) -> tuple[Rows, Rows, Assignment | None]:
    """Every row, the rows the filters keep in the order the queue shows them, and the folder's assignment."""
    rows = await asyncio.to_thread(ctd.rows)
    assignment = await asyncio.to_thread(ctd.assignment)
    shown = [r for r in rows if ctd.matches(r, **f.as_dict(), assignment=assignment)]
    return rows, _ordered(shown, f, assignment, ui.session(request).skipped), assignment


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
    """The review queue: filters, progress, one page of the sample list and one card (with a reviewers file,
    the sign-in page until the browser signs in)."""
    if ui.people() is not None and not ui.reviewer(request):
        return RedirectResponse("/signin", 303)  # type: ignore[return-value, unused-ignore]  # Any without fastapi
    last = ui.session(request).take()
    rows, shown, assignment = await _queue(ui, ctd, request, f)
    wanted = request.query_params.get("id")
    current_id = wanted if wanted else (shown[0]["id"] if shown else None)
    card = await asyncio.to_thread(ctd.record, current_id) if current_id else None
    problem = ctd.problem(current_id) if current_id else None
    if current_id and card is None and problem is None and wanted:
        raise HTTPException(404, f"no sample {current_id!r} in this dataset")
    if card is not None and card.get("status") == "pending_review" and ui.reviewer(request):
        _mark_shown(ui.kept_session(request), str(current_id))
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
        conflict=card["review"] if card is not None and last["conflict"] == current_id else None,
        undo=last["undo"],
        exported=last["exported"],
        flash=last["flash"],
        assigned=assignment.of(current_id) if assignment is not None and current_id else [],
        has_assignment=assignment is not None,
        not_assigned=_not_assigned(ui, request, assignment, current_id),
        guidelines=render_guidelines(await asyncio.to_thread(ctd.guidelines)),
        **await _schema_of(ctd),
        category_choices=CATEGORIES,
        **_queue_facts(ui, ctd, rows, request),
    )


SHOWN_MAX = 1000  # pending samples one session remembers the showing time of (the oldest forgotten first)


def _mark_shown(session: Session, sample_id: str) -> None:
    """Remember when the session's reviewer was first shown a pending sample (the server's clock, never the
    browser's): their judgement of it keeps the time, and the agreement page the seconds in between."""
    if sample_id not in session.shown:
        session.shown[sample_id] = now_iso()
        while len(session.shown) > SHOWN_MAX:
            session.shown.pop(next(iter(session.shown)))


async def _schema_of(ctd: CtdSource) -> dict[str, Any]:
    """The folder's label schema for the page, or, when its `labels.json` cannot be used, no schema and the error
    naming the file and field (shown on the page; decisions wait until it is fixed)."""
    try:
        return {"schema": await asyncio.to_thread(ctd.label_schema), "schema_error": ""}
    except LabelSchemaError as exc:
        return {"schema": None, "schema_error": str(exc)}


def _not_assigned(ui: Ui, request: Request, assignment: Assignment | None, sample_id: str | None) -> bool:
    """Whether the shown sample is assigned to other reviewers than the signed-in one: the assignment is advisory
    (their judgement counts all the same), so the card says so rather than refusing. An adjudicator, who settles
    any sample, is never marked."""
    if assignment is None or not sample_id or ui.session(request).role == "adjudicator":
        return False
    return ui.reviewer(request) not in assignment.of(sample_id)


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
    return FLASHES["already"]


async def _outcome_flash(ctd: CtdSource, sample_id: str, decision: str, counts: dict[str, int]) -> str:
    """The message of a decision that was not a conflict: what it did to the sample."""
    if counts.get("skipped"):
        return await _skipped_flash(ctd, sample_id)
    if counts.get("already"):
        return FLASHES["already_judged"]
    if decision == "note":
        return FLASHES["note"]
    if counts.get("sent_back"):
        return FLASHES["sent_back"]
    return _decided_flash(ctd, sample_id, decision, counts)


def _decided_flash(ctd: CtdSource, sample_id: str, decision: str, counts: dict[str, int]) -> str:
    """The message of an approve/reject that was applied: the sample's outcome, or, while it waits, how many
    reviewers judged it of how many the rule needs."""
    if not counts.get("pending"):
        return FLASHES["approved" if counts.get("approved") else "rejected"]
    review = (ctd.index.get(sample_id) or {}).get("review") or {}
    n = len(latest_by_reviewer(review.get("reviews") or []))
    need = int(review.get("min_reviewers") or ctd.min_reviewers)
    more = max(need - n, 1)
    return (
        f"{'Approved' if decision == 'approve' else 'Rejected'}: {n} of {need} reviewers so far; the sample stays "
        f"pending until {more} more reviewer{'s' if more != 1 else ''} judge{'' if more != 1 else 's'} it."
    )


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
    """Apply approve / reject / note to one sample as the session's reviewer, then show the next one of the
    filtered list. The same decision sent twice (a double click) is applied once; the same judgement of the same
    reviewer again is reported as already judged, not logged."""
    await ui.check_csrf(request)
    if decision not in ("approve", "reject", "note", "send_back"):
        raise HTTPException(400, "decision must be approve, reject, send_back or note")
    actor = ui.actor(request)
    session = ui.kept_session(request)
    try:
        labels = await _labels_of(request, ctd)
    except LabelSchemaError as exc:  # a labels.json that cannot be read: nothing is decided until it is fixed
        session.flash = f"Not saved: {exc}"
        return RedirectResponse(f"/review?{f.query(id=id)}", 303)
    if decision == "send_back":  # a rejection whose note goes back to the Eraser
        decision, labels = "reject", {**labels, "send_back": True}
    shown = session.shown.get(id) if decision != "note" else None
    before = [r["id"] for r in (await _queue(ui, ctd, request, f))[1]]
    appended: list[tuple[str, int]] = []
    try:
        async with review_lock_async(ctd.root):  # waited for here, not in a thread the pages need
            counts = await asyncio.to_thread(ctd.decide, id, decision, note, actor, appended, labels, shown)
    except (DatasetBusyError, ReviewWriteError) as exc:  # a folder held too long (nothing saved), or a full disk
        return ui.not_saved(request, exc, back=f"/review?{f.query(id=id)}")
    except LabelSchemaError as exc:  # the dataset's labels.json asks for more: nothing was written
        session.flash = f"Not saved: {exc}"
        return RedirectResponse(f"/review?{f.query(id=id)}", 303)
    if counts.get("conflicts"):
        session.conflict = id
        return RedirectResponse(f"/review?{f.query(id=id)}", 303)
    session.flash = await _outcome_flash(ctd, id, decision, counts)
    session.undo = appended[-1] if appended else None  # this request's own entry, never a concurrent one
    if decision != "note":
        session.shown.pop(id, None)  # judged: a later showing of it is timed anew
        if id in session.skipped:
            session.skipped.remove(id)  # judged now: no longer waiting at the end of the queue
    nxt = id if decision == "note" or counts.get("already") else None
    if nxt is None and id in before:
        later = before[before.index(id) + 1 :]
        nxt = later[0] if later else None
    return RedirectResponse(f"/review?{f.query(**({'id': nxt} if nxt else {}))}", status_code=303)


SKIPPED_MAX = 1000  # samples one session remembers as skipped (the oldest forgotten first)


@router.post("/review/skip")
async def skip(request: Request, ui: UiDep, ctd: CtdDep, f: FiltersDep, id: str = Form(...)) -> Response:
    """Move on from a sample without deciding it: nothing is recorded (no history entry, no `decisions.jsonl`
    line, so it is never a judgement); the sample goes to the end of this session's queue and comes back once the
    others are done. The next sample of the queue opens."""
    await ui.check_csrf(request)
    ui.actor(request)  # with a reviewers file, a signed-in reviewer's queue only
    if id not in ctd.index.where:
        raise HTTPException(404, f"no sample {id!r} in this dataset")
    before = [r["id"] for r in (await _queue(ui, ctd, request, f))[1]]
    session = ui.kept_session(request)
    session.skipped = [*[s for s in session.skipped if s != id][-(SKIPPED_MAX - 1) :], id]
    session.shown.pop(id, None)  # its time per sample starts again when it comes back
    later = [s for s in before[before.index(id) + 1 :] if s != id] if id in before else []
    after = [r["id"] for r in (await _queue(ui, ctd, request, f))[1]]
    nxt = later[0] if later else next((s for s in after if s != id), id)
    session.flash = FLASHES["skip"]
    return RedirectResponse(f"/review?{f.query(id=nxt)}", 303)


async def _labels_of(request: Request, ctd: CtdSource) -> dict[str, Any]:
    """The label fields of a decision form (a corrected category, one field per rating of the schema). The
    correction is `label_category`, never `category`: that name is the queue's filter, which every form carries
    back, and reading it here made every decision record a category its reviewer never chose. The field comes
    pre-filled with the judges' category (`label_category_default`, a suggestion): only a changed value is a
    correction."""
    schema = await asyncio.to_thread(ctd.label_schema)
    if schema is None:
        return {}
    form = await request.form()
    labels: dict[str, Any] = {}
    chosen = str(form.get("label_category") or "")
    if schema.category and chosen and chosen != str(form.get("label_category_default") or ""):
        labels["category"] = chosen  # a suggestion left as it was pre-filled is no correction
    ratings = {name: str(form.get(f"rating_{name}") or "") for name in schema.ratings}
    if any(ratings.values()):
        labels["ratings"] = ratings
    return labels


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
    actor = ui.actor(request)
    ids = [str(v) for v in (await request.form()).getlist("ids")]
    chosen = list(dict.fromkeys(ids))[:BULK_MAX]
    if not chosen:
        raise HTTPException(400, "no sample selected")
    try:
        async with review_lock_async(ctd.root):
            counts = await asyncio.to_thread(ctd.decide_many, chosen, decision, note, actor)
    except (DatasetBusyError, ReviewWriteError) as exc:
        return ui.not_saved(request, exc, back=f"/review?{f.query()}")
    except LabelSchemaError as exc:
        ui.kept_session(request).flash = f"Nothing saved: {exc}"
        return RedirectResponse(f"/review?{f.query()}", 303)
    done = counts["approved"] + counts["rejected"] + counts["pending"]
    already, rest = counts["already"], len(chosen) - done - counts["already"]
    ui.kept_session(request).flash = (
        f"{'Approved' if decision == 'approve' else 'Rejected'} {done} of {len(chosen)} selected"
        + (f"; {counts['pending']} of them wait for more reviewers" if counts["pending"] else "")
        + (f"; {already} already judged by you, not counted again" if already else "")
        + (f"; {rest} already decided or unknown, left as they were" if rest else "")
        + "."
    )
    return RedirectResponse(f"/review?{f.query()}", 303)


@router.post("/review/undo")
async def undo(
    request: Request,
    ui: UiDep,
    ctd: CtdDep,
    f: FiltersDep,
    id: str = Form(...),
    undoes: int = Form(...),
) -> Response:
    """Take back one entry of a sample's review history (a decision or a note) as the session's reviewer: only
    their own entries, unless they are an adjudicator (an override, logged); the sample stays shown."""
    await ui.check_csrf(request)
    actor = ui.actor(request)
    appended: list[tuple[str, int]] = []
    try:
        async with review_lock_async(ctd.root):
            counts = await asyncio.to_thread(ctd.undo, id, undoes, actor, appended)
    except (DatasetBusyError, ReviewWriteError) as exc:
        return ui.not_saved(request, exc, back=f"/review?{f.query(id=id)}")
    if id not in ctd.index.where:
        raise HTTPException(404, f"no sample {id!r} in this dataset")
    if counts.get("undone"):
        entry = ((ctd.index.get(id) or {}).get("review_history") or [{}])[appended[-1][1]] if appended else {}
        flash = FLASHES["override" if entry.get("override") else "undone"]
    else:
        flash = FLASHES["refused" if counts.get("refused") else "already"]
    ui.kept_session(request).flash = flash
    return RedirectResponse(f"/review?{f.query(id=id)}", status_code=303)


@router.post("/review/export")
async def export(request: Request, ui: UiDep, ctd: CtdDep) -> Response:
    """Write the Parquet export (DIR/export/data.parquet); with a reviewers file, for a signed-in reviewer only."""
    await ui.check_csrf(request)
    ui.actor(request)
    async with review_lock_async(ctd.root):  # the views' pending rewrite, under the lock waited for here
        await asyncio.to_thread(ctd.views.flush)
    try:
        out = await asyncio.to_thread(ctd.export)
    except Exception as exc:
        raise HTTPException(500, f"export failed: {type(exc).__name__}: {exc}") from exc
    session = ui.kept_session(request)
    session.flash = f"Export written to {export_summary(out.parent)}."
    session.exported = f"{out.parent}{os.sep}"
    return RedirectResponse("/review", 303)


@router.get("/reviewers", response_class=HTMLResponse)
async def reviewers_page(request: Request, ui: UiDep, ctd: CtdDep) -> HTMLResponse:
    """Who reviewed what, each reviewer's progress on their assigned samples and time per sample, and how much
    reviewers agree per category (Fleiss' and Cohen's kappa); with a reviewers file, for a signed-in reviewer
    only."""
    if ui.people() is not None and not ui.reviewer(request):
        return RedirectResponse("/signin", 303)  # type: ignore[return-value, unused-ignore]
    rows = await asyncio.to_thread(ctd.rows)
    assignment = await asyncio.to_thread(ctd.assignment)
    return ui.page(
        request,
        "reviewers.html",
        stats=agreement(rows),
        progress=reviewer_progress(rows, assignment),
        policy={"min_reviewers": ctd.min_reviewers, "rule": ctd.rule},
        pending=sum(1 for r in rows if r.get("status") == "pending_review"),
    )


@router.post("/reviewer")
async def set_reviewer(request: Request, ui: UiDep, name: str = Form(...), back: str = Form("/")) -> Response:
    """Single-user mode: remember the name kept with each decision, in the server-side session (any characters).
    With a reviewers file a name comes only from the sign-in (403)."""
    await ui.check_csrf(request)
    if ui.people() is not None:
        raise HTTPException(403, "This folder has a reviewers file: your name is the one your token signs in as.")
    local = back.startswith("/") and not back.startswith("//") and "\\" not in back  # no open redirect
    session = ui.kept_session(request)
    session.reviewer, session.flash = name.strip()[:200] or ui.default_reviewer, FLASHES["reviewer"]
    return RedirectResponse(back if local else "/", 303)


@router.get("/signin", response_class=HTMLResponse)
async def signin_page(request: Request, ui: UiDep, ctd: CtdDep) -> HTMLResponse:
    """The sign-in form of a folder with a reviewers file."""
    return ui.page(request, "signin.html", error="")


@router.post("/signin")
async def signin(request: Request, ui: UiDep, ctd: CtdDep, token: str = Form("")) -> Response:
    """Trade a reviewer token for a new session of that reviewer (its id in an HttpOnly, SameSite=Strict
    cookie); a wrong token answers 401 with the form again."""
    await ui.check_csrf(request)
    try:
        sid, _ = ui.sign_in(request, token[:200])
    except ReviewerAuthError as exc:
        response = ui.page(request, "signin.html", error=str(exc))
        response.status_code = 401
        return response
    request.scope[SESSION_COOKIE] = sid
    return RedirectResponse("/review", 303)


@router.post("/signout")
async def signout(request: Request, ui: UiDep) -> Response:
    """End the session's sign-in."""
    await ui.check_csrf(request)
    session = ui.kept_session(request)
    session.reviewer, session.role, session.token_sha256 = "", "", ""
    session.flash = FLASHES["signed_out"]
    return RedirectResponse("/signin" if ui.people() is not None else "/", 303)
