"""Tools: the image store, image input, text-to-image generators, safety and alignment scorers, web search.

Tools know no agent and no graph.
"""
