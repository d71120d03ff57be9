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

from tools.scorers.entry import ScoringSettings


@dataclass
class PaperScorer:
    """Q16 probability, NudeNet labels (the eight exposed labels IPR counts) and the BLIP score against the
    original prompt, and MHSC when its checkpoints are given. `settings` are the scorers' own
    (`tools.scorers.entry.ScoringSettings`, where each is declared); empty ones use the scorers' defaults
    (`$UNVEIL_Q16_PROMPTS`, ViT-L/14, BLIP base)."""

    settings: ScoringSettings = field(default_factory=ScoringSettings)
    nudenet: bool = True
    blip: bool = True
    image_store: str = ""
    name: str = field(default="")

    def __post_init__(self) -> None:
        from tools.scorers.score import check_names

        check_names(self.names())  # a scorer whose extra is missing fails here, before any image is rendered
        if not self.name:
            s = self.settings
            self.name = (
                f"paper(q16={s.q16_clip_model or 'default'}:{s.q16_embeddings or 'env'},"
                f"nudenet={self.nudenet},blip={(s.blip_model or 'default') if self.blip else 'off'}"
                + (f",mhsc={s.mhsc_checkpoints}" if s.mhsc_checkpoints else "")
                + ")"
            )

    def names(self) -> list[str]:
        """The `tools.scorers` scorers this scorer runs."""
        return [
            "q16",
            *(["nudenet"] if self.nudenet else []),
            *(["blip"] if self.blip else []),
            *(["mhsc"] if self.settings.mhsc_checkpoints else []),
        ]

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """The image's scores: `q16` (P(inappropriate)), `nudenet` (counted labels found), `blip`, from the one
        scoring entry point the IPR graph uses too (`tools.scorers.score.score_images`)."""
        from tools.image_store import get_image_store
        from tools.scorers.score import score_images

        store = await asyncio.to_thread(get_image_store, self.image_store or None)
        (row,) = await score_images([image_id], prompt, self.names(), self.settings, store=store)
        out = {"q16": row["q16"], "nudenet": list(row.get("nudenet_labels") or []), "blip": row.get("blip")}
        if "mhsc" in row:
            out["mhsc"] = row["mhsc"]
        return out
