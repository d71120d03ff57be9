"""Reviewer decisions on a CTD dataset folder: reading a decisions file (`read_decisions`) and applying decisions
under the folder lock (`apply_reviews`: who may decide, the label schema, the review policy), shared by
`unveil review`, the web app and Studio's review node (the folder layout: `runner.ctd_dataset`).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.ctd_dataset import append_records, dataset_lock, load_samples, record_problem, write_views_locked
from tools.errors import InputDataError, MissingFileError
from tools.jsonl_files import read_jsonl_records
from tools.review_policy import record_policy, resolve_policy
from tools.reviewers import REVIEWERS, ReviewerAuthError, load_reviewers, require_reviewers_file, reviewers_path

if TYPE_CHECKING:
    from graphs.ctd.rules import ReviewPolicy


def default_reviewer() -> str:
    """The reviewer name recorded when none is given: the login name."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"


def apply_reviews(
    dataset_dir: str | os.PathLike[str],
    decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]],
    *,
    reviewer: str | None = None,
    role: str = "local",
    min_reviewers: int | None = None,
    rule: str | None = None,
    records: Callable[[], Mapping[str, dict[str, Any]]] | None = None,
    views: bool = True,
    appended: list[tuple[str, int]] | None = None,
) -> dict[str, int]:
    """Apply reviewer decisions ({id: {decision: approve|reject|note|undo, note, reviewer?, undoes?}}, or {id: [one
    per reviewer]}) under the folder lock; `undo` takes back entry `undoes` of the record's `review_history`
    (see `graphs.ctd.review.undo`).

    Who decides: `reviewer` with `role` as the caller authenticated them against the folder's reviewers file
    (`tools.reviewers`: `reviewer` or `adjudicator`); the default `local` is single-user mode, allowed only while
    the folder has no reviewers file and the rule needs one reviewer (a `ReviewerAuthError` otherwise), where a
    decision's own `reviewer` field is a label.

    Several reviewers (the TAG paper's unanimous confirmation, §4.1): every approve/reject on a pending sample joins
    its `review.reviews` list (reviewer, note, time), and the sample is accepted or rejected once the reviews decide
    under the folder's review policy (`tools.review_policy`: `min_reviewers`, `rule`, see
    `graphs.ctd.rules.ReviewPolicy`); until then it stays pending. `min_reviewers` and `rule` given here are what
    the caller asks for: a value the folder does not store yet is stored (set once, for every later call), one
    that differs from the stored value is a `ReviewPolicyError` naming the stored policy, before anything is
    applied; None uses the folder's.
    Every decision also joins the record's `review_history` and `DIR/decisions.jsonl`. A decision on a sample that
    is already decided is not applied but kept in the history (`applied: false`), so it is never lost; a `note`
    decision adds a note without deciding. Updated records are appended to `samples.jsonl` (the last record of an
    id wins, as everywhere), so a concurrent `unveil generate` appending its own records loses nothing.
    Returns how many decisions approved, rejected or sent back a sample (`sent_back`: a rejection that sends it
    to the Eraser, not counted as `rejected`), left it pending (more reviewers needed), were notes, were kept as
    conflicts, repeated the reviewer's own judgement (`already`, not logged), undid an entry, were
    refused (an undo of another reviewer's entry), and were skipped (unknown id, a record that `record_problem`
    refuses, or empty). `records` reads the folder's records by id under the lock (default `load_samples`; the
    web app passes its index); `views=False` leaves rewriting `dataset.jsonl` and `review_queue.jsonl` to the
    caller; `appended` receives (id, history position) of each entry this call added, so a caller can offer to
    undo exactly its own entry."""
    from graphs.ctd.rules import ReviewPolicy

    root = Path(dataset_dir)
    stored, new = resolve_policy(root, min_reviewers=min_reviewers, rule=rule)
    policy = ReviewPolicy(min_reviewers=stored.min_reviewers, rule=stored.rule)  # type: ignore[arg-type]
    check_local_mode(root, role, stored.min_reviewers)
    labels = check_labels(root, decisions)
    counts = dict.fromkeys(
        (
            "approved",
            "rejected",
            "sent_back",
            "pending",
            "noted",
            "conflicts",
            "undone",
            "already",
            "refused",
            "skipped",
        ),
        0,
    )
    with dataset_lock(root):
        if new:
            record_policy(root, new)  # the first call that asks for a value sets it for the folder
        by_id = records() if records is not None else load_samples(root)
        actor = (reviewer or default_reviewer(), role)
        changed, log = _decide(by_id, decisions, policy, actor, counts, appended, labels)
        if changed:
            append_records(root, [{**r, "id": sid} for sid, r in changed.items()], log)
        if views:
            write_views_locked(root)
    return counts


