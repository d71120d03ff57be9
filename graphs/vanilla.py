"""The vanilla baseline: one model call judges the image-text pair directly (no association graph)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agents.content import ImagePart
from agents.gateway import get_gateway
from agents.tag.vanilla import detect_vanilla
from agents.usage import RunUsage, merge_usage
from graphs.context import ModelsContext, strict_init
from graphs.ingest import ingest
from tools.image_store import get_image_store


@strict_init
@dataclass(kw_only=True)
class VanillaContext(ModelsContext):
    """Settings of the baseline."""

    vanilla_detector_model: str = field(default="", metadata={"description": "Model of the detector (empty: model)."})


class VanillaInput(TypedDict, total=False):
    """A detection sample."""

    id: str
    image: str | None
    image_description: str | None
    text: str
    base_dir: str | None


class VanillaOutput(TypedDict, total=False):
    """The baseline's verdict."""

    toxic: bool
    category: str
    reason: str
    image_id: str | None
    image_path: str | None
    usage: Annotated[RunUsage, merge_usage]


class VanillaState(VanillaInput, VanillaOutput, total=False):
    """Working state."""


async def detect(state: VanillaState, runtime: Runtime[VanillaContext]) -> VanillaState:
    """One call on the pair."""
    ctx = runtime.context
    result = await detect_vanilla(
        get_gateway(),
        ctx.spec_for("vanilla_detector"),
        text=state["text"],
        image=ImagePart("image", state.get("image_id"), state.get("image_description")),
        store=get_image_store(ctx.image_store or None),
    )
    v = result.value
    return {"toxic": v.toxic, "category": v.category, "reason": v.reason, "usage": result.usage}


builder = StateGraph(
    VanillaState, context_schema=VanillaContext, input_schema=VanillaInput, output_schema=VanillaOutput
)
builder.add_node("ingest", ingest)
builder.add_node("detect", detect)
builder.add_edge(START, "ingest")
builder.add_edge("ingest", "detect")
builder.add_edge("detect", END)

graph = builder.compile(name="vanilla_detection")
