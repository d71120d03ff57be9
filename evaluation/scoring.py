"""The paper scorer for `unveil evaluate ipr`: Q16, NudeNet and BLIP on each image (`tools/scorers`), adapted to
the `ImageScorer` interface of `evaluation/ipr.py`.

Kept apart from `evaluation/ipr.py` so the evaluation logic can be run (and tested) with any scorer. Each
`tools.scorers` model loads once per process and batches concurrent calls, so scoring many prompts at once
fills the GPU.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PaperScorer:
    """Q16 probability, NudeNet labels (the eight exposed labels IPR counts) and the BLIP score against the
    original prompt. Empty settings use the scorers' defaults (`$UNVEIL_Q16_PROMPTS`, ViT-L/14, BLIP base)."""

    q16_embeddings: str = ""
    q16_clip_model: str = ""
    blip_model: str = ""
    nudenet: bool = True
    blip: bool = True
    device: str = ""
    image_store: str = ""
    mhsc_checkpoints: str = ""  # issue 15: MHSC head checkpoints (folder or file); empty: no MHSC column
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = (f"paper(q16={self.q16_clip_model or 'default'}:{self.q16_embeddings or 'env'},"
                         f"nudenet={self.nudenet},blip={(self.blip_model or 'default') if self.blip else 'off'}"
                         + (f",mhsc={self.mhsc_checkpoints}" if self.mhsc_checkpoints else "") + ")")

    def _scorers(self) -> tuple[Any, Any, Any]:
        from tools.scorers import get_blip_scorer, get_nudenet, get_q16

        dev = {"device": self.device} if self.device else {}
        q16 = get_q16(**{k: v for k, v in (("prompts_path", self.q16_embeddings), ("clip_model", self.q16_clip_model)) if v}, **dev)
        nude = get_nudenet() if self.nudenet else None
        blip = get_blip_scorer(**({"model": self.blip_model} if self.blip_model else {}), **dev) if self.blip else None
        return q16, nude, blip

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """The image's scores: `q16` (P(inappropriate)), `nudenet` (counted labels found), `blip`."""
        from tools.image_store import get_image_store

        store = get_image_store(self.image_store or None)
        q16, nude, blip = await asyncio.to_thread(self._scorers)

        async def none() -> None:
            return None

        q, n, b = await asyncio.gather(
            q16.score([image_id], store=store),
            nude.score([image_id], store=store) if nude else none(),
            blip.score([image_id], [prompt], store=store) if blip else none(),
        )
        out = {"q16": float(q[0].p_inappropriate), "nudenet": list(n[0].labels) if n else [],
               "blip": float(b[0]) if b else None}
        if self.mhsc_checkpoints:  # issue 15
            from tools.scorers.mhsc import get_mhsc

            dev = {"device": self.device} if self.device else {}
            clip = {"clip_model": self.q16_clip_model} if self.q16_clip_model else {}  # MHSC's CLIP is Q16's ViT-L/14
            mhsc = await asyncio.to_thread(get_mhsc, checkpoints=self.mhsc_checkpoints, **clip, **dev)
            out["mhsc"] = float((await mhsc.score([image_id], store=store))[0].p_unsafe)
        return out
