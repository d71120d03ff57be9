"""The single-modality check's scores besides the judge role: image classifiers and the moderation API."""

from __future__ import annotations

import asyncio
from typing import cast

from graphs.context import ContextError
from graphs.ctd.context import CLASSIFIER_CHOICES, CtdContext
from graphs.ctd.resources import open_store
from graphs.ctd.state import ClassifierFlags, CtdState, ModerationRecord
from tools.image_store import get_image_store


async def classifier_flags(names: list[str], image_id: str, store_root: str) -> dict[str, ClassifierFlags]:
    """Image safety classifiers of `tools.scorers` on the image alone (the registered scorers with a verdict, e.g.
    `nudenet`: its bundled detector, the IPR label set; `q16`: needs `$UNVEIL_Q16_PROMPTS`, its CLIP model from
    `$UNVEIL_Q16_CLIP` when set), through the one scoring entry point, so a distributed engine's scorer pool scores
    them as it does IPR's. {} when none are asked for."""
    if not names:
        return {}
    from tools.scorers.registry import SCORERS
    from tools.scorers.score import ScoringSettings, score_images

    unknown = [name for name in names if name not in SCORERS or SCORERS[name].verdict is None]
    if unknown:
        raise ContextError(f"image_classifiers: unknown classifier(s) {', '.join(unknown)} (use {CLASSIFIER_CHOICES})")
    store = await asyncio.to_thread(get_image_store, store_root or None)
    # The scorers read their own settings ($UNVEIL_Q16_PROMPTS, $UNVEIL_Q16_CLIP), as for every caller.
    (row,) = await score_images([image_id], "", names, ScoringSettings(), store=store)
    out: dict[str, ClassifierFlags] = {}
    for name in names:
        verdict = SCORERS[name].verdict
        assert verdict is not None  # checked above
        out[name] = cast("ClassifierFlags", verdict(row))
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
