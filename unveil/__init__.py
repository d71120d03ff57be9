"""Unveil: LangGraph agent graphs for multimodal safety research (application layer: CLI, batches, rendering)."""

__version__ = "0.1.0"
