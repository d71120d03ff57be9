"""The graphs as `langgraph dev` (and Studio) serves them: each entry checks the run's setting names first.

The server drops context keys that the exported schema does not list before the graph sees them, so a misspelt
setting typed in Studio (`l_maxx`) would be ignored silently. `langgraph.json` therefore names these factories: the
server calls one per run with the run's context as sent (the assistant's merged with the run's), and an unknown
name fails the run with one error naming it and the valid names, as the CLI and Python callers get. A context
that names a file outside the server's folders or an endpoint the server does not allow fails the same way
(`graphs.server_context`): it came from whoever reaches the server, not from its operator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.graph.state import CompiledStateGraph

from graphs import ctd as _ctd
from graphs import guard as _guard
from graphs import ipr as _ipr
from graphs import tag as _tag
from graphs import vanilla as _vanilla
from graphs.context import check_setting_names
from graphs.server_context import check_server_context

if TYPE_CHECKING:
    from langgraph_sdk.runtime import ServerRuntime

# Every annotation here must resolve when the server reads the factories' type hints (`ServerRuntime` it supplies
# itself): a hint that fails to resolve would make it pass the config, not the runtime.
GraphT = TypeVar("GraphT", bound=CompiledStateGraph[Any, Any, Any, Any])


def _check(context_class: type, context: Mapping[str, Any]) -> None:
    check_setting_names(context_class, context)
    context_class(**context)  # every value checked first, so a bad one is named as the CLI names it
    # Whoever reaches the server sent it: files only from the server's folders, endpoints only its own.
    check_server_context(context_class, context)


async def _checked(graph: GraphT, context_class: type, runtime: ServerRuntime[object]) -> GraphT:
    context = getattr(runtime, "context", None)
    if isinstance(context, Mapping):  # only runs carry a context; schema reads get the graph as it is
        # Off the event loop: the checks look at the file system (the server refuses blocking calls on its loop).
        await asyncio.to_thread(_check, context_class, dict(context))
    return graph


async def tag(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_tag.TagState, _tag.TagContext, _tag.TagInput, _tag.TagOutput]:
    """The TAG detection graph."""
    return await _checked(_tag.graph, _tag.TagContext, runtime)


async def vanilla(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_vanilla.VanillaState, _vanilla.VanillaContext, _vanilla.VanillaInput, _vanilla.VanillaOutput]:
    """The one-call baseline graph."""
    return await _checked(_vanilla.graph, _vanilla.VanillaContext, runtime)


async def guard(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_guard.GuardState, _guard.GuardContext, _guard.GuardInput, _guard.GuardOutput]:
    """The guard-model graph."""
    return await _checked(_guard.graph, _guard.GuardContext, runtime)


async def ipr(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_ipr.IPRState, _ipr.IPRContext, _ipr.IPRInput, _ipr.IPROutput]:
    """The iterative prompt refinement graph."""
    return await _checked(_ipr.graph, _ipr.IPRContext, runtime)


async def ctd(
    runtime: ServerRuntime[object],
) -> CompiledStateGraph[_ctd.CtdState, _ctd.CtdContext, _ctd.CtdInput, _ctd.CtdOutput]:
    """The covert toxic data generation graph."""
    return await _checked(_ctd.graph, _ctd.CtdContext, runtime)
