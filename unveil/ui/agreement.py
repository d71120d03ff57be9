"""Agreement between reviewers on approve/reject judgements: Cohen's kappa for a pair, Fleiss' kappa for many.

A judgement is one reviewer's latest approve or reject on a sample (taken back ones left out), whether or not it
decided the sample: a reviewer who disagreed after the sample was decided still judged it. Kappa is None where
it is undefined (fewer than two samples judged twice, or every judgement the same label: chance agreement 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

LABELS = ("approve", "reject")


def judgements(history: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each reviewer's latest approve/reject in a sample's review history, undone entries left out."""
    entries = list(history)
    undone = {h.get("undoes") for h in entries if h.get("decision") == "undo"}
    out: dict[str, str] = {}
    for k, h in enumerate(entries):
        if k not in undone and h.get("decision") in LABELS:
            out[str(h.get("reviewer") or "?")] = str(h["decision"])
    return out


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels on the same samples."""
    n = len(pairs)
    if n < 2:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    chance = sum(
        (sum(1 for a, _ in pairs if a == lab) / n) * (sum(1 for _, b in pairs if b == lab) / n) for lab in LABELS
    )
    return None if chance >= 1 else (observed - chance) / (1 - chance)


def fleiss_kappa(items: list[list[str]]) -> float | None:
    """Fleiss' kappa over samples each judged by two or more raters (the number of raters may vary by sample:
    each sample's agreement is over its own rater pairs)."""
    rated = [labels for labels in items if len(labels) >= 2]
    if len(rated) < 2:
        return None
    total = sum(len(x) for x in rated)
    p = {lab: sum(x.count(lab) for x in rated) / total for lab in LABELS}
    per_item = [(sum(x.count(lab) ** 2 for lab in LABELS) - len(x)) / (len(x) * (len(x) - 1)) for x in rated]
    observed = sum(per_item) / len(rated)
    chance = sum(v * v for v in p.values())
    return None if chance >= 1 else (observed - chance) / (1 - chance)


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
