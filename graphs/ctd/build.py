"""The CTD generation graph: its nodes and routes wired into one `StateGraph`, compiled."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graphs.ctd.context import CtdContext
from graphs.ctd.human_review import human_review
from graphs.ctd.nodes import (
    architect,
    drop,
    eraser,
    feedback,
    gatekeeper,
    judge,
    modality_check,
    route_gatekeeper,
    route_modality,
)
from graphs.ctd.send_back import route_review
from graphs.ctd.state import CtdInput, CtdOutput, CtdState

builder = StateGraph(CtdState, context_schema=CtdContext, input_schema=CtdInput, output_schema=CtdOutput)
builder.add_node("architect", architect)
builder.add_node("eraser", eraser)
builder.add_node("modality_check", modality_check)
builder.add_node("judge", judge)  # type: ignore[call-overload]  # a Send target takes its payload, not state
builder.add_node("gatekeeper", gatekeeper)
builder.add_node("feedback", feedback)
builder.add_node("drop", drop)
builder.add_node("human_review", human_review)
builder.add_edge(START, "architect")
builder.add_edge("architect", "eraser")
builder.add_edge("eraser", "modality_check")
builder.add_conditional_edges("modality_check", route_modality, ["judge", "feedback", "drop"])
builder.add_edge("judge", "gatekeeper")
builder.add_conditional_edges("gatekeeper", route_gatekeeper, ["human_review", "feedback", "drop"])
builder.add_edge("feedback", "eraser")
builder.add_edge("drop", END)
builder.add_conditional_edges("human_review", route_review, ["eraser", END])  # a send back: another attempt

graph = builder.compile(name="ctd_generation")
