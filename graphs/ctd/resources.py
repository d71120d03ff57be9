"""The text-to-image generator and the image store a run's context names."""

from __future__ import annotations

import asyncio

from graphs.ctd.context import CtdContext
from tools.image_store import ImageStore, get_image_store
from tools.t2i.base import ImageGenerator
from tools.t2i.registry import open_generator


def ctd_generator(ctx: CtdContext) -> ImageGenerator:
    """The text-to-image generator of a run (the registry loads each pipeline once per process and shares it).
    Eraser prompts often run past CLIP's 77 tokens; the context's `long_prompts` policy (default: truncate, as
    Stable Diffusion itself does) decides."""
    return open_generator(
        ctx.generator, store=get_image_store(ctx.image_store or None), long_prompts=ctx.long_prompts, load=True
    )


async def open_store(ctx: CtdContext) -> ImageStore:
    """The run's image store, opened in a thread."""
    # The first use of a store creates its folder: done in a thread, like every other file access of a node.
    return await asyncio.to_thread(get_image_store, ctx.image_store or None)
