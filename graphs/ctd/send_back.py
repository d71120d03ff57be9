"""Send back from human review: a reviewer's rejection with a note gives the Eraser another attempt.

One rule wherever a reviewer sends a sample back (the web app, `unveil review --send-back`, a Studio answer): it
is a rejection with a note (`graphs.ctd.labels.check_answer`), and the note joins the Eraser's feedback history
as a `reviewer_rejected` entry (`reviewer_feedback`), so the next attempt reads it, as delimited data, beside
every earlier attempt. The new attempt is judged as any other and counts against `max_rounds` (a rejected
attempt past it is dropped: `graphs.ctd.nodes.route_gatekeeper`). `unveil generate` continues a sent-back
scene's thread from its checkpoint (`runner.ctd.send_back_scene`); in Studio the paused run itself goes on
(`route_review`). A Studio answer says so as `{"decision": "send_back", "note": "..."}`, or as a decisions line
does, `{"decision": "reject", "send_back": true, "note": "..."}` (`studio_answers`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

from langgraph.config import get_config
from typing_extensions import TypedDict

from graphs.ctd.labels import check_answer
from graphs.ctd.review import sample_record
from graphs.ctd.state import CtdState
from tools.review_log import append_records, read_records, review_dir, review_lock

SEND_BACK = "send_back"  # the decision a Studio answer names (the web app's form posts the same value)
DECISIONS = ("approve", "reject", SEND_BACK)


class SendBack(TypedDict):
    """One sending back: the reviewer's note, who and when, and the attempt (round) it sent back."""

    note: str
    reviewer: str
    time: str
    round: int | None


def reviewer_feedback(values: dict[str, Any] | CtdState, send_back: dict[str, Any] | SendBack) -> dict[str, Any]:
    """The feedback entry a reviewer's rejection adds to the Eraser's history (the form the Gatekeeper's feedback
    takes: the attempt, its image, the problem and the advice), so the next attempt reads the reviewer's note."""
    erasure = values.get("erasure") or {}
    return {
        "round": values.get("rounds", 0),
        "problem": "reviewer_rejected",
        "detail": f"a human reviewer ({send_back.get('reviewer') or '?'}) rejected the accepted pair",
        "attempt": {k: erasure.get(k) for k in ("t2i_prompt", "caption", "erasure_reason", "technique")},
        "image_id": values.get("image_id"),
        "feedback": str(send_back.get("note") or ""),
        "suggestions": [],
    }


def _one_answer(answer: object) -> object:
    """One reviewer's answer checked field by field (a ValueError names the field) and written as the one
    reader (`graphs.ctd.review.parse_review`) and the send-back rule read it: `send_back` as a rejection."""
    if isinstance(answer, str):
        answer = {"decision": answer}
    if not isinstance(answer, dict):
        return answer  # parse_review names the expected shape
    decision = str(answer.get("decision", "")).strip().lower().replace(" ", "_").replace("-", "_")
    if decision not in (*DECISIONS, "approved", "accept", "yes", "rejected", "no"):
        raise ValueError(
            f"review answer: decision must be 'approve', 'reject' or 'send_back', got {answer.get('decision')!r}"
        )
    if not isinstance(answer.get("note", ""), str):
        raise ValueError(f"review answer: note must be text, got {answer.get('note')!r}")
    flag = answer.get(SEND_BACK, False)
    if not isinstance(flag, bool):
        raise ValueError(f"review answer: send_back must be true or false, got {flag!r}")
    out = dict(answer)
    if decision == SEND_BACK or flag:
        out.update(decision="reject" if decision == SEND_BACK else answer["decision"], send_back=True)
        check_answer(out, None)  # the one rule: a rejection with a note (a LabelSchemaError names the field)
    else:
        out.pop(SEND_BACK, None)
    return out


def studio_answers(answer: object) -> object:
    """A Studio resume value (an answer, or a list of them, one per reviewer) with each answer checked and a send
    back written as a rejection with `send_back: true`; a ValueError names the field that is wrong."""
    return [_one_answer(a) for a in answer] if isinstance(answer, list) else _one_answer(answer)


