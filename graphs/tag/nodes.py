"""The search nodes of TAG: root concepts, the expansion of both trees by one layer, the explanation and the
verdict, and the route that ends the search at the first toxic layer (the judging nodes are `graphs.tag.judging`)."""

from __future__ import annotations

import asyncio
from typing import Literal

from langgraph.runtime import Runtime

from agents.content import check_images_shown
from agents.gateway import Gateway, get_gateway
from agents.tag.expander import MAX_PARENTS_PER_CALL, expand_layer
from agents.tag.explainer import explain
from agents.tag.roots import extract_graph, extract_roots, graph_of_roots, normalize_graph, roots_of
from agents.usage import RunUsage, merge_usage
from graphs.tag.context import TagContext
from graphs.tag.findings import mtc_of
from graphs.tag.state import TagState, image_part
from graphs.tag.tree import ExpansionEntry, Node, assign_entries, grow_layer, make_roots, path_of
from tools.image_store import get_image_store


async def roots(state: TagState, runtime: Runtime[TagContext]) -> TagState:
    """Root concepts: an entity-relation graph per modality from two concurrent calls (`separate`, the paper's),
    or literal concepts of both modalities from one call (`joint`)."""
    ctx = runtime.context
    gateway, spec = get_gateway(), ctx.spec_for("root_extractor")
    store = get_image_store(ctx.image_store or None)
    if ctx.roots_mode == "joint":
        joint = await extract_roots(gateway, spec, text=state["text"], image=image_part(state), store=store)
        concepts = {"visual": joint.value.visual_roots, "textual": joint.value.textual_roots}
        graphs = {m: graph_of_roots(c) for m, c in concepts.items()}
        usage = joint.usage
    elif ctx.roots_mode == "separate":
        # The image's call fails at once where a text-only model gets no description; the text call beside it
        # would go on loading the model or paying for an answer no one reads, so that error comes first.
        check_images_shown([image_part(state)], store=store, vision=gateway.vision(spec))
        image_graph, text_graph = await asyncio.gather(
            extract_graph(gateway, spec, modality="visual", text=state["text"], image=image_part(state), store=store),
            extract_graph(gateway, spec, modality="textual", text=state["text"], image=image_part(state), store=store),
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
) -> tuple[list[ExpansionEntry], RunUsage | None]:
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
    entries: list[ExpansionEntry] = []
    usage: RunUsage | None = None
    for chunk, result in zip(chunks, results, strict=True):
        assigned = assign_entries(chunk, [e.model_dump() for e in result.value.expansions])
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
        mtc=mtc_of(finding),
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
    return {"toxic": True, "mtc": mtc_of(finding), "layers_expanded": state.get("layer", 0)}


def route_search(state: TagState, runtime: Runtime[TagContext]) -> Literal["explain", "expand", "finalize"]:
    """Stop at the shallowest toxic layer (early exit), else expand until `l_max` layers exist."""
    if state.get("finding") is not None:
        return "explain"
    frontier = state.get("frontier", {})
    if state["layer"] + 1 < runtime.context.l_max and (frontier.get("visual") or frontier.get("textual")):
        return "expand"
    return "finalize"
