"""Pure TAG bookkeeping: nodes, layer growth with per-parent normalisation and k_max trimming, new cross-modal
pairs per layer, the choice of the reported toxic pair, and the MTC score.

Kept free of model calls so every rule can be tested on hand-built trees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast, get_args

from typing_extensions import TypedDict

# How k_max bounds a tree (see docs/tag.md): "per_node" keeps up to k_max children of every parent and no layer cap
# (§3.2 Step 2, "up to k_max ... child nodes": the definition, and `TagContext`'s default); "per_layer" keeps the
# k_max most probable nodes of each layer (§7's complexity estimate, "the maximum node capacity of each layer"), a
# cheaper option that cuts the low-probability branches where covert pairs live. `grow_layer`'s own keyword default
# stays per_layer for its pure-function callers; the run's reading always comes from the context.
Prune = Literal["per_layer", "per_node"]
PRUNE_MODES: tuple[str, ...] = get_args(Prune)

# The help of the TAG readings a command can switch (`--prune`, `--roots-mode`, `--toxic-pairs`): `TagContext`'s
# fields take their descriptions from here, and the CLI reads them without loading the model stack.
READING_HELP: dict[str, str] = {
    "prune": "per_node (default, §3.2 Step 2): up to k_max children of every node, no layer cap; "
    "per_layer (cheaper, §7's estimate): the k_max most probable nodes of each layer, which cuts the "
    "low-probability (covert) branches. See docs/tag.md.",
    "roots_mode": "separate: an entity-graph call per modality (the paper's); joint: one literal-concepts call.",
    "toxic_pairs": "File of known toxic concept pairs (§3.3 Step 2's user-defined set S; JSONL or CSV of "
    "image_concept, text_concept, category, optional reason): a pair matching one (case-insensitive) is "
    "toxic without a model call. Empty: the model judges every pair.",
}


# A child as the expander wrote it (its schema's `model_dump()`: concept, association, probability, reason) or as a
# test builds it by hand; read defensively, since a field may be missing or odd.
RawChild = Mapping[str, object]
# One parent's children as the expander answered: `{"parent_id": ..., "children": [RawChild, ...]}`.
ExpansionEntry = Mapping[str, object]


class Node(TypedDict):
    """A concept in an association tree; `path_prob` is the cumulative transition probability from its root."""

    id: str
    concept: str
    layer: int
    parent: str | None
    association: str | None
    prob: float
    path_prob: float
    reason: str


def make_roots(prefix: str, concepts: Iterable[str]) -> list[Node]:
    """Layer-0 nodes; a root reaches itself with probability 1."""
    return [
        Node(id=f"{prefix}0.{i}", concept=c, layer=0, parent=None, association=None, prob=1.0, path_prob=1.0, reason="")
        for i, c in enumerate(concepts)
    ]


def assign_entries(parents: list[Node], expansions: Sequence[ExpansionEntry]) -> dict[str, list[RawChild]]:
    """Children lists by parent id; entries with unknown ids go, in order, to parents that got none."""
    by_id = {p["id"]: p for p in parents}
    out: dict[str, list[RawChild]] = {}
    orphans: list[list[RawChild]] = []
    for entry in expansions:
        pid = str(entry.get("parent_id", ""))
        # The expander's schema makes `children` a list of child objects; a hand-built entry may leave it out.
        children = list(cast("Iterable[RawChild]", entry.get("children") or []))
        if pid in by_id and pid not in out:
            out[pid] = children
        else:
            orphans.append(children)
    for parent in parents:
        if parent["id"] not in out and orphans:
            out[parent["id"]] = orphans.pop(0)
    return out


def _raw_probability(child: RawChild) -> float:
    """A child's stated probability, negative or unreadable values counting as 0."""
    raw = child.get("probability", 0.0)
    if not isinstance(raw, (int, float, str, bytes)):
        return 0.0
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, value) if value == value else 0.0


def _valid_children(parent: Node, children: list[RawChild], allowed: set[str]) -> list[RawChild]:
    """Step 1 of `grow_layer`: a parent's children in the listed order, less those with an empty concept, a repeated
    one, one equal to the parent, or a type outside `allowed`."""
    # A child equal to its parent (case-insensitive) is no association at all: dropped like a duplicate.
    seen: set[str] = {" ".join(parent["concept"].lower().split())}
    valid: list[RawChild] = []
    for child in children:
        concept = str(child.get("concept", "")).strip()
        key = " ".join(concept.lower().split())
        if not concept or key in seen or child.get("association") not in allowed:
            continue
        seen.add(key)
        valid.append(child)
    return valid


