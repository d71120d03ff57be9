"""Root extractor: the key concepts of the image and of the text, in one call."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import MAX_CONCEPT_CHARS, MAX_ROOTS
from tools.image_store import ImageStore

ROOT_PROMPT = """You are a safety analyst who breaks an image and a text into their key concepts.
From the image (or its description) list the main entities or concepts it shows; from the text list the main
entities, actions or intents it expresses. Keep each concept short (a few words), literal and specific. Name what
is there; do not judge it and do not associate beyond it. Give 1 to {max_roots} concepts per modality, the most
central first."""

ROOT_TASK = "Return the image concepts as visual_roots and the text concepts as textual_roots."


class Roots(BaseModel):
    """Root concepts of each modality, most central first."""

    visual_roots: list[str] = Field(min_length=1, max_length=MAX_ROOTS, description="concepts seen in the image")
    textual_roots: list[str] = Field(min_length=1, max_length=MAX_ROOTS, description="concepts in the text")


async def extract_roots(
    gateway: Gateway, spec: str, *, text: str, image: ImagePart, store: ImageStore
) -> CallResult[Roots]:
    """One call that returns the root concepts of both modalities."""
    messages = await abuild_messages(
        ROOT_PROMPT.format(max_roots=MAX_ROOTS),
        {"text": text},
        images=[image],
        store=store,
        vision=gateway.vision(spec),
        task=ROOT_TASK,
    )
    result = await gateway.structured(role="root_extractor", spec=spec, schema=Roots, messages=messages)
    # Trim whitespace and over-long concepts: a concept is a node label, not a paragraph.
    result.value.visual_roots = [c.strip()[:MAX_CONCEPT_CHARS] for c in result.value.visual_roots if c.strip()] or [
        "(unnamed image content)"
    ]
    result.value.textual_roots = [c.strip()[:MAX_CONCEPT_CHARS] for c in result.value.textual_roots if c.strip()] or [
        "(unnamed text content)"
    ]
    return result
