"""TAG detection (TA-CTD): root concepts -> synergy review -> [expand both trees -> judge new pairs]* -> explain.

Expansion and judging interleave layer by layer, so a toxic pair found at layer L ends the search there (the
early exit) and no deeper layer is ever expanded. Among toxic pairs of that layer the one with the highest joint
path probability is reported, with MTC = 1 - p(root_x -> v_x) * p(root_t -> v_t); MTC is 0 for a toxic root pair and
1 when nothing is found within `l_max` layers. State holds concepts, ids and paths only, never image bytes.

The package has one module a job: `context` (the run's settings), `state` (input, output, the finding), `tree`
(the pure tree rules: growth, pruning, pairs, MTC), `tree_check` (the check of a written record's trees),
`findings` (the reported pair, the user's set S of toxic pairs), `nodes` (roots, expansion, explanation, verdict,
the search's route), `judging` (the synergy review and the layer's pair judgement) and `build` (the compiled
graph).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphs.tag.build import builder, graph
    from graphs.tag.context import TagContext
    from graphs.tag.state import Finding, TagInput, TagOutput, TagState

# Each public name and the module it lives in. They load on first use (PEP 562), so the CLI's help (the readings of
# `graphs.tag.tree`, the settings of `graphs.tag.context`) neither builds the graph nor loads the model stack.
_HOMES = {
    "builder": "build",
    "graph": "build",
    "TagContext": "context",
    "Finding": "state",
    "TagInput": "state",
    "TagOutput": "state",
    "TagState": "state",
}

__all__ = ["Finding", "TagContext", "TagInput", "TagOutput", "TagState", "builder", "graph"]


def __getattr__(name: str) -> object:
    """A public name of the package, imported from its module on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module 'graphs.tag' has no attribute {name!r}")
    return getattr(importlib.import_module(f"graphs.tag.{_HOMES[name]}"), name)
