"""The state of a TAG detection run: its input (`TagInput`), its result (`TagOutput`, with the reported `Finding`)
and the working state between nodes (`TagState`). Concepts, ids and paths only, never image bytes."""

from __future__ import annotations

from typing import Annotated, Any

# typing_extensions' TypedDict: pydantic (used for Studio's schema export) rejects typing's on Python < 3.12.
from typing_extensions import TypedDict

from agents.content import ImagePart
from agents.usage import RunUsage, merge_usage
from graphs.tag.tree import Node


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
    entity_graphs: dict[str, dict[str, Any]]
    image_id: str | None
    image_path: str | None
    usage: Annotated[RunUsage, merge_usage]


class TagState(TagInput, TagOutput, total=False):
    """Working state of a detection run."""

    roots: dict[str, list[str]]
    layer: int
    frontier: dict[str, list[str]]


def image_part(state: TagState) -> ImagePart:
    """The sample's image as a role sees it: its store id and its description."""
    return ImagePart(name="image", image_id=state.get("image_id"), description=state.get("image_description"))
