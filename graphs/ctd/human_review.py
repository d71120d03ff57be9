"""Human verification of an accepted CTD pair: an `interrupt()` for a reviewer (or several), a review queue for batch
runs, or none; with the server's review folder set (`UNVEIL_REVIEW_DIR`), the pause is shared with the web app on
that folder (`graphs.ctd.review`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graphs.ctd.context import CtdContext
from graphs.ctd.resources import open_store
from graphs.ctd.review import (
    authenticated_answers,
    combined_review,
    decide_in_folder,
    folder_outcome,
    now_iso,
    parse_review,
    queue_in_folder,
)
from graphs.ctd.review_payload import review_payload, review_question, thumbnail_data_url
from graphs.ctd.rules import ReviewPolicy, review_outcome
from graphs.ctd.send_back import (
    SendBack,
    answer_key,
    deciding_send_back,
    folder_sample,
    folder_send_back,
    requeue_revised,
    sent_back_update,
    studio_answers,
)
from graphs.ctd.state import CtdState
from tools.image_store import get_image_store
from tools.review_log import review_dir
from tools.review_policy import settle_policy
from tools.reviewers import load_reviewers, require_reviewers_file, server_reviewers_file

log = logging.getLogger("unveil.ctd")


async def human_review(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Human verification: pause for a reviewer, queue the sample for later review, or skip (auto); a reviewer
    may send the sample back to the Eraser with a note (`graphs.ctd.send_back`).

    An invalid answer pauses again with the error in the payload (each `interrupt()` of the node gets its own
    resume value, replayed when the node reruns), so a typo never leaves the thread failed. When the server names a
    review folder (`UNVEIL_REVIEW_DIR`), the pause is shared with the web app on that folder (see `_folder_review`).
    """
    mode = runtime.context.review
    if mode == "queue":
        return {"status": "pending_review", "review": {"status": "pending"}}
    if mode == "auto":
        return {"status": "accepted", "review": {"status": "skipped"}}
    thumbnail = None
    if state.get("image_id"):
        try:
            store = await open_store(runtime.context)
            thumbnail = await asyncio.to_thread(thumbnail_data_url, store, state["image_id"])
        except Exception as exc:  # noqa: BLE001 - the reviewer still gets the path; the review must not fail
            log.warning("no thumbnail for %s: %s", state.get("image_id"), exc)
    where = folder_sample()
    if where is not None:
        return await _folder_review(state, runtime, where[0], where[1], thumbnail, server_reviewers_file(where[0]))
    return await _graph_review(state, runtime, thumbnail, server_reviewers_file(review_dir()))


async def _graph_review(
    state: CtdState, runtime: Runtime[CtdContext], thumbnail: str | None, reviewers_file: Path | None
) -> CtdState:
    """Review held in the graph's state (no review folder): each resume adds one review (or a list of them) until
    the policy decides; an invalid answer is asked again with its error. Every interrupt() of this node is
    answered in order when it re-runs. With a reviewers file on the server each answer carries its reviewer's
    token; a reviewer counts once (the same judgement again is refused as already given, a changed one replaces
    their earlier one)."""
    policy = runtime.context.review_policy()
    people = await asyncio.to_thread(load_reviewers, reviewers_file) if reviewers_file else None
    require_reviewers_file(policy.min_reviewers, people, "the ctd graph's review")
    reviews: list[dict[str, Any]] = []
    error: str | None = None
    while True:  # ends: an interrupt() with no resume value left suspends the run
        payload = review_payload(state, thumbnail=thumbnail, error=error, tokens=people is not None)
        if reviews:
            payload["reviews_so_far"] = reviews
            payload["question"] = _another(policy, len(reviews), people is not None)
        answer = interrupt(payload)
        try:
            given = authenticated_answers(studio_answers(answer), people, default_name="")
            reviews, error = _merge_reviews(reviews, given)
        except ValueError as exc:
            error = str(exc)
            continue
        if review_outcome(reviews, policy) != "pending":
            review = combined_review(reviews, policy)
            back = deciding_send_back(reviews, review["status"])
            if back is not None:
                entry: SendBack = {
                    "note": back["note"],
                    "reviewer": back["reviewer"],
                    "time": now_iso(),
                    "round": state.get("rounds"),
                }
                return sent_back_update(state, entry, review)
            return {"status": "accepted" if review["status"] == "approved" else "rejected", "review": review}


def folder_policy(folder: Path, context: CtdContext) -> ReviewPolicy:
    """The review folder's policy (`tools.review_policy`), which the web app and `unveil review` use too: a
    context's `min_reviewers` or `review_rule` other than its default asks for that value as their flags do
    (stored where the folder has none; another than the stored one is a `ReviewPolicyError` naming it)."""
    defaults = {f.name: f.default for f in dataclasses.fields(CtdContext)}
    asked = {
        name: getattr(context, name) if getattr(context, name) != defaults[name] else None
        for name in ("min_reviewers", "review_rule")
    }
    stored = settle_policy(folder, min_reviewers=asked["min_reviewers"], rule=asked["review_rule"])
    return ReviewPolicy(min_reviewers=stored.min_reviewers, rule=stored.rule)  # type: ignore[arg-type]


