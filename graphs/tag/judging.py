"""The judging nodes of TAG: the synergy review of the root pair, and the judgement of each layer's new
cross-modal pairs (the user's set S first, then the optional screen, then the pair judge in bounded calls)."""

from __future__ import annotations

import asyncio

from langgraph.runtime import Runtime

from agents.gateway import Gateway, get_gateway
from agents.tag.judges import ConfirmedPair, judge_pairs, judge_roots, screen_pairs
from agents.usage import RunUsage, merge_usage
from graphs.tag.context import TagContext
from graphs.tag.findings import (
    ListedPairs,
    known_pairs,
    left_to_judge,
    listed_finding,
    listed_hits,
    make_finding,
)
from graphs.tag.state import TagState, image_part
from graphs.tag.tree import best_pair, new_pairs, path_of
from tools.image_store import get_image_store


async def synergy_review(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Judge the root pair without associations, on the entity-relation graphs; a toxic root pair has MTC 0. A root
    pair in the user's set S is toxic without the call."""
    ctx = runtime.context
    roots_pairs = [(v, t) for v in state["visual"] for t in state["textual"]]
    hits = listed_hits(known_pairs(ctx), roots_pairs)
    if hits:
        return {"pairs_judged": len(roots_pairs), "finding": listed_finding(state, hits, 0, ctx.toxic_pairs)}
    result = await judge_roots(
        get_gateway(),
        ctx.spec_for("pair_judge"),
        text=state["text"],
        visual=state["visual"],
        textual=state["textual"],
        graphs=state.get("entity_graphs"),
    )
    verdict = result.value
    update: TagState = {"usage": result.usage, "pairs_judged": len(state["visual"]) * len(state["textual"])}
    if verdict.toxic:
        by_v = {n["id"]: n for n in state["visual"]}
        by_t = {n["id"]: n for n in state["textual"]}
        # A verdict that names no valid root falls back to the first roots: the review found the pair toxic.
        v = by_v.get(verdict.visual_id or "", state["visual"][0])
        t = by_t.get(verdict.textual_id or "", state["textual"][0])
        update["finding"] = make_finding(v, t, state["visual"], state["textual"], verdict.category, verdict.reason, 0)
    return update


def _describe_pair(state: TagState, listed: ListedPairs, pid: str) -> dict[str, str]:
    """A pair as the screen and the judges see it: its id and the path of each side from its root."""
    v, t = listed[pid]
    return {
        "pair_id": pid,
        "image_side": " -> ".join(n["concept"] for n in path_of(state["visual"], v["id"])),
        "text_side": " -> ".join(n["concept"] for n in path_of(state["textual"], t["id"])),
    }


async def _screened_candidates(
    gateway: Gateway, ctx: TagContext, state: TagState, listed: ListedPairs, layer: int
) -> tuple[list[str], RunUsage | None]:
    """Step 1 of `judge_layer`: the pair ids to judge (all of the layer's, or the screen's short list when
    `screen_pairs` is on, at most `screen_limit`), with the screen's usage."""
    candidates = list(listed)
    if not ctx.screen_pairs:
        return candidates, None
    screened = await screen_pairs(
        gateway,
        ctx.spec_for("screen"),
        text=state["text"],
        pairs=[_describe_pair(state, listed, p) for p in candidates],
        limit=ctx.screen_limit,
        layer=layer,
    )
    kept = [p for p in dict.fromkeys(screened.value.suspicious_pair_ids) if p in listed][: ctx.screen_limit]
    return kept, screened.usage


async def _confirmed_pairs(
    gateway: Gateway,
    ctx: TagContext,
    state: TagState,
    listed: ListedPairs,
    candidates: list[str],
    usage: RunUsage | None,
) -> tuple[dict[str, ConfirmedPair], RunUsage | None]:
    """Step 2 of `judge_layer`: the candidates judged in calls of at most `max_pairs_per_call` pairs; the toxic
    verdicts by pair id (the first for a pair, and only for pairs its call was asked about), and `usage` with the
    calls' added."""
    chunks = [candidates[i : i + ctx.max_pairs_per_call] for i in range(0, len(candidates), ctx.max_pairs_per_call)]
    store = get_image_store(ctx.image_store or None)
    results = await asyncio.gather(
        *[
            judge_pairs(
                gateway,
                ctx.spec_for("pair_judge"),
                text=state["text"],
                roots=state["roots"],
                pairs=[_describe_pair(state, listed, p) for p in chunk],
                call_role="pair_judge" if i == 0 else f"pair_judge.{i}",
                graphs=state.get("entity_graphs"),
                image=image_part(state),
                store=store,
            )
            for i, chunk in enumerate(chunks)
        ]
    )
    confirmed: dict[str, ConfirmedPair] = {}
    for res, chunk in zip(results, chunks, strict=True):
        usage = merge_usage(usage, res.usage)
        for verdict in res.value.toxic_pairs:
            if verdict.pair_id in chunk and verdict.pair_id not in confirmed:
                confirmed[verdict.pair_id] = verdict
    return confirmed, usage


async def judge_layer(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Judge the cross-modal pairs that the newest layer made available: those in the user's set S are toxic
    without a call; the model judges the rest (optionally screened first) that could still be reported."""
    ctx = runtime.context
    layer = state["layer"]
    pairs = new_pairs(state["visual"], state["textual"], layer)
    if not pairs:
        return {}
    hits = listed_hits(known_pairs(ctx), pairs)
    listed = left_to_judge({f"{v['id']}|{t['id']}": (v, t) for v, t in pairs}, hits)
    candidates, usage, confirmed = await _judged(ctx, state, listed, layer)
    update: TagState = {"pairs_judged": state.get("pairs_judged", 0) + len(candidates) + len(hits)}
    if usage is not None:
        update["usage"] = usage
    found = [
        (listed[p], make_finding(*listed[p], state["visual"], state["textual"], c.category, c.reason, layer))
        for p, c in confirmed.items()
    ]
    if hits:
        best_listed = best_pair([p for p, _ in hits])
        assert best_listed is not None
        found.append((best_listed, listed_finding(state, hits, layer, ctx.toxic_pairs)))
    if found:
        best = best_pair([p for p, _ in found])
        update["finding"] = next(f for p, f in found if p == best)
    return update


async def _judged(
    ctx: TagContext, state: TagState, listed: ListedPairs, layer: int
) -> tuple[list[str], RunUsage | None, dict[str, ConfirmedPair]]:
    """(pair ids judged, usage, toxic verdicts by pair id) of the model's judgement of `listed`: no call when
    nothing is left to judge."""
    if not listed:
        return [], None, {}
    gateway = get_gateway()
    candidates, usage = await _screened_candidates(gateway, ctx, state, listed, layer)
    confirmed, usage = await _confirmed_pairs(gateway, ctx, state, listed, candidates, usage)
    return candidates, usage, confirmed
