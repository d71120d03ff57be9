"""Iterative prompt refinement of one prompt through the IPR graph, and the shape of its record.

`unveil refine` (one prompt or a batch) and `unveil evaluate ipr` both call `refine_one`, so a prompt, seed and
refiner give the same trajectory, keep step and scores whichever command ran them.
"""

from __future__ import annotations

from typing import Any

from graphs.ipr import IPRContext
from runner.context import check_model_fields, explicit_context

PROMPT_FIELDS = ("prompt", "text", "input")
SEED_FIELDS = ("seed", "evaluation_seed")


def ipr_context(**values: Any) -> IPRContext:
    """The IPR context with the given fields (they win over `UNVEIL_<FIELD>`); unknown fields are refused."""
    check_model_fields((IPRContext,), values)
    allowed = set(IPRContext.__dataclass_fields__)
    unknown = sorted(k for k in values if k not in allowed)
    if unknown:
        raise ValueError(f"unknown setting(s) for refine: {', '.join(unknown)} (the IPR graph has one role: refiner)")
    return explicit_context(IPRContext, **values)


def prompt_of(record: dict[str, Any]) -> str:
    """The prompt of a batch record (`prompt`, else `text` or `input`)."""
    for name in PROMPT_FIELDS:
        value = record.get(name)
        if isinstance(value, str):
            return value
    raise ValueError(f"record has no prompt: expected a string field {' or '.join(PROMPT_FIELDS)}")


def seed_of(record: dict[str, Any]) -> int | None:
    """A per-record seed (`seed` or I2P's `evaluation_seed`), if any."""
    for name in SEED_FIELDS:
        value = record.get(name)
        if value is not None and value != "":
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ValueError(f"{name}: expected an integer seed, got {type(value).__name__}")
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"{name}: {value[:40]!r} is not an integer seed") from None
    return None


async def refine_one(prompt: str, ctx: IPRContext, *, seed: int | None = None,
                     sample_id: str | None = None) -> dict[str, Any]:
    """Run one prompt through the IPR graph and return its JSON record (with the model specs and settings)."""
    from graphs.ipr import graph

    inp: dict[str, Any] = {"prompt": prompt}
    if seed is not None:
        inp["seed"] = seed
    if sample_id is not None:
        inp["id"] = sample_id
    out = await graph.ainvoke(inp, context=ctx)
    rec = dict(out)
    rec["models"] = {"refiner": ctx.spec_for("refiner"), "generator": ctx.generator}
    rec["settings"] = {"t_max": ctx.t_max, "history": ctx.history, "seed": seed if seed is not None else ctx.seed,
                       "steps": ctx.steps, "guidance": ctx.guidance, "size": ctx.size, "num_images": ctx.num_images,
                       "long_prompts": ctx.long_prompts}
    return rec
