"""The paper scorer for `unveil evaluate ipr`: Q16, NudeNet and BLIP on each image through the one scoring entry
point (`tools.scorers.score.score_images`), adapted to the `ImageScorer` interface of `evaluation/ipr_cache.py`.

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
    mhsc_checkpoints: str = ""  # MHSC head checkpoints (folder or file); empty: no MHSC column
    name: str = field(default="")

    def __post_init__(self) -> None:
        from tools.scorers.score import check_names

        check_names(self.names())  # a scorer whose extra is missing fails here, before any image is rendered
        if not self.name:
            self.name = (
                f"paper(q16={self.q16_clip_model or 'default'}:{self.q16_embeddings or 'env'},"
                f"nudenet={self.nudenet},blip={(self.blip_model or 'default') if self.blip else 'off'}"
                + (f",mhsc={self.mhsc_checkpoints}" if self.mhsc_checkpoints else "")
                + ")"
            )

    def names(self) -> list[str]:
        """The `tools.scorers` scorers this scorer runs."""
        return [
            "q16",
            *(["nudenet"] if self.nudenet else []),
            *(["blip"] if self.blip else []),
            *(["mhsc"] if self.mhsc_checkpoints else []),
        ]

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """The image's scores: `q16` (P(inappropriate)), `nudenet` (counted labels found), `blip`, from the one
        scoring entry point the IPR graph uses too (`tools.scorers.score.score_images`)."""
        from tools.image_store import get_image_store
        from tools.scorers.score import ScoringSettings, score_images

        names = self.names()
        settings = ScoringSettings(
            q16_embeddings=self.q16_embeddings,
            q16_clip_model=self.q16_clip_model,
            blip_model=self.blip_model,
            mhsc_checkpoints=self.mhsc_checkpoints,
            device=self.device,
        )
        store = await asyncio.to_thread(get_image_store, self.image_store or None)
        (row,) = await score_images([image_id], prompt, names, settings, store=store)
        out = {"q16": row["q16"], "nudenet": list(row.get("nudenet_labels") or []), "blip": row.get("blip")}
        if "mhsc" in row:
            out["mhsc"] = row["mhsc"]
        return out
