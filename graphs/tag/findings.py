"""The reported toxic pair of a TAG run: the `Finding` record of a pair with both paths, the user's set S of known
toxic pairs (which pairs it lists, which are left for a model to judge), and the MTC score of a finding.

No model calls: the judging nodes (`graphs.tag.judging`) and the explainer node use these rules.
"""

from __future__ import annotations

from agents.tag.toxic_pairs import KnownPair, load_toxic_pairs, match
from graphs.tag.context import TagContext
from graphs.tag.state import Finding, TagState
from graphs.tag.tree import Node, best_pair, joint_probability, mtc_score, path_of

# A layer's new pairs by pair id: the id names both nodes ("v1.0|t0.2"), so judges and script writers see which
# concepts they join.
ListedPairs = dict[str, tuple[Node, Node]]

# The pairs of a layer that S lists, each with its listed entry.
ListedHits = list[tuple[tuple[Node, Node], KnownPair]]


def make_finding(
    v: Node,
    t: Node,
    visual: list[Node],
    textual: list[Node],
    category: str,
    reason: str,
    layer: int,
    source: str = "model",
) -> Finding:
    """The record of the toxic pair (v, t) found at `layer`: both nodes with their paths from the roots, the joint
    path probability, the category and reason, and the source (`model` or `toxic_pairs`)."""
    vp, tp = path_of(visual, v["id"]), path_of(textual, t["id"])
    return {
        "layer": layer,
        "category": category,
        "reason": reason,
        "source": source,
        "joint_prob": joint_probability(v, t),
        "visual": {
            "id": v["id"],
            "concept": v["concept"],
            "path_prob": v["path_prob"],
            "path": [{"concept": n["concept"], "association": n["association"], "prob": n["prob"]} for n in vp],
        },
        "textual": {
            "id": t["id"],
            "concept": t["concept"],
            "path_prob": t["path_prob"],
            "path": [{"concept": n["concept"], "association": n["association"], "prob": n["prob"]} for n in tp],
        },
    }


def known_pairs(ctx: TagContext) -> dict[tuple[str, str], KnownPair]:
    """The user's toxic-pair set S of the run (empty without `toxic_pairs`)."""
    return load_toxic_pairs(ctx.toxic_pairs) if ctx.toxic_pairs else {}


def listed_hits(known: dict[tuple[str, str], KnownPair], pairs: list[tuple[Node, Node]]) -> ListedHits:
    """The pairs that are in S, with their listed entry."""
    hits = [(p, match(known, p[0]["concept"], p[1]["concept"])) for p in pairs] if known else []
    return [(p, k) for p, k in hits if k is not None]


def listed_finding(state: TagState, hits: ListedHits, layer: int, path: str) -> Finding:
    """The finding of the best pair (`best_pair`) among those S lists."""
    best = best_pair([p for p, _ in hits])
    assert best is not None
    known = next(k for p, k in hits if p == best)
    reason = known.reason or f"listed as a toxic pair in {path}"
    return make_finding(
        best[0], best[1], state["visual"], state["textual"], known.category, reason, layer, source="toxic_pairs"
    )


def left_to_judge(listed: ListedPairs, hits: ListedHits) -> ListedPairs:
    """The pairs a model must still judge once S has spoken: none of those S lists, and only those whose joint
    probability reaches the best listed pair's, since no other could be reported (`best_pair`)."""
    if not hits:
        return listed
    listed_ids = {f"{v['id']}|{t['id']}" for (v, t), _ in hits}
    floor = max(joint_probability(*p) for p, _ in hits)
    return {pid: p for pid, p in listed.items() if pid not in listed_ids and joint_probability(*p) >= floor}


def mtc_of(finding: Finding) -> float:
    """The MTC score c of a finding (§3.3 Step 3): 0 for a toxic root pair, else 1 - joint path probability."""
    return 0.0 if finding["layer"] == 0 else mtc_score(finding["joint_prob"])
