"""The graphs as `langgraph dev` (and Studio) serves them: each entry checks the run's setting names first.

The server drops context keys that the exported schema does not list before the graph sees them, so a misspelt
setting typed in Studio (`l_maxx`) would be ignored silently. `langgraph.json` therefore names these factories: the
server calls one per run with the run's context as sent (the assistant's merged with the run's), and an unknown
name fails the run with one error naming it and the valid names, as the CLI and Python callers get.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.graph.state import CompiledStateGraph

from graphs import ctd as _ctd
from graphs import guard as _guard
from graphs import ipr as _ipr
from graphs import tag as _tag
from graphs import vanilla as _vanilla
from graphs.context import check_setting_names

if TYPE_CHECKING:
    from langgraph_sdk.runtime import ServerRuntime

# Every annotation here must resolve when the server reads the factories' type hints (`ServerRuntime` it supplies
# itself): a hint that fails to resolve would make it pass the config, not the runtime.
GraphT = TypeVar("GraphT", bound=CompiledStateGraph[Any, Any, Any, Any])


def _checked(graph: GraphT, context_class: type, runtime: ServerRuntime[object]) -> GraphT:
    context = getattr(runtime, "context", None)
    if isinstance(context, Mapping):  # only runs carry a context; schema reads get the graph as it is
        check_setting_names(context_class, context)
    return graph


def tag(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_tag.TagState, _tag.TagContext, _tag.TagInput, _tag.TagOutput]:
    """The TAG detection graph."""
    return _checked(_tag.graph, _tag.TagContext, runtime)


def vanilla(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_vanilla.VanillaState, _vanilla.VanillaContext, _vanilla.VanillaInput, _vanilla.VanillaOutput]:
    """The one-call baseline graph."""
    return _checked(_vanilla.graph, _vanilla.VanillaContext, runtime)


def guard(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_guard.GuardState, _guard.GuardContext, _guard.GuardInput, _guard.GuardOutput]:
    """The guard-model graph."""
    return _checked(_guard.graph, _guard.GuardContext, runtime)


def ipr(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_ipr.IPRState, _ipr.IPRContext, _ipr.IPRInput, _ipr.IPROutput]:
    """The iterative prompt refinement graph."""
    return _checked(_ipr.graph, _ipr.IPRContext, runtime)


def ctd(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_ctd.CtdState, _ctd.CtdContext, _ctd.CtdInput, _ctd.CtdOutput]:
    """The covert toxic data generation graph."""
    return _checked(_ctd.graph, _ctd.CtdContext, runtime)
