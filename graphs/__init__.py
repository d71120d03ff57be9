"""LangGraph state machines: TAG detection, the vanilla baseline, IPR refinement and CTD generation."""
