"""TAG detection (TA-CTD): root concepts -> synergy review -> [expand both trees -> judge new pairs]* -> explain.

Expansion and judging interleave layer by layer, so a toxic pair found at layer L ends the search there (the
early exit) and no deeper layer is ever expanded. Among toxic pairs of that layer the one with the highest joint
path probability is reported, with MTC = 1 - p(root_x -> v_x) * p(root_t -> v_t); MTC is 0 for a toxic root pair and
1 when nothing is found within `l_max` layers. State holds concepts, ids and paths only, never image bytes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

# typing_extensions' TypedDict: pydantic (used for Studio's schema export) rejects typing's on Python < 3.12.
from typing_extensions import TypedDict

from agents.content import ImagePart
from agents.gateway import Gateway, get_gateway
from agents.tag.expander import MAX_PARENTS_PER_CALL, expand_layer
from agents.tag.explainer import explain
from agents.tag.judges import ConfirmedPair, judge_pairs, judge_roots, screen_pairs
from agents.tag.roots import RootsMode, extract_graph, extract_roots, graph_of_roots, normalize_graph, roots_of
from agents.tag.toxic_pairs import KnownPair, load_toxic_pairs, match
from agents.tag.types import ASSOCIATION_TYPES
from agents.usage import RunUsage, merge_usage
from graphs.context import ModelsContext, strict_init
from graphs.ingest import ingest
from graphs.tag_tree import (
    READING_HELP,
    Node,
    Prune,
    _assign_entries,
    best_pair,
    grow_layer,
    joint_probability,
    make_roots,
    mtc_score,
    new_pairs,
    path_of,
)
from tools.image_store import get_image_store


@strict_init
@dataclass(kw_only=True)
class TagContext(ModelsContext):
    """Settings of a TAG detection run."""

    root_extractor_model: str = field(default="", metadata={"description": "Model for root concepts (empty: model)."})
    expander_model: str = field(default="", metadata={"description": "Model that expands the trees (empty: model)."})
    pair_judge_model: str = field(
        default="", metadata={"description": "Model for the synergy review and pair judging."}
    )
    screen_model: str = field(default="", metadata={"description": "Model for the optional suspicious-pair screen."})
    explainer_model: str = field(default="", metadata={"description": "Model that writes the explanation."})
    l_max: int = field(default=4, metadata={"description": "Layers per tree, counting the roots.", "min": 1})
    k_max: int = field(
        default=6,
        metadata={"description": "Children kept per node (prune=per_node) or nodes per layer (per_layer).", "min": 1},
    )
    prune: Prune = field(
        default="per_node",
        metadata={"description": READING_HELP["prune"]},
    )
    roots_mode: RootsMode = field(
        default="separate",
        metadata={"description": READING_HELP["roots_mode"]},
    )
    children_per_parent: int = field(default=3, metadata={"description": "Children asked for per parent.", "min": 1})
    association_types: list[str] = field(
        default_factory=lambda: list(ASSOCIATION_TYPES),
        metadata={"description": "Allowed association types.", "min_items": 1, "item_choices": ASSOCIATION_TYPES},
    )
    screen_pairs: bool = field(
        default=False, metadata={"description": "Screen pairs for suspicious ones before judging."}
    )
    screen_limit: int = field(default=8, metadata={"description": "Pairs kept by the screen per layer.", "min": 1})
    max_pairs_per_call: int = field(
        default=200, metadata={"description": "Pairs judged per pair-judge call.", "min": 1}
    )
    toxic_pairs: str = field(
        default="",
        metadata={"description": READING_HELP["toxic_pairs"]},
    )

    def roles_in_use(self) -> dict[str, str]:
        """The models a run calls (the screen only when it is on)."""
        used = super().roles_in_use()
        if not self.screen_pairs:
            used.pop("screen_model", None)
        return used


class TagInput(TypedDict, total=False):
    """A detection sample: an image (path, URL or store id) and/or its description, and a text."""

    id: str
    image: str | None
    image_description: str | None
    text: str
    base_dir: str | None


class PathStep(TypedDict):
    """One step of a reported path from its root: the concept, its association to its parent, and the step's
    transition probability."""

    concept: str
    association: str | None
    prob: float


class FindingSide(TypedDict):
    """One side (visual or textual) of the reported pair: the node, its cumulative probability and its path."""

    id: str
    concept: str
    path_prob: float
    path: list[PathStep]


class Finding(TypedDict):
    """The reported toxic pair: the layer it was found at, the category and reason, the joint path probability,
    both sides, and its source: `model` (a judge confirmed it) or `toxic_pairs` (it is in the user's set S)."""

    layer: int
    category: str
    reason: str
    source: str
    joint_prob: float
    visual: FindingSide
    textual: FindingSide


class TagOutput(TypedDict, total=False):
    """The detection result."""

    id: str
    toxic: bool
    mtc: float
    finding: Finding | None
    explanation: str
    hidden_meaning: str
    layers_expanded: int
    pairs_judged: int
    visual: list[Node]
    textual: list[Node]
    entity_graphs: dict[str, Any]
    image_id: str | None
    image_path: str | None
    usage: Annotated[RunUsage, merge_usage]


class TagState(TagInput, TagOutput, total=False):
    """Working state of a detection run."""

    roots: dict[str, list[str]]
    layer: int
    frontier: dict[str, list[str]]


def _image_part(state: TagState) -> ImagePart:
    return ImagePart(name="image", image_id=state.get("image_id"), description=state.get("image_description"))


def _finding(
    v: Node,
    t: Node,
    visual: list[Node],
    textual: list[Node],
    category: str,
    reason: str,
    layer: int,
    source: str = "model",
) -> Finding:
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


async def roots(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Root concepts: an entity-relation graph per modality from two concurrent calls (`separate`, the paper's),
    or literal concepts of both modalities from one call (`joint`)."""
    ctx = runtime.context
    gateway, spec = get_gateway(), ctx.spec_for("root_extractor")
    store = get_image_store(ctx.image_store or None)
    if ctx.roots_mode == "joint":
        joint = await extract_roots(gateway, spec, text=state["text"], image=_image_part(state), store=store)
        concepts = {"visual": joint.value.visual_roots, "textual": joint.value.textual_roots}
        graphs = {m: graph_of_roots(c) for m, c in concepts.items()}
        usage = joint.usage
    elif ctx.roots_mode == "separate":
        image_graph, text_graph = await asyncio.gather(
            extract_graph(gateway, spec, modality="visual", text=state["text"], image=_image_part(state), store=store),
            extract_graph(gateway, spec, modality="textual", text=state["text"], image=_image_part(state), store=store),
        )
        graphs = {"visual": normalize_graph(image_graph.value), "textual": normalize_graph(text_graph.value)}
        concepts = {
            "visual": roots_of(graphs["visual"]) or ["(unnamed image content)"],
            "textual": roots_of(graphs["textual"]) or ["(unnamed text content)"],
        }
        usage = merge_usage(image_graph.usage, text_graph.usage)
    else:
        raise ValueError(f"roots_mode: {ctx.roots_mode!r} is not one of separate, joint")
    visual, textual = make_roots("v", concepts["visual"]), make_roots("t", concepts["textual"])
    return {
        "roots": concepts,
        "entity_graphs": graphs,
        "visual": visual,
        "textual": textual,
        "layer": 0,
        "frontier": {"visual": [n["id"] for n in visual], "textual": [n["id"] for n in textual]},
        "finding": None,
        "pairs_judged": 0,
        "usage": usage,
    }


def _known_pairs(ctx: TagContext) -> dict[tuple[str, str], KnownPair]:
    """The user's toxic-pair set S of the run (empty without `toxic_pairs`)."""
    return load_toxic_pairs(ctx.toxic_pairs) if ctx.toxic_pairs else {}


def _listed_hits(
    known: dict[tuple[str, str], KnownPair], pairs: list[tuple[Node, Node]]
) -> list[tuple[tuple[Node, Node], KnownPair]]:
    """The pairs that are in S, with their listed entry."""
    hits = [(p, match(known, p[0]["concept"], p[1]["concept"])) for p in pairs] if known else []
    return [(p, k) for p, k in hits if k is not None]


def _listed_finding(state: TagState, hits: list[tuple[tuple[Node, Node], KnownPair]], layer: int, path: str) -> Finding:
    """The finding of the best pair (`best_pair`) among those S lists."""
    best = best_pair([p for p, _ in hits])
    assert best is not None
    known = next(k for p, k in hits if p == best)
    reason = known.reason or f"listed as a toxic pair in {path}"
    return _finding(
        best[0], best[1], state["visual"], state["textual"], known.category, reason, layer, source="toxic_pairs"
    )


async def synergy_review(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Judge the root pair without associations, on the entity-relation graphs; a toxic root pair has MTC 0. A root
    pair in the user's set S is toxic without the call."""
    ctx = runtime.context
    roots_pairs = [(v, t) for v in state["visual"] for t in state["textual"]]
    hits = _listed_hits(_known_pairs(ctx), roots_pairs)
    if hits:
        return {"pairs_judged": len(roots_pairs), "finding": _listed_finding(state, hits, 0, ctx.toxic_pairs)}
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
        update["finding"] = _finding(v, t, state["visual"], state["textual"], verdict.category, verdict.reason, 0)
    return update


def _expander_parents(nodes: list[Node], chunk: list[Node]) -> list[dict[str, str]]:
    """The parents of one expander call as the expander sees them: id, concept and the path from the root."""
    return [
        {"id": p["id"], "concept": p["concept"], "path": " -> ".join(x["concept"] for x in path_of(nodes, p["id"]))}
        for p in chunk
    ]


async def _ask_expander(
    gateway: Gateway,
    spec: str,
    ctx: TagContext,
    state: TagState,
    modality: Literal["visual", "textual"],
    frontier: list[Node],
) -> tuple[list[dict[str, Any]], RunUsage | None]:
    """Step 1 of `_grow_tree`: the expander's children of every frontier parent, as `{parent_id, children}`
    entries, with the calls' usage."""
    nodes = state[modality]
    # A layer wider than one call holds (per_node pruning) is asked in chunks; each chunk's answers are tied to
    # its own parents before the layer is grown as a whole.
    chunks = [frontier[i : i + MAX_PARENTS_PER_CALL] for i in range(0, len(frontier), MAX_PARENTS_PER_CALL)]
    asked = min(ctx.children_per_parent, ctx.k_max) if ctx.prune == "per_node" else ctx.children_per_parent
    results = await asyncio.gather(
        *[
            expand_layer(
                gateway,
                spec,
                modality=modality,
                roots=state["roots"],
                children_per_parent=asked,
                association_types=ctx.association_types,
                parents=_expander_parents(nodes, chunk),
                call_role=f"expander.{modality}" if i == 0 else f"expander.{modality}.{i}",
            )
            for i, chunk in enumerate(chunks)
        ]
    )
    entries: list[dict[str, Any]] = []
    usage: RunUsage | None = None
    for chunk, result in zip(chunks, results, strict=True):
        assigned = _assign_entries(chunk, [e.model_dump() for e in result.value.expansions])
        entries += [{"parent_id": pid, "children": children} for pid, children in assigned.items()]
        usage = merge_usage(usage, result.usage)
    return entries, usage


async def _grow_tree(
    gateway: Gateway,
    spec: str,
    ctx: TagContext,
    state: TagState,
    modality: Literal["visual", "textual"],
    prefix: str,
    layer: int,
) -> tuple[list[Node], RunUsage | None]:
    """One tree's next layer (nothing, and no usage, when its frontier is empty): the expander's children
    (`_ask_expander`), then pruned and numbered by `grow_layer`."""
    frontier = [n for n in state[modality] if n["id"] in set(state["frontier"][modality])]
    if not frontier:
        return [], None
    entries, usage = await _ask_expander(gateway, spec, ctx, state, modality, frontier)
    grown = grow_layer(
        frontier,
        entries,
        layer=layer,
        prefix=prefix,
        children_per_parent=ctx.children_per_parent,
        k_max=ctx.k_max,
        allowed_types=ctx.association_types,
        prune=ctx.prune,
    )
    return grown, usage


async def expand(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Expand both trees by one layer at once (one call per tree, all frontier parents in it)."""
    ctx = runtime.context
    gateway = get_gateway()
    layer = state["layer"] + 1
    spec = ctx.spec_for("expander")
    (new_v, use_v), (new_t, use_t) = await asyncio.gather(
        _grow_tree(gateway, spec, ctx, state, "visual", "v", layer),
        _grow_tree(gateway, spec, ctx, state, "textual", "t", layer),
    )
    return {
        "visual": state["visual"] + new_v,
        "textual": state["textual"] + new_t,
        "layer": layer,
        "frontier": {"visual": [n["id"] for n in new_v], "textual": [n["id"] for n in new_t]},
        "usage": merge_usage(use_v, use_t),
    }


# A layer's new pairs by pair id: the id names both nodes ("v1.0|t0.2"), so judges and script writers see which
# concepts they join.
ListedPairs = dict[str, tuple[Node, Node]]


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
                image=_image_part(state),
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
    hits = _listed_hits(_known_pairs(ctx), pairs)
    listed = _left_to_judge({f"{v['id']}|{t['id']}": (v, t) for v, t in pairs}, hits)
    candidates, usage, confirmed = await _judged(ctx, state, listed, layer)
    update: TagState = {"pairs_judged": state.get("pairs_judged", 0) + len(candidates) + len(hits)}
    if usage is not None:
        update["usage"] = usage
    found = [
        (listed[p], _finding(*listed[p], state["visual"], state["textual"], c.category, c.reason, layer))
        for p, c in confirmed.items()
    ]
    if hits:
        best_listed = best_pair([p for p, _ in hits])
        assert best_listed is not None
        found.append((best_listed, _listed_finding(state, hits, layer, ctx.toxic_pairs)))
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


def _left_to_judge(listed: ListedPairs, hits: list[tuple[tuple[Node, Node], KnownPair]]) -> ListedPairs:
    """The pairs a model must still judge once S has spoken: none of those S lists, and only those whose joint
    probability reaches the best listed pair's, since no other could be reported (`best_pair`)."""
    if not hits:
        return listed
    listed_ids = {f"{v['id']}|{t['id']}" for (v, t), _ in hits}
    floor = max(joint_probability(*p) for p, _ in hits)
    return {pid: p for pid, p in listed.items() if pid not in listed_ids and joint_probability(*p) >= floor}


async def explain_finding(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """An explanation that cites both paths of the reported pair."""
    finding = state["finding"]
    assert finding is not None
    result = await explain(
        get_gateway(),
        runtime.context.spec_for("explainer"),
        text=state["text"],
        visual_path=[dict(step) for step in finding["visual"]["path"]],
        textual_path=[dict(step) for step in finding["textual"]["path"]],
        finding={"category": finding["category"], "reason": finding["reason"], "layer": finding["layer"]},
        mtc=_mtc(finding),
    )
    return {
        "explanation": result.value.explanation,
        "hidden_meaning": result.value.hidden_meaning,
        "usage": result.usage,
    }


async def finalize(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Verdict and MTC from the finding (or its absence)."""
    finding = state.get("finding")
    if finding is None:
        return {
            "toxic": False,
            "mtc": 1.0,
            "layers_expanded": state.get("layer", 0),
            "explanation": f"No toxic cross-modal association was found within {runtime.context.l_max} layers.",
            "hidden_meaning": "",
        }
    return {"toxic": True, "mtc": _mtc(finding), "layers_expanded": state.get("layer", 0)}


def _mtc(finding: Finding) -> float:
    """The MTC score c of a finding (§3.3 Step 3): 0 for a toxic root pair, else 1 - joint path probability."""
    return 0.0 if finding["layer"] == 0 else mtc_score(finding["joint_prob"])


def route_search(state: TagState, runtime: Runtime[TagContext]) -> Literal["explain", "expand", "finalize"]:
    """Stop at the shallowest toxic layer (early exit), else expand until `l_max` layers exist."""
    if state.get("finding") is not None:
        return "explain"
    frontier = state.get("frontier", {})
    if state["layer"] + 1 < runtime.context.l_max and (frontier.get("visual") or frontier.get("textual")):
        return "expand"
    return "finalize"


builder = StateGraph(TagState, context_schema=TagContext, input_schema=TagInput, output_schema=TagOutput)
builder.add_node("ingest", ingest)
builder.add_node("roots", roots)
builder.add_node("synergy_review", synergy_review)
builder.add_node("expand", expand)
builder.add_node("judge_layer", judge_layer)
builder.add_node("explain", explain_finding)
builder.add_node("finalize", finalize)
builder.add_edge(START, "ingest")
builder.add_edge("ingest", "roots")
builder.add_edge("roots", "synergy_review")
builder.add_conditional_edges("synergy_review", route_search)
builder.add_edge("expand", "judge_layer")
builder.add_conditional_edges("judge_layer", route_search)
builder.add_edge("explain", "finalize")
builder.add_edge("finalize", END)

graph = builder.compile(name="tag_detection")
