"""Agreement between reviewers on approve/reject judgements: Cohen's kappa for a pair, Fleiss' kappa for many.

A judgement is one reviewer's latest approve or reject on a sample (taken back ones left out), whether or not it
decided the sample: a reviewer who disagreed after the sample was decided still judged it. Kappa is None where
it is undefined (fewer than two samples judged twice, or every judgement the same label: chance agreement 1).
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

# The statistics live with the review rules, so that the dataset card of an export (runner) reports them too.
from graphs.ctd.rules import KAPPA_LABELS as LABELS
from graphs.ctd.rules import cohen_kappa as cohen_kappa
from graphs.ctd.rules import fleiss_kappa as fleiss_kappa
from tools.reviewers import Assignment


def judgements(history: Iterable[Mapping[str, Any]], since: int = 0, until: int | None = None) -> dict[str, str]:
    """Each reviewer's latest approve/reject in a sample's review history from entry `since` on, before entry
    `until` (the current attempt's by default: `graphs.ctd.review.attempt_start`), undone entries and
    adjudications (a settlement, not a rating) left out."""
    entries = list(history)
    undone = {h.get("undoes") for h in entries if h.get("decision") == "undo"}
    end = len(entries) if until is None else until
    out: dict[str, str] = {}
    for k, h in enumerate(entries):
        if since <= k < end and k not in undone and h.get("decision") in LABELS and not h.get("adjudicated"):
            out[str(h.get("reviewer") or "?")] = str(h["decision"])
    return out


def attempt_judgements(rec: Mapping[str, Any]) -> list[dict[str, str]]:
    """The judgements of each attempt of a sample, earliest first: an attempt ends with the rejection that sent it
    back to the Eraser (`sent_back` names those by reviewer and time), and each attempt was another image-text
    pair, so its judgements are a rating of their own; attempts nobody judged are left out."""
    marks = {(b.get("reviewer"), b.get("time")) for b in rec.get("sent_back") or []}
    history = list(rec.get("review_history") or [])
    ends = [
        k + 1
        for k, h in enumerate(history)
        if h.get("decision") == "reject" and (h.get("reviewer"), h.get("time")) in marks
    ]
    bounds = list(zip([0, *ends], [*ends, len(history)], strict=True))
    return [js for js in (judgements(history, a, b) for a, b in bounds) if js]


def adjudicators(history: Iterable[Mapping[str, Any]]) -> list[str]:
    """Who settled the sample's disagreements: the adjudicators of its settling decisions not undone."""
    entries = list(history)
    undone = {h.get("undoes") for h in entries if h.get("decision") == "undo"}
    return [
        str(h.get("reviewer") or "?")
        for k, h in enumerate(entries)
        if h.get("adjudicated") and h.get("decision") in LABELS and k not in undone
    ]


def _count(reviewers: dict[str, dict[str, int]], who: str) -> dict[str, int]:
    return reviewers.setdefault(who, {"judged": 0, "approve": 0, "reject": 0, "earlier": 0, "settled": 0})


def agreement(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per reviewer: judgements, approvals, rejections, how many of them were on an earlier attempt (one sent back
    to the Eraser), and disagreements they settled as adjudicator; per category: the items judged (each attempt of
    a sample is one item: another image-text pair), those judged by two or more, Fleiss' kappa, and Cohen's kappa
    of each reviewer pair on their shared items. `rows` carry `category`, `attempts` (a list of {reviewer:
    approve|reject} per attempt; else `judgements`, the current attempt's) and `adjudicators`."""
    reviewers: dict[str, dict[str, int]] = {}
    by_cat: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        attempts = r.get("attempts")
        if attempts is None:
            attempts = [r.get("judgements") or {}]
        for n, js in enumerate(attempts):
            for who, lab in js.items():
                c = _count(reviewers, who)
                c["judged"] += 1
                c[lab] += 1
                c["earlier"] += n < len(attempts) - 1
            if js:
                by_cat.setdefault(str(r.get("category") or "?"), []).append(js)
        for who in r.get("adjudicators") or []:
            _count(reviewers, who)["settled"] += 1
    categories = []
    for cat, items in sorted(by_cat.items()):
        # The pairs that share a sample, gathered from each sample's own reviewers: the cost follows the
        # judgements, not every pair of names (1,500 reviewers of one sample each took 22 s that way).
        shared: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for js in items:
            for a, b in combinations(sorted(js), 2):
                shared.setdefault((a, b), []).append((js[a], js[b]))
        pairs = [
            {"a": a, "b": b, "n": len(both), "kappa": cohen_kappa(both)} for (a, b), both in sorted(shared.items())
        ]
        categories.append(
            {
                "category": cat,
                "judged": len(items),
                "multi": sum(1 for js in items if len(js) >= 2),
                "fleiss": fleiss_kappa([list(js.values()) for js in items]),
                "pairs": pairs,
            }
        )
    return {"reviewers": sorted(reviewers.items()), "categories": categories}


def decision_seconds(history: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per reviewer, the seconds between the web app showing them the sample (`shown`, recorded with the
    judgement) and their judgement (`time`), for each approve/reject not undone that has both."""
    entries = list(history)
    undone = {h.get("undoes") for h in entries if h.get("decision") == "undo"}
    out: dict[str, list[float]] = {}
    for k, h in enumerate(entries):
        if k in undone or h.get("decision") not in LABELS or not h.get("shown"):
            continue
        try:
            seconds = (_time(h.get("time")) - _time(h.get("shown"))).total_seconds()
        except (TypeError, ValueError):
            continue  # a hand-edited time: left out rather than guessed
        if seconds >= 0:
            out.setdefault(str(h.get("reviewer") or "?"), []).append(seconds)
    return out


def _time(text: object) -> datetime.datetime:
    if not isinstance(text, str):
        raise TypeError(text)
    return datetime.datetime.fromisoformat(text[:40])


def reviewer_progress(rows: Iterable[Mapping[str, Any]], assignment: Assignment | None) -> list[dict[str, Any]]:
    """Per reviewer, by name: how many samples in review (pending, approved or rejected) the assignment gives
    them (None without an assignment) and how many of those they judged (current attempt), how many judgements
    the app timed, and the median seconds between showing a sample and judging it (None when none was timed).
    Rows carry `id`, `status`, `review_status`, `judgements` and `timings` ({reviewer: [seconds]})."""
    in_review = [
        r for r in rows if r.get("status") == "pending_review" or r.get("review_status") in ("approved", "rejected")
    ]
    names = set(assignment.reviewers if assignment is not None else ())
    seconds: dict[str, list[float]] = {}
    for r in in_review:
        names |= set(r.get("judgements") or {})
        for who, values in (r.get("timings") or {}).items():
            seconds.setdefault(who, []).extend(values)
    names |= set(seconds)
    out = []
    for who in sorted(names):
        mine = [r for r in in_review if assignment is not None and who in assignment.of(str(r.get("id")))]
        timed = seconds.get(who) or []
        out.append(
            {
                "reviewer": who,
                "assigned": len(mine) if assignment is not None and who in assignment.reviewers else None,
                "judged_assigned": sum(1 for r in mine if who in (r.get("judgements") or {})),
                "timed": len(timed),
                "median_s": statistics.median(timed) if timed else None,
            }
        )
    return out