def _another(policy: ReviewPolicy, n_so_far: int, tokens: bool) -> str:
    """The question once some reviewers answered: how many of how many, and that another one is needed."""
    return (
        f"Another reviewer is needed: {n_so_far} of {policy.min_reviewers} reviewers so far ({policy.rule}). "
        + review_question(tokens)
    )


def _merge_reviews(
    reviews: list[dict[str, Any]], given: list[tuple[dict[str, Any], str, str]]
) -> tuple[list[dict[str, Any]], str | None]:
    """The reviews after a resume's answers, one per reviewer (a changed judgement replaces the earlier one; a
    rejection that sends the sample back says so, `send_back: true`), and the note for the next question when a
    reviewer repeated their judgement."""
    out = list(reviews)
    repeated: list[str] = []
    for answer, who, _ in given:
        one: dict[str, Any] = {**parse_review(answer), "reviewer": who}
        if answer.get("send_back"):
            one["send_back"] = True
        earlier = [r for r in out if who and r.get("reviewer") == who]
        if earlier and earlier[-1]["status"] == one["status"]:
            repeated.append(who)
            continue
        out = [r for r in out if not (who and r.get("reviewer") == who)] + [one]
    note = f"already judged by {', '.join(repeated)}: not counted again" if repeated else None
    return out, note


async def _folder_review(
    state: CtdState,
    runtime: Runtime[CtdContext],
    folder: Path,
    sample_id: str,
    thumbnail: str | None,
    reviewers_file: Path | None,
) -> CtdState:
    """Review through the server's review folder, shared with the web app (`unveil ui FOLDER`): the sample is
    queued there (its image copied into the folder's store) as `unveil generate --review queue` writes it; a
    decision already taken there (in the web app, undos counted) resolves the review without a pause, and is read
    again whenever the run resumes; a Studio answer is applied to the folder's record under the folder lock and
    logged in `decisions.jsonl` with its reviewer and time, so the web app shows it. A send back, there or here,
    sends the run to the Eraser; its next attempt is queued again (`graphs.ctd.send_back.requeue_revised`)."""
    out: dict[str, Any] = dict(state)
    if state.get("image_id"):
        src = await open_store(runtime.context)
        copied = await asyncio.to_thread(
            lambda: get_image_store(folder / "images").put_png(
                src.read_bytes(state["image_id"]), name=state["image_id"]
            )
        )
        out["image_path"] = copied.path
    revised = await asyncio.to_thread(requeue_revised, folder, sample_id, out)
    rec = revised if revised is not None else await asyncio.to_thread(queue_in_folder, folder, sample_id, out)
    policy = await asyncio.to_thread(folder_policy, folder, runtime.context)
    people = await asyncio.to_thread(load_reviewers, reviewers_file) if reviewers_file else None
    require_reviewers_file(policy.min_reviewers, people, "the ctd graph's review")
    error: str | None = None
    n = 0
    while True:  # ends: a decided record, or an interrupt() with no resume value left (the run suspends)
        decided = folder_outcome(rec)
        if decided is not None:
            return {"status": decided["status"], "review": decided["review"]}
        back = folder_send_back(rec, state)  # sent back in the web app, or by this node's answer below
        if back is not None:
            return sent_back_update(state, back, rec.get("review") or {})
        payload = review_payload(state, thumbnail=thumbnail, error=error, tokens=people is not None)
        payload["review_id"], payload["review_dir"] = sample_id, str(folder)
        so_far = [
            {k: r.get(k) for k in ("reviewer", "status", "note")}
            for r in (rec.get("review") or {}).get("reviews") or []
        ]
        if so_far:
            payload["reviews_so_far"] = so_far
            payload["question"] = _another(policy, len(so_far), people is not None)
        answer = interrupt(payload)
        n += 1
        try:
            answers = authenticated_answers(studio_answers(answer), people, default_name="studio")
        except ValueError as exc:
            error = str(exc)
            continue
        again, done = await asyncio.to_thread(
            decide_in_folder, folder, sample_id, answers, policy, answer_key=answer_key(state, n)
        )
        rec = again if again is not None else rec
        error = _folder_note(answers, done)


def _folder_note(answers: list[tuple[dict[str, Any], str, str]], done: list[str]) -> str | None:
    """What the next question says of answers that changed nothing: a repeated judgement, a refused undo."""
    notes = [
        f"{who}: already judged by you" if what == "already" else f"{who}: you can undo only your own decisions"
        for (_, who, _), what in zip(answers, done, strict=False)
        if what in ("already", "refused")
    ]
    return "; ".join(notes) or None
