"""A guard model as a detector: one call in the guard's own protocol (see `agents/guard`), like the vanilla
baseline but with the guard's published instruction and answer format instead of Unveil's prompt and schema.

Why a graph of its own rather than a mode of the vanilla graph: the vanilla role asks for structured output
(a Pydantic schema the gateway repairs), while a guard answers free text in a fixed format of its own that is
parsed, never repaired (a repair prompt would be outside what the guard was trained on). An unparseable answer
raises `GuardParseError`, whose `raw` the batch runner records with the failure.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agents.content import ImagePart
from agents.gateway import get_gateway
from agents.guard import detect_guard, get_guard
from agents.usage import RunUsage, merge_usage
from graphs.context import ModelsContext, strict_init
from graphs.ingest import ingest
from tools.image_store import get_image_store


@strict_init
@dataclass(kw_only=True)
class GuardContext(ModelsContext):
    """Which guard protocol to speak, and the model that serves it."""

    guard: str = field(
        default="llama-guard-4",
        metadata={"description": "Guard protocol: llama-guard-4, llavaguard, guardreasoner-vl, or template=FILE."},
    )
    guard_model: str = field(default="", metadata={"description": "Model spec serving the guard (empty: model)."})


class GuardInput(TypedDict, total=False):
    """A detection sample."""

    id: str
    image: str | None
    image_description: str | None
    text: str
    base_dir: str | None


class GuardOutput(TypedDict, total=False):
    """The guard's verdict in the common form, with its own codes and raw answer."""

    toxic: bool
    category: str
    reason: str
    guard: str
    guard_codes: list[str]
    guard_raw: str
    image_id: str | None
    image_path: str | None
    usage: Annotated[RunUsage, merge_usage]


class GuardState(GuardInput, GuardOutput, total=False):
    """Working state."""


async def judge(state: GuardState, runtime: Runtime[GuardContext]) -> GuardState:
    """One guard call on the pair, parsed by the guard's own parser."""
    ctx = runtime.context
    guard = get_guard(ctx.guard)
    verdict, result = await detect_guard(
        get_gateway(),
        ctx.spec_for("guard"),
        guard,
        text=state["text"],
        image=ImagePart("image", state.get("image_id"), state.get("image_description")),
        store=await asyncio.to_thread(get_image_store, ctx.image_store or None),
    )
    return {
        "toxic": verdict.toxic,
        "category": verdict.category,
        "reason": verdict.reason,
        "guard": guard.name,
        "guard_codes": verdict.codes,
        "guard_raw": result.raw[:4000],
        "usage": result.usage,
    }


builder = StateGraph(GuardState, context_schema=GuardContext, input_schema=GuardInput, output_schema=GuardOutput)
builder.add_node("ingest", ingest)
builder.add_node("judge", judge)
builder.add_edge(START, "ingest")
builder.add_edge("ingest", "judge")
builder.add_edge("judge", END)

graph = builder.compile(name="guard_detection")