def check_local_mode(root: Path, role: str, min_reviewers: int) -> None:
    """Refuse single-user decisions (role `local`) on a folder with a reviewers file, or under a rule of two or
    more reviewers (see `tools.reviewers`)."""
    if role != "local":
        return
    people = load_reviewers(reviewers_path(root))
    if people is not None:
        raise ReviewerAuthError(
            f"{root}: this folder has a reviewers file ({REVIEWERS}): each decision needs a reviewer's token "
            f"(UNVEIL_REVIEWER_TOKEN for `unveil review`, sign-in for `unveil ui`)"
        )
    require_reviewers_file(min_reviewers, people, str(root))


def check_labels(
    root: Path, decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Every answer's labels under the folder's label schema (`graphs.ctd.labels`), by (id, position), checked
    before anything is applied: one answer that does not meet the schema (a required rationale missing, a
    category outside the vocabulary, a rating out of bounds) stops them all with a `LabelSchemaError` naming
    its sample."""
    from graphs.ctd.labels import LabelSchemaError, check_answer, load_schema

    schema = load_schema(root)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for sid, answers in decisions.items():
        for i, answer in enumerate(answers if isinstance(answers, list) else [answers]):
            try:
                out[(sid, i)] = check_answer(answer or {}, schema)
            except LabelSchemaError as exc:
                raise LabelSchemaError(f"sample {sid!r}: {exc}") from None
    return out


def _decide(
    by_id: Mapping[str, dict[str, Any]],
    decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]],
    policy: ReviewPolicy,
    actor: tuple[str, str],
    counts: dict[str, int],
    appended: list[tuple[str, int]] | None,
    labels: dict[tuple[str, int], dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Apply each decision to its record (in place) as `actor` (name, role) with its checked labels, counting
    each outcome in `counts`; returns the records that changed, by id, and the decision log entries to append."""
    # The one way a decision changes a record, shared with the CTD graph's review node (Studio).
    from graphs.ctd.review import apply_decision, now_iso

    changed: dict[str, dict[str, Any]] = {}
    log: list[dict[str, Any]] = []
    for sid, answers in decisions.items():
        for i, answer in enumerate(answers if isinstance(answers, list) else [answers]):
            rec = by_id.get(sid)
            if rec is None or record_problem(rec):
                counts["skipped"] += 1
                continue
            done, entry = apply_decision(
                rec, answer or {}, policy, reviewer=actor[0], role=actor[1], now=now_iso(), labels=labels.get((sid, i))
            )
            sent_back = done == "rejected" and rec.get("status") == "sent_back"  # a rejection that sends it back
            counts["sent_back" if sent_back else done] += 1
            if entry is not None:
                changed[sid] = rec
                log.append({"id": sid, **entry})
                if appended is not None:
                    appended.append((sid, len(rec["review_history"]) - 1))
    return changed, log


def read_decisions(path: str | os.PathLike[str]) -> dict[str, dict[str, Any] | list[dict[str, Any]]]:
    """Reviewer decisions from a JSONL file (the review queue with `decision`, `note` and `reviewer` filled in), by
    sample id; several lines for one id (several reviewers) become a list, in file order."""
    out: dict[str, dict[str, Any] | list[dict[str, Any]]] = {}
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"decisions {str(path)!r}: file not found")
    for lineno, rec in read_jsonl_records(p):
        decision = _decision_line(rec, f"{path} line {lineno}")
        sid = str(rec["id"])
        if sid not in out:
            out[sid] = decision
        else:
            earlier = out[sid]
            out[sid] = [*(earlier if isinstance(earlier, list) else [earlier]), decision]
    return out


def _decision_line(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """One line of a decisions file checked (an `InputDataError` naming `where` and the field) and reduced to the
    decision `apply_reviews` takes."""
    from graphs.ctd.review import parse_review  # the one reader of review answers, shared with the interrupt path

    if "id" not in rec:
        raise InputDataError(f"{where}: expected an object with an id")
    if isinstance(rec["id"], bool) or not isinstance(rec["id"], (str, int)) or not str(rec["id"]).strip():
        raise InputDataError(f"{where}: id: expected a sample id (a string), got {rec['id']!r}")
    for name in ("decision", "note", "reviewer"):
        if rec.get(name) is not None and not isinstance(rec[name], str):
            raise InputDataError(f"{where}: {name}: expected a string, got {type(rec[name]).__name__}")
    word = (rec.get("decision") or "").strip().lower()
    # An empty decision is a queue line not decided yet: skipped when applied.
    if word and word not in ("note", "undo"):
        try:
            parse_review(rec)
        except ValueError:
            raise InputDataError(
                f"{where}: decision: {rec['decision']!r} is not approve, reject, note or undo"
            ) from None
    decision: dict[str, Any] = {"decision": rec.get("decision") or "", "note": rec.get("note") or ""}
    if "undoes" in rec:
        decision["undoes"] = rec["undoes"]
    for name in ("category", "ratings", "send_back"):  # labels of the folder's schema, checked when applied
        if rec.get(name) not in (None, "", False):
            decision[name] = rec[name]
    if rec.get("reviewer"):
        decision["reviewer"] = str(rec["reviewer"])
    return decision
