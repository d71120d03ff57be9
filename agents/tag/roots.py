"""Root extractors: the root concepts of the image and of the text.

The paper's form (§3.2 Step 1, §10.1 "Generating root nodes in image/text TAG"): one call per modality, each
deconstructing its input into an entity-relation graph (entities, their hierarchy, relations, and for each
entity attributes per association type, thinking beyond literal descriptions). The roots of a tree are the
top-level entities of its graph; the graphs themselves go on to the judges (§10.2). The two calls are
independent and run concurrently.

The one-call form (`extract_roots`: 1-4 literal concepts per modality, no association) is kept as the `joint`
roots mode: fewer calls and tokens, but no graph for the judges beyond the concept names.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field

from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import ASSOCIATION_GUIDE, MAX_CONCEPT_CHARS, MAX_ROOTS, AssociationType, Concept, Label
from agents.tag.types import ROOTS_MODES as ROOTS_MODES
from agents.tag.types import RootsMode as RootsMode
from tools.image_store import ImageStore

_GRAPH_MISSION = """Identify all key entities and their hierarchical relationships (an entity that is part of,
a kind of, or held by another names that entity as its parent_id; the top-level entities have none), and the
relations between entities. Then, for each entity, identify attributes that align with the association types
below, one association type per attribute. Give every entity a short id (e1, e2, ...) and keep names short
(a few words); list the most central top-level entity first.

{guide}"""

IMAGE_ROOT_PROMPT = (
    """You are a safety analyst specializing in visual intelligence. Your task is to analyze an
image's content and deconstruct it into a structured knowledge graph. You must think beyond literal descriptions
to identify attributes that represent generalized or disguised risk potential.

Your mission: analyze the provided image (or its description). """
    + _GRAPH_MISSION
)

TEXT_ROOT_PROMPT = (
    """You are a safety analyst specializing in textual analysis and inference. Your task is to
analyze text and deconstruct it into a structured knowledge graph. You must think beyond literal descriptions to
identify attributes that represent generalized or disguised risk potential.

