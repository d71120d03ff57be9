"""Human review of CTD samples: the one reader of reviewers' answers, the one way a decision changes a sample
record, and the review folder that Studio and the web app share.

Every reviewer goes through `apply_decision`: the web app and `unveil review` (through
`runner.ctd_reviews.apply_reviews`) and the CTD graph's human-review node when the server names a review folder
(`UNVEIL_REVIEW_DIR`, see `tools.review_log`). So a decision taken in Studio shows in the web app and one taken in
the web app resolves the Studio run: both read the sample's record and append the updated record and a
`decisions.jsonl` line under the folder's one lock, and an undo counts the same in both.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any, Literal, TypedDict

from graphs.ctd.review_tokens import CHECKED, checked_reviewer
from graphs.ctd.rules import ReviewPolicy, review_outcome
from tools.review_log import append_records, read_records, review_lock
from tools.reviewers import ReviewerAuthError, authenticate

LOCAL = "local"  # the role of the one reviewer of a folder without a reviewers file (single-user mode)


def parse_review(answer: object) -> dict[str, str]:
    """A reviewer's answer (a dict, or a bare 'approve'/'reject' string) as {status, note, reviewer}."""
    if isinstance(answer, str):
        answer = {"decision": answer}
    if not isinstance(answer, dict):
        raise ValueError(f"review answer: expected {{'decision': 'approve'|'reject', 'note': ...}}, got {answer!r}")
    decision = str(answer.get("decision", "")).strip().lower()
    if decision in ("approve", "approved", "accept", "yes"):
        status = "approved"
    elif decision in ("reject", "rejected", "no"):
        status = "rejected"
    else:
        raise ValueError(f"review answer: decision must be 'approve' or 'reject', got {answer.get('decision')!r}")
    reviewer = str(answer.get("reviewer") or "")[:200]
    return {"status": status, "note": str(answer.get("note", ""))[:2000], "reviewer": reviewer}


def parse_reviews(answer: object) -> list[dict[str, str]]:
    """One resume value as a list of reviews: a list of answers (several reviewers at once) or a single one."""
    return [parse_review(a) for a in answer] if isinstance(answer, list) else [parse_review(answer)]


def authenticated_answers(
    answer: object, people: dict[str, dict[str, Any]] | None, *, default_name: str
) -> list[tuple[dict[str, Any], str, str]]:
    """One Studio resume value (an answer or a list of them) as (answer, reviewer, role) triples. With a reviewers
    file (`people`) each answer must carry its reviewer's `token`, and the name is the file's (a `reviewer` field
    is ignored); without one (single-user mode) the answer's `reviewer` is a label, else `default_name`, role
    `local`. The token never leaves this function. Under the graph server the served app checked the token as
    the request arrived and left the reviewer in its place (`graphs.ctd.review_tokens`). A bad decision or token
    is a ValueError naming it."""
    answers = [
        a if isinstance(a, dict) else {"decision": a} for a in (answer if isinstance(answer, list) else [answer])
    ]
    parse_reviews(answers)
    out: list[tuple[dict[str, Any], str, str]] = []
    for a in answers:
        # `shown` is the web app's own record of when it showed the sample: a Studio answer cannot claim one.
        clean = {k: v for k, v in a.items() if k not in ("token", "reviewer", CHECKED, "shown")}
        checked = checked_reviewer(a, people)
        if checked is not None:
            out.append((clean, *checked))
            continue
        if people is None:
            out.append((clean, str(a.get("reviewer") or default_name)[:200], LOCAL))
            continue
        try:
            token = a.get("token")
            who = authenticate(people, token if isinstance(token, str) else None)
        except ReviewerAuthError as exc:
            raise ValueError(f'review answer: {exc}; add "token": "..." (from `unveil reviewers add`)') from exc
        out.append((clean, who.name, who.role))
    return out


