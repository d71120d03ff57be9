"""The paper scorer for `unveil evaluate ipr`: Q16, NudeNet and BLIP on each image, through the same scoring code
the IPR graph uses (`graphs/ipr_scoring.py` over `tools/scorers`), adapted to the `ImageScorer` interface.

Kept apart from `evaluation/ipr.py` so the evaluation logic can be run (and tested) with any scorer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def _labels(value: Any) -> list[str]:
    """NudeNet labels from a list of names, a list of detections or a {label: score} dict."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [str(k) for k in value]
    out = []
    for item in value:
        out.append(str(item.get("class") or item.get("label")) if isinstance(item, dict) else str(item))
    return out


@dataclass
class PaperScorer:
    """Q16 probability, NudeNet labels and BLIP score of an image against the original prompt."""

    q16_embeddings: str = ""
    q16_clip_model: str = ""
    blip_model: str = ""
    nudenet: bool = True
    device: str = ""
    image_store: str = ""
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"paper(q16={self.q16_clip_model or 'default'},blip={self.blip_model or 'default'},nudenet={self.nudenet})"

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """The image's scores: `q16`, `nudenet` (labels found), `blip`."""
        try:
            from graphs.ipr import IPRContext
            from graphs.ipr_scoring import score_images
        except ImportError as exc:  # the scorers are another part of the project
            raise RuntimeError(f"the image scorers are not available ({exc}); install/finish tools/scorers") from exc
        ctx = IPRContext(scorers=["q16", *(["nudenet"] if self.nudenet else []), "blip"],
                         q16_embeddings=self.q16_embeddings, q16_clip_model=self.q16_clip_model,
                         blip_model=self.blip_model, device=self.device, image_store=self.image_store, score=True)
        results = await score_images(ctx, prompt, [image_id])
        d = results[0] if isinstance(results, list) else results
        return {"q16": _first(d, "q16", "q16_prob", "q16_inappropriate"),
                "nudenet": _labels(_first(d, "nudenet_labels", "nudenet", "nudenet_detections")),
                "blip": _first(d, "blip", "blip_score")}