Your mission: analyze the provided text. """
    + _GRAPH_MISSION
)

GRAPH_TASK = "Return the knowledge graph: entities (id, name, parent_id, attributes) and relations."

ROOT_PROMPT = """You are a safety analyst who breaks an image and a text into their key concepts.
From the image (or its description) list the main entities or concepts it shows; from the text list the main
entities, actions or intents it expresses. Keep each concept short (a few words), literal and specific. Name what
is there; do not judge it and do not associate beyond it. Give 1 to {max_roots} concepts per modality, the most
central first."""

ROOT_TASK = "Return the image concepts as visual_roots and the text concepts as textual_roots."

# How the roots are extracted (the TAG graph's `roots_mode`): the paper's two graph calls, or one joint call.

# Bounds of a graph answer (they also bound constrained-decoding grammars).
MAX_ENTITIES = 12
MAX_ATTRIBUTES = 6
MAX_RELATIONS = 16


class Attribute(BaseModel):
    """An attribute of an entity under one association type (e.g. similarity: "fine white powder")."""

    association: AssociationType
    value: Concept


class Entity(BaseModel):
    """An entity of the graph; `parent_id` places it in the hierarchy (None: a top-level entity)."""

    id: str = Field(default="", max_length=40)
    name: Concept
    parent_id: str | None = None
    attributes: list[Attribute] = Field(default_factory=list, max_length=MAX_ATTRIBUTES)


class Relation(BaseModel):
    """A relation between two entities of the graph."""

    source_id: str = Field(max_length=40)
    relation: Label
    target_id: str = Field(max_length=40)


class EntityGraph(BaseModel):
    """The entity-relation graph of one modality."""

    entities: list[Entity] = Field(min_length=1, max_length=MAX_ENTITIES)
    relations: list[Relation] = Field(default_factory=list, max_length=MAX_RELATIONS)


class Roots(BaseModel):
    """Root concepts of each modality, most central first (the one-call `joint` form)."""

    visual_roots: list[str] = Field(min_length=1, max_length=MAX_ROOTS, description="concepts seen in the image")
    textual_roots: list[str] = Field(min_length=1, max_length=MAX_ROOTS, description="concepts in the text")


def normalize_graph(graph: EntityGraph) -> dict[str, Any]:
    """The graph as a plain dict with unique ids (missing or repeated ids become e1, e2, ...), names trimmed,
    and parent and relation references to unknown ids dropped."""
    entities: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, e in enumerate(graph.entities, 1):
        name = str(e.name).strip()
        if not name:
            continue
        eid = e.id.strip() or f"e{i}"
        if eid in seen:
            eid = f"e{i}"
        seen.add(eid)
        entities.append(
            {
                "id": eid,
                "name": name,
                "parent_id": (e.parent_id or "").strip() or None,
                "attributes": [a.model_dump() for a in e.attributes if str(a.value).strip()],
            }
        )
    for node in entities:
        if node["parent_id"] not in seen or node["parent_id"] == node["id"]:
            node["parent_id"] = None
    relations = [r.model_dump() for r in graph.relations if r.source_id in seen and r.target_id in seen]
    return {"entities": entities, "relations": relations}


def roots_of(graph: dict[str, Any], limit: int = MAX_ROOTS) -> list[str]:
    """The root concepts of a normalised graph: its top-level entities in listed order (the first entities when
    the hierarchy has no top), distinct by name, at most `limit`."""
    entities = graph.get("entities") or []
    top = [e for e in entities if not e.get("parent_id")] or list(entities)
    out: list[str] = []
    for e in top:
        name = str(e["name"]).strip()[:MAX_CONCEPT_CHARS]
        if name and name.lower() not in {c.lower() for c in out}:
            out.append(name)
    return out[:limit]


def graph_of_roots(concepts: list[str]) -> dict[str, Any]:
    """A minimal graph (entities only) for roots of the `joint` form, so judges always receive graphs."""
    return {
        "entities": [
            {"id": f"e{i}", "name": c, "parent_id": None, "attributes": []} for i, c in enumerate(concepts, 1)
        ],
        "relations": [],
    }


async def extract_graph(
    gateway: Gateway,
    spec: str,
    *,
    modality: Literal["visual", "textual"],
    text: str,
    image: ImagePart,
    store: ImageStore,
) -> CallResult[EntityGraph]:
    """One modality's entity-relation graph (call role `root_extractor.image` or `root_extractor.text`).

    Each call sees only its own modality: the image call the image (or its description), the text call the text.
    """
    if modality == "visual":

        def build(vision: bool) -> Awaitable[list[BaseMessage]]:
            return abuild_messages(
                IMAGE_ROOT_PROMPT.format(guide=ASSOCIATION_GUIDE),
                {},
                images=[image],
                store=store,
                vision=vision,
                task=GRAPH_TASK,
            )

        return await gateway.structured_seeing(
            build, role="root_extractor.image", usage_role="root_extractor", spec=spec, schema=EntityGraph
        )
    messages = await abuild_messages(TEXT_ROOT_PROMPT.format(guide=ASSOCIATION_GUIDE), {"text": text}, task=GRAPH_TASK)
    return await gateway.structured(
        role="root_extractor.text", usage_role="root_extractor", spec=spec, schema=EntityGraph, messages=messages
    )


async def extract_roots(
    gateway: Gateway, spec: str, *, text: str, image: ImagePart, store: ImageStore
) -> CallResult[Roots]:
    """One call that returns the literal root concepts of both modalities (the `joint` roots mode)."""

    def build(vision: bool) -> Awaitable[list[BaseMessage]]:
        return abuild_messages(
            ROOT_PROMPT.format(max_roots=MAX_ROOTS),
            {"text": text},
            images=[image],
            store=store,
            vision=vision,
            task=ROOT_TASK,
        )

    result = await gateway.structured_seeing(build, role="root_extractor", spec=spec, schema=Roots)
    # Trim whitespace and over-long concepts: a concept is a node label, not a paragraph.
    result.value.visual_roots = [c.strip()[:MAX_CONCEPT_CHARS] for c in result.value.visual_roots if c.strip()] or [
        "(unnamed image content)"
    ]
    result.value.textual_roots = [c.strip()[:MAX_CONCEPT_CHARS] for c in result.value.textual_roots if c.strip()] or [
        "(unnamed text content)"
    ]
    return result


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {
    "root_extractor.image / root_extractor.text": EntityGraph,
    "root_extractor (roots_mode=joint)": Roots,
}