def combined_review(reviews: list[dict[str, str]], policy: ReviewPolicy) -> dict[str, Any]:
    """The sample's `review` record: the outcome under `policy`, the last note, and every reviewer's decision."""
    outcome = review_outcome(reviews, policy)
    return {
        "status": outcome,
        "note": reviews[-1]["note"] if reviews else "",
        "reviews": reviews,
        "rule": policy.rule,
        "min_reviewers": policy.min_reviewers,
    }


def now_iso() -> str:
    """The time recorded with a decision (UTC, to the second)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _is_time(text: str) -> bool:
    """Whether `text` is an ISO time with its zone, as `now_iso` writes it."""
    try:
        return datetime.datetime.fromisoformat(text[:40]).tzinfo is not None
    except ValueError:
        return False


def attempt_start(rec: dict[str, Any]) -> int:
    """Where the judgements of the sample's current attempt begin in its review history: after the rejection that
    sent the attempt before it back to the Eraser (the last of `sent_back`, the send backs its revisions answered,
    found by reviewer and time), else 0. An earlier attempt's judgements judged another pair."""
    marks = {(b.get("reviewer"), b.get("time")) for b in rec.get("sent_back") or []}
    history = rec.get("review_history") or []
    ends = [
        k
        for k, h in enumerate(history)
        if h.get("decision") == "reject" and (h.get("reviewer"), h.get("time")) in marks
    ]
    return ends[-1] + 1 if ends else 0


def judged(history: list[dict[str, Any]], since: int = 0) -> dict[str, str]:
    """Each reviewer's latest approve/reject in a review history from entry `since` on (the current attempt's:
    `attempt_start`), undone entries and adjudications left out; judgements kept as conflicts count: the reviewer
    did judge."""
    undone = {h.get("undoes") for h in history if h.get("decision") == "undo"}
    out: dict[str, str] = {}
    for k, h in enumerate(history):
        if k >= since and k not in undone and h.get("decision") in ("approve", "reject") and not h.get("adjudicated"):
            out[str(h.get("reviewer") or "?")] = str(h["decision"])
    return out


def disagreement(rec: dict[str, Any]) -> bool:
    """Whether the reviewers of a sample disagree (one approves, another rejects) and no adjudicator settled it."""
    if (rec.get("review") or {}).get("adjudicated"):
        return False
    return len(set(judged(rec.get("review_history") or [], attempt_start(rec)).values())) > 1


def _settle(rec: dict[str, Any], answer: dict[str, Any], entry: dict[str, Any], category: str | None) -> str:
    """An adjudicator's approve/reject on a sample whose reviewers disagree: it decides the sample whatever the
    rule says, and is kept in the history and the review as an adjudication (the reviewers' own reviews stay);
    the adjudicator's category correction, if any, is the one the record takes."""
    status = parse_review(answer)["status"]
    rec["status"] = "accepted" if status == "approved" else "rejected"
    earlier = {k: v for k, v in (rec.get("review") or {}).items() if k != "category"}
    rec["review"] = {
        **earlier,
        "status": status,
        "note": entry["note"],
        "reviewer": entry["reviewer"],
        "time": entry["time"],
        "adjudicated": True,
        **({"category": category} if category else {}),
    }
    entry.update(decision="approve" if status == "approved" else "reject", adjudicated=True)
    return status


def _live_review(rec: dict[str, Any], who: str) -> dict[str, Any] | None:
    """`who`'s review that counts now in the record's `review.reviews` (undone ones have left it), or None."""
    mine = [r for r in (rec.get("review") or {}).get("reviews") or [] if r.get("reviewer") == who]
    return mine[-1] if mine else None


