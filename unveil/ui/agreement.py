"""Agreement between reviewers on approve/reject judgements: Cohen's kappa for a pair, Fleiss' kappa for many.

A judgement is one reviewer's latest approve or reject on a sample (taken back ones left out), whether or not it
decided the sample: a reviewer who disagreed after the sample was decided still judged it. Kappa is None where
it is undefined (fewer than two samples judged twice, or every judgement the same label: chance agreement 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

# The statistics live with the review rules, so that the dataset card of an export (runner) reports them too.
from graphs.ctd.rules import KAPPA_LABELS as LABELS
from graphs.ctd.rules import cohen_kappa as cohen_kappa
from graphs.ctd.rules import fleiss_kappa as fleiss_kappa


def judgements(history: Iterable[Mapping[str, Any]], since: int = 0) -> dict[str, str]:
    """Each reviewer's latest approve/reject in a sample's review history from entry `since` on (the current
    attempt's: `graphs.ctd.review.attempt_start`), undone entries and adjudications (a settlement, not a rating)
    left out."""
    entries = list(history)
    undone = {h.get("undoes") for h in entries if h.get("decision") == "undo"}
    out: dict[str, str] = {}
    for k, h in enumerate(entries):
        if k >= since and k not in undone and h.get("decision") in LABELS and not h.get("adjudicated"):
            out[str(h.get("reviewer") or "?")] = str(h["decision"])
    return out


def agreement(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per reviewer: samples judged, approvals, rejections; per category: samples judged by two or more,
    Fleiss' kappa, and Cohen's kappa of each reviewer pair on their shared samples (`rows` carry `category`
    and `judgements` {reviewer: approve|reject})."""
    reviewers: dict[str, dict[str, int]] = {}
    by_cat: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        js = r.get("judgements") or {}
        for who, lab in js.items():
            c = reviewers.setdefault(who, {"judged": 0, "approve": 0, "reject": 0})
            c["judged"] += 1
            c[lab] += 1
        if js:
            by_cat.setdefault(str(r.get("category") or "?"), []).append(js)
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
