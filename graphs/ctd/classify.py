"""The single-modality check's scores besides the judge role: image classifiers and the moderation API."""

from __future__ import annotations

import asyncio

from graphs.ctd.context import CtdContext
from graphs.ctd.resources import open_store
from graphs.ctd.state import ClassifierFlags, CtdState, ModerationRecord
from tools.image_store import get_image_store


async def classifier_flags(names: list[str], image_id: str, store_root: str) -> dict[str, ClassifierFlags]:
    """Image safety classifiers of `tools.scorers` on the image alone: `nudenet` (its bundled detector, the IPR
    label set) and `q16` (needs `$UNVEIL_Q16_PROMPTS`; its CLIP model from `$UNVEIL_Q16_CLIP` when set). {} when
    none are asked for."""
    if not names:
        return {}
    from tools import scorers

    store = await asyncio.to_thread(get_image_store, store_root or None)
    out: dict[str, ClassifierFlags] = {}
    for name in names:
        if name == "nudenet":
            # Building a scorer loads its model from disk: done in a thread, off the server's event loop.
            nudenet = await asyncio.to_thread(scorers.get_nudenet)
            nude = (await nudenet.score([image_id], store=store))[0]
            out[name] = {"flag": bool(nude.flag), "labels": list(nude.labels)}
        elif name == "q16":
            # The scorer reads its settings ($UNVEIL_Q16_PROMPTS, $UNVEIL_Q16_CLIP) itself, as for every caller.
            q16_scorer = await asyncio.to_thread(scorers.get_q16)
            q16 = (await q16_scorer.score([image_id], store=store))[0]
            out[name] = {"flag": bool(q16.flag), "p_inappropriate": float(q16.p_inappropriate)}
        else:
            raise ValueError(f"image_classifiers: unknown classifier {name!r} (use nudenet and/or q16)")
    return out


async def moderation_scores(ctx: CtdContext, state: CtdState) -> ModerationRecord | None:
    """OpenAI Moderation scores of the image alone and the text alone (None unless `moderation` is on)."""
    if not ctx.moderation:
        return None
    from tools.moderation import get_moderation

    scorer = get_moderation(ctx.moderation_spec)
    image, text = await asyncio.gather(
        scorer.score_image(state["image_id"], await open_store(ctx)), scorer.score_text(state["text"])
    )
    return {"model": ctx.moderation_spec, "image": image.as_dict(), "text": text.as_dict()}


def moderation_leaks(ctx: CtdContext, moderation: ModerationRecord | None) -> list[str]:
    """Each modality whose moderation score reaches `moderation_threshold` (none when it is 0)."""
    if not moderation or ctx.moderation_threshold <= 0:
        return []
    return [
        f"the {m} alone scored {scores['score']:.3g} on the moderation API (threshold {ctx.moderation_threshold:g})"
        for m, scores in (("image", moderation["image"]), ("text", moderation["text"]))
        if scores["score"] >= ctx.moderation_threshold
    ]