def apply_decision(
    rec: dict[str, Any],
    answer: dict[str, Any],
    policy: ReviewPolicy,
    *,
    reviewer: str,
    now: str,
    role: str = "reviewer",
    labels: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any] | None]:
    """Apply one decision ({decision: approve|reject|note|undo, note, reviewer?, undoes?, shown?}) to a sample record in
    place; returns what it did (approved, rejected, pending, noted, undone, conflicts, already, refused or
    skipped) and the history entry it added (None when nothing was added). The caller holds the folder lock and
    appends the record and the entry.

    `reviewer` is who decides, as the caller authenticated them, and `role` their role (`reviewer`,
    `adjudicator`, or `local` for the one user of a folder without a reviewers file, whose answers may carry a
    `reviewer` label). An approve/reject on a pending sample joins its `review.reviews` list, and the sample is
    accepted or rejected once the reviews decide under `policy`; the same judgement again from the same reviewer
    is `already` (nothing logged); one on a decided sample is kept in the history as a conflict (`applied:
    false`), never lost; `undo` takes back entry `undoes` of the record's `review_history` (see `undo`).
    `labels` are the answer's labels as `graphs.ctd.labels.check_answer` accepted them (a corrected `category`,
    `ratings`): kept with the review and its history entry; the corrections change the record's `category` only
    once the sample is decided (`settle_category`). An approve/reject's `shown` (when the web app showed the
    sample to the reviewer, an ISO time) joins its history entry, for the time per sample. An adjudicator's
    approve/reject on a
    sample whose reviewers disagree settles it (see `_settle`)."""
    decision = str(answer.get("decision", "")).strip().lower()
    if not decision:
        return "skipped", None
    who = str((answer.get("reviewer") if role == LOCAL else None) or reviewer)[:200]
    note = str(answer.get("note", ""))[:2000]
    entry: dict[str, Any] = {"decision": decision, "note": note, "reviewer": who, "time": now, **(labels or {})}
    shown = answer.get("shown")
    if decision in ("approve", "reject") and isinstance(shown, str) and _is_time(shown):
        entry["shown"] = shown  # when the app showed the sample to this reviewer: time per sample
    if entry.get("send_back") is False:
        del entry["send_back"]
    if decision == "note":
        done = "noted"
    elif decision == "undo":
        done = undo(rec, answer.get("undoes"), policy, entry, role=role)
        if done != "undone":
            return done, None  # nothing to undo there, undone already (a double click), or not theirs
    elif role == "adjudicator" and disagreement(rec):
        done = _settle(rec, answer, entry, (labels or {}).get("category"))
    else:
        done = _judge(rec, {**parse_review(answer), "reviewer": who, "time": now, **(labels or {})}, policy, entry)
        if done in ("already", "skipped"):
            return done, None
    if (labels or {}).get("send_back") and done == "rejected":
        rec["status"] = "sent_back"  # `unveil generate` on the folder gives the Eraser another attempt
        rec["send_back"] = {"note": note, "reviewer": who, "time": now, "round": rec.get("rounds")}
    settle_category(rec)  # a correction counts once the sample is decided, never while it waits
    rec["review_history"] = [*rec.get("review_history", []), entry]
    return done, entry


def settle_category(rec: dict[str, Any]) -> None:
    """Set the record's `category` from the corrections of the reviews that decided it (the adjudicator's when
    one settled it, else the latest reviewer's correction), in place; while the sample waits, or when no review
    corrected it, the generated category stands (kept as `category_generated` once a correction changed it). A
    pending reviewer's correction stays in their review until the sample is decided, so it never changes the
    record before the others agree."""
    review = rec.get("review") or {}
    decided = review.get("status") in ("approved", "rejected") and rec.get("status") != "pending_review"
    corrections = [str(r["category"]) for r in review.get("reviews") or [] if r.get("category")]
    if review.get("adjudicated") and review.get("category"):
        corrections.append(str(review["category"]))
    generated = rec.get("category_generated", rec.get("category"))
    wanted = corrections[-1] if decided and corrections else generated
    if wanted != rec.get("category"):
        rec.setdefault("category_generated", rec.get("category"))
        rec["category"] = wanted


