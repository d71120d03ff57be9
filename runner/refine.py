"""Iterative prompt refinement of one prompt through the IPR graph, and the shape of its record.

`unveil refine` (one prompt or a batch) and `unveil evaluate ipr` both call `refine_one`, so a prompt, seed and
refiner give the same trajectory, keep step and scores whichever command ran them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.types import StreamMode

from agents.spec import redact_spec
from graphs.context import ContextError
from graphs.ipr import IPRContext, IPRInput, IPROutput, check_scoring, validate_settings
from runner.context import check_model_fields, context_settings, explicit_context
from tools.errors import InputDataError

PROMPT_FIELDS = ("prompt", "text", "input")
OUTPUT_FIELDS = frozenset(IPROutput.__annotations__)
SEED_FIELDS = ("seed", "evaluation_seed")


def ipr_context(**values: Any) -> IPRContext:
    """The IPR context with the given fields (they win over `UNVEIL_<FIELD>`); unknown fields are refused."""
    check_model_fields((IPRContext,), values)
    allowed = set(IPRContext.__dataclass_fields__)
    unknown = sorted(k for k in values if k not in allowed)
    if unknown:
        raise ContextError(f"unknown setting(s) for refine: {', '.join(unknown)} (the IPR graph has one role: refiner)")
    return explicit_context(IPRContext, **values)


def check_refine_settings(ctx: IPRContext) -> None:
    """Refuse settings that cannot run before the first render (not after every image of a batch was paid for):
    the graph's own checks and, with scoring on, every scorer's configuration (an `UnveilError` naming the flag)."""
    validate_settings(ctx)
    check_scoring(ctx)


def refine_settings(ctx: IPRContext, *, record_seeds: bool = True) -> dict[str, Any]:
    """What makes a refine output's records (its identity, see `runner.output_identity.OutputIdentity`): the refiner and
    generator, the IPR and render settings of `ctx`, and whether records' own seeds are used."""
    return {**context_settings(ctx), "record_seeds": record_seeds}


def prompt_of(record: dict[str, Any]) -> str:
    """The prompt of a batch record (`prompt`, else `text` or `input`)."""
    for name in PROMPT_FIELDS:
        value = record.get(name)
        if isinstance(value, str):
            return value
    raise InputDataError(f"record has no prompt: expected a string field {' or '.join(PROMPT_FIELDS)}")


def seed_of(record: dict[str, Any]) -> int | None:
    """A per-record seed (`seed` or I2P's `evaluation_seed`), if any."""
    for name in SEED_FIELDS:
        value = record.get(name)
        if value is not None and value != "":
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise InputDataError(f"{name}: expected an integer seed, got {type(value).__name__}")
            try:
                return int(value)
            except ValueError:
                raise InputDataError(f"{name}: {str(value)[:40]!r} is not an integer seed") from None
    return None


def describe_update(node: str, update: dict[str, Any], ctx: IPRContext) -> str | None:
    """A progress line for a finished node of the IPR graph (what happens next), or None."""
    traj = update.get("trajectory") or []
    last = traj[-1] if traj else {}
    render = f"({ctx.width}x{ctx.height}, {ctx.steps} steps, {ctx.num_images} image(s))"
    if node == "start":
        return f"step 0: rendering the original prompt {render}..."
    if node == "generate" and last:
        return f"step {last.get('step')}: rendered; " + ("scoring..." if ctx.score else "asking the refiner...")
    if node == "refine" and "current_prompt" in update:
        return f"step {update.get('step')}: rendering the refined prompt {render}..."
    return None


async def refine_one(
    prompt: str,
    ctx: IPRContext,
    *,
    seed: int | None = None,
    sample_id: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run one prompt through the IPR graph and return its JSON record (with the model specs and settings).

    `progress`, if given, receives a line as each step starts rendering or goes to the refiner (a render of a big
    model on a CPU takes minutes).
    """
    from graphs.ipr import graph

    inp: IPRInput = {"prompt": prompt}
    if seed is not None:
        inp["seed"] = seed
    if sample_id is not None:
        inp["id"] = sample_id
    out: dict[str, Any] = {}
    if progress is None:
        out = dict(await graph.ainvoke(inp, context=ctx))
    else:
        modes: list[StreamMode] = ["updates", "values"]
        part: Any
        async for part in graph.astream(inp, context=ctx, stream_mode=modes):
            mode, chunk = part
            if mode == "values":
                out = {k: v for k, v in chunk.items() if k in OUTPUT_FIELDS}  # what ainvoke returns
                continue
            for node, update in chunk.items():
                line = describe_update(node, update or {}, ctx)
                if line:
                    progress(line)
    rec = dict(out)
    rec["models"] = {"refiner": redact_spec(ctx.spec_for("refiner")), "generator": ctx.generator}
    rec["settings"] = {
        "t_max": ctx.t_max,
        "history": ctx.history,
        "seed": seed if seed is not None else ctx.seed,
        "seed_mode": ctx.seed_mode,
        "num_images": ctx.num_images,
        **ctx.render_settings(),
    }
    return rec
