"""One CTD scene through the generation graph: run, resume from its checkpoint, or read back a finished one.

`unveil generate` runs its scenes with `run_scene` under the batch runner and shapes each record with
`runner.ctd_dataset.sample_record`; a distributed engine calls the same function.
"""

from __future__ import annotations

import asyncio
from typing import Any

from graphs.ctd import CtdContext, ctd_generator
from runner.batch import BatchItem


def scene_items(category: str, n: int, *, scene: str | None, erase_routine: str | None, seed: int) -> list[BatchItem]:
    """Deterministic scene ids and seeds, so a rerun of the same command names the same scenes."""
    return [BatchItem(f"{category}-{i:05d}", {"category": category, "scene_hint": scene, "erase_routine": erase_routine,
                                               "seed": seed + 1000 * i}) for i in range(n)]


async def run_scene(graph: Any, sample_id: str, record: dict[str, Any], ctx: CtdContext, *,
                    thread_prefix: str = "ctd") -> dict[str, Any]:
    """Run (or resume, or read back) one scene's thread; returns the graph's final values."""
    config: Any = {"configurable": {"thread_id": f"{thread_prefix}:{sample_id}"}}
    snapshot = await graph.aget_state(config)
    if snapshot.values and not snapshot.next and snapshot.values.get("status"):
        return dict(snapshot.values)  # finished before a kill, but its record was never written
    if snapshot.next:
        await graph.ainvoke(None, config, context=ctx)  # resume from the last checkpoint
    else:
        await graph.ainvoke({"id": sample_id, **record}, config, context=ctx)
    final = await graph.aget_state(config)
    if final.next:
        raise RuntimeError(f"scene {sample_id} stopped at {final.next} (an interrupt needs review mode interrupt)")
    return dict(final.values)


async def preflight_t2i(ctx: CtdContext) -> None:
    """Load the text-to-image pipeline once before any scene starts, so a missing model is one clear error
    instead of a failure per scene (raises ValueError naming the spec)."""
    try:
        generator = await asyncio.to_thread(ctd_generator, ctx)
        if isinstance(getattr(type(generator), "pipeline", None), property):
            await asyncio.to_thread(getattr, generator, "pipeline")
    except Exception as exc:  # noqa: BLE001 - shown to the user as the reason nothing ran
        raise ValueError(f"t2i {ctx.t2i}: the text-to-image model cannot be used: {exc}") from exc