def _judge(rec: dict[str, Any], one: dict[str, Any], policy: ReviewPolicy, entry: dict[str, Any]) -> str:
    """An approve/reject (`one`, a review) on a record: `already` when it repeats the reviewer's own judgement;
    on a pending sample it joins `review.reviews` and the policy decides (approved, rejected or pending); on a
    decided one it is kept as a conflict (`applied: false`), or `skipped` as the same decision applied again."""
    who, now = one["reviewer"], one["time"]
    mine = _live_review(rec, who)
    if mine is not None and mine.get("status") == one["status"]:
        return "already"  # the same judgement again (a double click, a second Studio resume)
    if rec.get("status") == "pending_review":
        review = combined_review([*(rec.get("review") or {}).get("reviews", []), one], policy)
        rec["review"] = {**review, "reviewer": who, "time": now}
        if review["status"] != "pending":
            rec["status"] = "accepted" if review["status"] == "approved" else "rejected"
        entry["decision"] = "approve" if one["status"] == "approved" else "reject"
        return str(review["status"])
    current = rec.get("review") or {}
    same = current.get("status") == one["status"] and current.get("note", "") == entry["note"]
    if same and str(current.get("reviewer") or who) == who:
        return "skipped"  # the same decision applied again (a rerun of one decisions file)
    entry.update(applied=False, conflict_with={k: current.get(k) for k in ("status", "reviewer", "time")})
    return "conflicts"


def undo(rec: dict[str, Any], k: object, policy: ReviewPolicy, entry: dict[str, Any], *, role: str = "reviewer") -> str:
    """Undo entry `k` of a record's review history (an applied approve/reject, or a note) in place: the undone
    review leaves `review.reviews` and the others decide again under the record's own policy (none left: the
    sample waits for review again). The history only grows: `entry` (the undo) names `k`. Returns `undone`;
    `skipped` when `k` is no such entry, is an undo, was not applied, or is undone already; `refused` when the
    entry is another reviewer's and `role` is not `adjudicator` (an adjudicator's undo of someone else's entry is
    marked `override`; the single user, role `local`, may undo any entry)."""
    history = rec.get("review_history") or []
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(history):
        return "skipped"
    target = history[k]
    undone = {h.get("undoes") for h in history if h.get("decision") == "undo"}
    if k in undone or target.get("decision") not in ("approve", "reject", "note") or target.get("applied") is False:
        return "skipped"
    if role != LOCAL and target.get("reviewer") != entry["reviewer"]:
        if role != "adjudicator":
            return "refused"
        entry["override"] = True
    entry["undoes"] = k
    if target["decision"] == "note":
        return "undone"
    review = rec.get("review") or {}
    mine = (target.get("reviewer"), target.get("time"))
    kept = [r for r in review.get("reviews") or [] if (r.get("reviewer"), r.get("time")) != mine]
    own = ReviewPolicy(
        min_reviewers=int(review.get("min_reviewers") or policy.min_reviewers), rule=review.get("rule") or policy.rule
    )
    if review.get("adjudicated") and not target.get("adjudicated"):
        rec["review"] = {**review, "reviews": kept}  # the adjudicator's decision still settles the sample
        return "undone"
    if kept:
        again = combined_review(kept, own)
        rec["review"] = {**again, "reviewer": kept[-1].get("reviewer"), "time": kept[-1].get("time")}
    else:
        again = {"status": "pending"}
        rec["review"] = {"status": "pending", "reviews": []}
    rec["status"] = {"approved": "accepted", "rejected": "rejected"}.get(again["status"], "pending_review")
    rec.pop("send_back", None)  # an undone rejection sends nothing back
    return "undone"