def deciding_send_back(reviews: list[dict[str, Any]], status: str) -> dict[str, Any] | None:
    """The review that sends the sample back: the latest rejection, when it asks to and the reviews rejected
    the sample (a send back that the policy outvotes sends nothing back)."""
    rejections = [r for r in reviews if r.get("status") == "rejected"]
    if status != "rejected" or not rejections or not rejections[-1].get(SEND_BACK):
        return None
    return rejections[-1]


def sent_back_update(state: CtdState, back: SendBack, review: dict[str, Any]) -> CtdState:
    """The human-review node's result for a sample sent back: status `sent_back`, the review that did it, the
    send back added to `sent_back`, and the note added to the Eraser's feedback history (`route_review` then
    goes to the Eraser)."""
    return {
        "status": "sent_back",
        "review": review,
        "sent_back": [*state.get("sent_back", []), dict(back)],
        "feedback_history": [*state.get("feedback_history", []), reviewer_feedback(state, back)],
    }


def route_review(state: CtdState) -> Literal["eraser", "__end__"]:
    """After human review: a sample sent back goes to the Eraser for another attempt, any other ends the run."""
    return "eraser" if state.get("status") == "sent_back" else "__end__"  # langgraph's END


def answer_key(state: CtdState, n: int) -> str:
    """The key of the `n`-th Studio answer of this attempt's review in the folder's history (`studio_answer`):
    after a send back the new attempt's answers count from 1 again, so they carry the number of send backs."""
    k = len(state.get("sent_back", []))
    return str(n) if k == 0 else f"{k}:{n}"


def folder_send_back(rec: dict[str, Any], state: CtdState) -> SendBack | None:
    """The folder record's send back of this attempt (the web app's or a Studio answer's), else None."""
    back = rec.get("send_back") or {}
    if rec.get("status") != "sent_back" or back.get("round") != state.get("rounds"):
        return None
    return {
        "note": str(back.get("note") or ""),
        "reviewer": str(back.get("reviewer") or ""),
        "time": str(back.get("time") or ""),
        "round": back.get("round"),
    }


def _revised(folder: Path, sample_id: str, out: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """The folder's new record of a sent-back sample after its new attempt (`out`), keeping the review history and,
    in `sent_back`, every note that sent it back, as `unveil generate` keeps them."""
    return {
        "id": sample_id,
        **sample_record(out, dataset_dir=folder),
        "review_history": rec.get("review_history", []),
        "sent_back": [*rec.get("sent_back", []), rec.get("send_back") or {}],
    }


def requeue_revised(folder: Path, sample_id: str, out: dict[str, Any]) -> dict[str, Any] | None:
    """When the folder's record of the sample was sent back at an earlier attempt, append the new attempt as
    pending review and return it; else None. Under the folder lock (blocking: run it in a thread)."""
    with review_lock(folder):
        rec = read_records(folder).get(sample_id)
        back = (rec or {}).get("send_back") or {}
        if (
            rec is None
            or rec.get("status") != "sent_back"
            or int(back.get("round") or 0) >= int(out.get("rounds") or 0)
        ):
            return None
        new = _revised(folder, sample_id, {**out, "status": "pending_review", "review": {"status": "pending"}}, rec)
        append_records(folder, [new])
        return new


def drop_in_folder(folder: Path, sample_id: str, out: dict[str, Any]) -> None:
    """When the folder's record of the sample waits for its sent-back attempt, append the scene as dropped (the
    judges rejected the last attempt), so the web app no longer shows it waiting. Under the folder lock
    (blocking: run it in a thread)."""
    with review_lock(folder):
        rec = read_records(folder).get(sample_id)
        if rec is not None and rec.get("status") == "sent_back":
            append_records(folder, [_revised(folder, sample_id, out, rec)])


def folder_sample() -> tuple[Path, str] | None:
    """The server's review folder and this run's sample id in it (`studio-<thread id>`), or None without a folder
    or a thread (call it inside a node)."""
    folder, thread_id = review_dir(), (get_config().get("configurable") or {}).get("thread_id")
    return (folder, f"studio-{thread_id}") if folder is not None and thread_id else None


async def record_drop(state: CtdState, update: CtdState) -> None:
    """The drop node's note to the review folder: a sent-back sample whose new attempt the judges rejected for the
    last time is recorded there as dropped (`drop_in_folder`)."""
    where = folder_sample() if state.get("sent_back") else None
    if where is not None:
        await asyncio.to_thread(drop_in_folder, where[0], where[1], {**state, **update})