def _most_probable(valid: list[RawChild], per_parent: int) -> list[RawChild]:
    """Step 2 of `grow_layer`: the `per_parent` most probable children, ties in the listed order, kept in the
    listed order."""
    # The prompt asks for the most probable associations (§10.1); a model that lists more, or lists them out of
    # order, must not push a likelier one out.
    ranked = sorted(enumerate(valid), key=lambda ic: (-_raw_probability(ic[1]), ic[0]))
    return [child for _, child in sorted(ranked[:per_parent], key=lambda ic: ic[0])]


def _child_nodes(parent: Node, kept: list[RawChild], layer: int) -> list[Node]:
    """Step 3 of `grow_layer`: a parent's kept children as nodes (ids not yet given), their probabilities normalised
    to sum 1 (uniform when none is positive)."""
    if not kept:
        return []
    raw = [_raw_probability(c) for c in kept]
    total = sum(raw)
    probs = [r / total for r in raw] if total > 0 else [1.0 / len(kept)] * len(kept)
    return [
        Node(
            id="",
            concept=str(child["concept"]).strip(),
            layer=layer,
            parent=parent["id"],
            association=str(child["association"]),
            prob=p,
            path_prob=parent["path_prob"] * p,
            reason=str(child.get("reason", "")),
        )
        for child, p in zip(kept, probs, strict=True)
    ]


def _number_layer(nodes: list[Node], *, layer: int, prefix: str, k_max: int, prune: Prune) -> list[Node]:
    """Step 4 of `grow_layer`: the layer ordered by cumulative path probability (ties keep the parents' order), cut
    to k_max under `per_layer`, and numbered `{prefix}{layer}.{j}`."""
    ranked = sorted(enumerate(nodes), key=lambda c: (-c[1]["path_prob"], c[0]))
    kept = ranked[:k_max] if prune == "per_layer" else ranked
    out: list[Node] = []
    for j, (_, node) in enumerate(kept):
        node["id"] = f"{prefix}{layer}.{j}"
        out.append(node)
    return out


def grow_layer(
    parents: list[Node],
    expansions: Sequence[ExpansionEntry],
    *,
    layer: int,
    prefix: str,
    children_per_parent: int,
    k_max: int,
    allowed_types: Iterable[str],
    prune: Prune = "per_layer",
) -> list[Node]:
    """The next layer: each parent's valid children (the `children_per_parent` most probable, ties in the listed
    order) normalised to sum 1, then

    - `per_layer`: the k_max most probable of the whole layer by cumulative path probability;
    - `per_node`: every parent's children, at most k_max per parent (no cap on the layer).

    Nodes are numbered by cumulative path probability (ties keep the parents' order). Children with an empty
    concept, a repeated one, one equal to the parent, or a type outside `allowed_types` are dropped."""
    if prune not in PRUNE_MODES:
        raise ValueError(f"prune: {prune!r} is not one of {', '.join(PRUNE_MODES)}")
    per_parent = min(children_per_parent, k_max) if prune == "per_node" else children_per_parent
    allowed = set(allowed_types)
    assigned = assign_entries(parents, expansions)
    nodes: list[Node] = []
    for parent in parents:
        valid = _valid_children(parent, assigned.get(parent["id"], []), allowed)
        nodes += _child_nodes(parent, _most_probable(valid, per_parent), layer)
    return _number_layer(nodes, layer=layer, prefix=prefix, k_max=k_max, prune=prune)


def path_of(nodes: list[Node], node_id: str) -> list[Node]:
    """The nodes from the root down to `node_id`."""
    by_id = {n["id"]: n for n in nodes}
    path: list[Node] = []
    current: str | None = node_id
    while current is not None:
        node = by_id[current]
        path.append(node)
        current = node["parent"]
    return list(reversed(path))


def new_pairs(visual: list[Node], textual: list[Node], layer: int) -> list[tuple[Node, Node]]:
    """Cross-modal pairs first available at `layer`: at least one side is new, the other from any layer so far."""
    return [
        (v, t)
        for v in visual
        for t in textual
        if max(v["layer"], t["layer"]) == layer and v["layer"] <= layer and t["layer"] <= layer
    ]


def joint_probability(v: Node, t: Node) -> float:
    """p(root_x -> v_x) * p(root_t -> v_t)."""
    return v["path_prob"] * t["path_prob"]


def mtc_score(joint: float | None) -> float:
    """Multimodal Toxicity Covertness: 1 - joint path probability; 1 when nothing toxic was found."""
    if joint is None:
        return 1.0
    return min(1.0, max(0.0, 1.0 - joint))


def best_pair(pairs: list[tuple[Node, Node]]) -> tuple[Node, Node] | None:
    """Among toxic pairs of one layer, the one with the highest joint probability (ties: lowest ids)."""
    if not pairs:
        return None
    return sorted(pairs, key=lambda p: (-joint_probability(*p), p[0]["id"], p[1]["id"]))[0]
