"""Human verification of an accepted CTD pair: an `interrupt()` for a reviewer (or several), a review queue for batch
runs, or none; with the server's review folder set (`UNVEIL_REVIEW_DIR`), the pause is shared with the web app on
that folder (`graphs.ctd_review`)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graphs.ctd.context import CtdContext
from graphs.ctd.resources import open_store
from graphs.ctd.review_payload import REVIEW_QUESTION, review_payload, thumbnail_data_url
from graphs.ctd.state import CtdState
from graphs.ctd_review import combined_review, decide_in_folder, folder_outcome, parse_reviews, queue_in_folder
from graphs.ctd_rules import review_outcome
from tools.image_store import get_image_store
from tools.review_log import review_dir

log = logging.getLogger("unveil.ctd")


async def human_review(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Human verification: pause for a reviewer, queue the sample for later review, or skip (auto).

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
    folder, thread_id = review_dir(), (get_config().get("configurable") or {}).get("thread_id")
    if folder is not None and thread_id:
        return await _folder_review(state, runtime, folder, f"studio-{thread_id}", thumbnail)
    # Several reviewers: each resume adds one review (or a list of them) until the policy decides; an invalid
    # answer is asked again with its error. Every interrupt() of this node is answered in order when it re-runs.
    policy = runtime.context.review_policy()
    reviews: list[dict[str, str]] = []
    error: str | None = None
    while True:  # ends: an interrupt() with no resume value left suspends the run
        payload = review_payload(state, thumbnail=thumbnail, error=error)
        if reviews:
            payload["reviews_so_far"] = reviews
            payload["question"] = (
                f"Another reviewer is needed ({policy.rule}, at least {policy.min_reviewers}). " + REVIEW_QUESTION
            )
        answer = interrupt(payload)
        try:
            reviews += parse_reviews(answer)
        except ValueError as exc:
            error = str(exc)
            continue
        error = None
        if review_outcome(reviews, policy) != "pending":
            review = combined_review(reviews, policy)
            return {"status": "accepted" if review["status"] == "approved" else "rejected", "review": review}


async def _folder_review(
    state: CtdState, runtime: Runtime[CtdContext], folder: Path, sample_id: str, thumbnail: str | None
) -> CtdState:
    """Review through the server's review folder, shared with the web app (`unveil ui FOLDER`): the sample is
    queued there (its image copied into the folder's store) as `unveil generate --review queue` writes it; a
    decision already taken there (in the web app, undos counted) resolves the review without a pause, and is read
    again whenever the run resumes; a Studio answer is applied to the folder's record under the folder lock and
    logged in `decisions.jsonl` with its reviewer and time, so the web app shows it."""
    out: dict[str, Any] = dict(state)
    if state.get("image_id"):
        src = await open_store(runtime.context)
        copied = await asyncio.to_thread(
            lambda: get_image_store(folder / "images").put_png(
                src.read_bytes(state["image_id"]), name=state["image_id"]
            )
        )
        out["image_path"] = copied.path
    rec = await asyncio.to_thread(queue_in_folder, folder, sample_id, out)
    policy = runtime.context.review_policy()
    error: str | None = None
    n = 0
    while True:  # ends: a decided record, or an interrupt() with no resume value left (the run suspends)
        decided = folder_outcome(rec)
        if decided is not None:
            return {"status": decided["status"], "review": decided["review"]}
        payload = review_payload(state, thumbnail=thumbnail, error=error)
        payload["review_id"], payload["review_dir"] = sample_id, str(folder)
        so_far = [
            {k: r.get(k) for k in ("reviewer", "status", "note")}
            for r in (rec.get("review") or {}).get("reviews") or []
        ]
        if so_far:
            payload["reviews_so_far"] = so_far
            payload["question"] = (
                f"Another reviewer is needed ({policy.rule}, at least {policy.min_reviewers}). " + REVIEW_QUESTION
            )
        answer = interrupt(payload)
        n += 1
        try:
            answers = [
                a if isinstance(a, dict) else {"decision": a}
                for a in (answer if isinstance(answer, list) else [answer])
            ]
            parse_reviews(answers)
        except ValueError as exc:
            error = str(exc)
            continue
        error = None
        again = await asyncio.to_thread(
            decide_in_folder, folder, sample_id, answers, policy, reviewer="studio", answer_key=str(n)
        )
        rec = again if again is not None else rec
