"""Expander: one single-step association layer for one tree, all parents of the newest layer in one call."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, create_model

from agents.content import abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import (
    ASSOCIATION_GUIDE,
    ASSOCIATION_TYPES,
    MAX_CHILDREN,
    AssociationType,
    Concept,
    Probability,
    Reason,
)

EXPAND_PROMPT = """You are a careful safety auditor who knows how everyday objects, concepts and actions lead to
one another, including in ways that hide a risk. Expand an association tree by exactly one step.

Single-step rule: each child must follow from its parent in one direct leap. The justification of the leap is
not a node (flour -> illicit white powder is one step because both are white powders; "white powder" is the reason,
not an intermediate child).

Stay grounded: the roots of both the image and the text are the context of every leap. Give the most probable,
sound associations in that context, both the common-sense ones and the ones that would reveal a hidden risk. Do not
force a dangerous reading where nothing supports it.

Lenses that help find concealed risks: physical and chemical disguise (a harmless form shared with a hazardous
thing), biological disguise (a plant or species passed off as another), and coded language (slang, euphemism,
jargon standing for something illicit).

{guide}

For every parent listed in parent_nodes, give up to {children} children, each with one allowed association type
and a probability; a parent's probabilities should describe how likely each leap is and sum to about 1."""

EXPAND_TASK = "Return one entry per parent id in expansions, each with its children."


class Child(BaseModel):
    """One associated concept of a parent."""

    concept: Concept
    association: AssociationType
    probability: Probability
    reason: Reason = ""


class ParentExpansion(BaseModel):
    """The children of one parent node."""

    parent_id: str
    children: list[Child] = Field(default_factory=list, max_length=MAX_CHILDREN)


MAX_PARENTS = 12
# Parents per expansion call: a wider layer (per_node pruning) is split over several calls of this size.
MAX_PARENTS_PER_CALL = MAX_PARENTS


class Expansion(BaseModel):
    """One layer of expansion for one tree."""

    expansions: list[ParentExpansion] = Field(default_factory=list, max_length=MAX_PARENTS)


@lru_cache(maxsize=64)
def expansion_schema(children_per_parent: int, parents: int) -> type[Expansion]:
    """`Expansion` whose list caps admit `children_per_parent` children for each of `parents` parents.

    The caps never go below the defaults (a model that gives one child too many is trimmed, not failed), and grow
    with `children_per_parent` and `k_max`, so large settings do not turn every correct answer into a schema error.
    """
    if children_per_parent <= MAX_CHILDREN and parents <= MAX_PARENTS:
        return Expansion
    parent = create_model(
        "ParentExpansion",
        __base__=ParentExpansion,
        __doc__=ParentExpansion.__doc__,
        children=(list[Child], Field(default_factory=list, max_length=max(MAX_CHILDREN, children_per_parent))),
    )
    return create_model(
        "Expansion",
        __base__=Expansion,
        __doc__=Expansion.__doc__,
        expansions=(list[parent], Field(default_factory=list, max_length=max(MAX_PARENTS, parents))),  # type: ignore[valid-type]
    )


async def expand_layer(
    gateway: Gateway,
    spec: str,
    *,
    modality: Literal["visual", "textual"],
    parents: Sequence[dict[str, str]],
    roots: dict[str, list[str]],
    children_per_parent: int,
    association_types: list[str],
    call_role: str | None = None,
) -> CallResult[Expansion]:
    """Ask for the children of `parents` (dicts with id, concept, path) in one call."""
    guide = ASSOCIATION_GUIDE
    if set(association_types) != set(ASSOCIATION_TYPES):
        guide += "\nOnly these types are allowed here: " + ", ".join(association_types) + "."
    messages = await abuild_messages(
        EXPAND_PROMPT.format(guide=guide, children=children_per_parent),
        {
            "tree": f"{modality} association tree",
            "image_roots": roots["visual"],
            "text_roots": roots["textual"],
            "parent_nodes": [{"id": p["id"], "concept": p["concept"], "path": p["path"]} for p in parents],
        },
        task=EXPAND_TASK,
    )
    schema = expansion_schema(children_per_parent, len(parents))
    return await gateway.structured(
        role=call_role or f"expander.{modality}", usage_role="expander", spec=spec, schema=schema, messages=messages
    )


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {"expander.visual / expander.textual": Expansion}
