"""The TAG detection graph: ingest -> roots -> synergy review -> [expand both trees -> judge new pairs]* ->
explain -> finalize, wired into one `StateGraph` and compiled."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from graphs.ingest import ingest
from graphs.tag.context import TagContext
from graphs.tag.judging import judge_layer, synergy_review
from graphs.tag.nodes import expand, explain_finding, finalize, roots, route_search
from graphs.tag.state import TagInput, TagOutput, TagState

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