def sample_record(out: dict[str, Any], *, dataset_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSONL record of one finished scene (the graph's output, with the image path relative to the folder)."""
    root = Path(dataset_dir).resolve()
    image_path = out.get("image_path")
    rel = None
    if image_path:
        try:
            rel = str(Path(image_path).resolve().relative_to(root))
        except ValueError:
            rel = str(image_path)  # an image store outside the folder: keep the absolute path
    usage = out.get("usage") or {}
    return {
        "status": out.get("status", "failed"),
        "category": out.get("category"),
        "subcategory": out.get("subcategory"),
        "text": out.get("text"),
        "image": rel if out.get("status") != "dropped" else None,
        "image_sha256": out.get("image_id") if out.get("status") != "dropped" else None,
        "label": 1,
        "image_description": out.get("t2i_prompt"),
        "t2i_prompt": out.get("t2i_prompt"),
        "erasure_reason": out.get("erasure_reason"),
        "erasure": out.get("erasure"),
        "scene": out.get("scene"),
        "votes": out.get("votes", []),
        "decision": out.get("decision"),
        "modality": out.get("modality"),
        "feedback_history": out.get("feedback_history", []),
        "rounds": out.get("rounds", 0),
        "drop_reason": out.get("drop_reason"),
        "review": out.get("review") or {"status": "none"},
        "models": out.get("models"),
        "seeds": out.get("seeds", []),
        "web_search": out.get("web_search", False),
        "cost_usd": (usage.get("total") or {}).get("cost_usd", 0.0),
        "usage": usage,
    }


# --- the shared review folder, as the CTD graph's review node uses it (blocking: run these in a thread) ---


class FolderOutcome(TypedDict):
    """A review decided in the folder: the sample's status and its `review` record."""

    status: Literal["accepted", "rejected"]
    review: dict[str, Any]


def folder_outcome(rec: dict[str, Any] | None) -> FolderOutcome | None:
    """The node's result when the folder's record of the sample is decided (accepted or rejected by reviewers),
    else None (still pending, or no record)."""
    if rec is None or rec.get("status") not in ("accepted", "rejected"):
        return None
    review = rec.get("review") or {}
    if review.get("status") not in ("approved", "rejected"):
        return None
    return {"status": rec["status"], "review": review}


def queue_in_folder(folder: Path, sample_id: str, out: dict[str, Any]) -> dict[str, Any]:
    """The folder's record of a sample, first appending it as pending review (as `unveil generate --review
    queue` writes it) when the folder has none; under the folder lock."""
    with review_lock(folder):
        rec = read_records(folder).get(sample_id)
        if rec is None:
            rec = {
                "id": sample_id,
                **sample_record(
                    {**out, "status": "pending_review", "review": {"status": "pending"}}, dataset_dir=folder
                ),
            }
            append_records(folder, [rec])
        return rec


def decide_in_folder(
    folder: Path,
    sample_id: str,
    answers: list[tuple[dict[str, Any], str, str]],
    policy: ReviewPolicy,
    *,
    answer_key: str,
) -> tuple[dict[str, Any] | None, list[str]]:
    """Apply a Studio resume's answers (each with the reviewer it was authenticated as and their role) to the
    folder's record under the folder lock, appending the record and the decision lines as the web app does;
    returns the record after them (None when the folder has none) and what each answer did.

    `answer_key` names this answer within the run; an answer whose key the history holds already (a node re-run
    replaying an earlier answer) is not applied twice."""
    with review_lock(folder):
        rec = read_records(folder).get(sample_id)
        if rec is None:
            return None, []
        if any(h.get("studio_answer") == answer_key for h in rec.get("review_history") or []):
            return rec, []
        log, done = [], []
        for answer, reviewer, role in answers:
            back = {"send_back": True} if answer.get("send_back") else None  # as the web app's send back
            what, entry = apply_decision(rec, answer, policy, reviewer=reviewer, now=now_iso(), role=role, labels=back)
            done.append(what)
            if entry is not None:
                entry["studio_answer"] = answer_key
                log.append({"id": sample_id, **entry})
        if log:
            append_records(folder, [{**rec, "id": sample_id}], log)
        return rec, done
