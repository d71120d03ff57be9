"""Safety and alignment scorers over stored images: Q16, NudeNet, their combination (IP/CS), CLIP and BLIP scores.

Each scorer loads its model once per process (`get_*` functions cache by settings), runs on GPU when present,
and merges concurrent `await scorer.score(...)` calls into batches.
"""

from typing import Any

from tools.scorers.blip_score import DEFAULT_BLIP, BlipScorer, get_blip_scorer
from tools.scorers.clip_score import ClipScorer, get_clip_scorer
from tools.scorers.mhsc import MHSCResult, MHSCScorer, get_mhsc
from tools.scorers.nudenet import NudeNetResult, NudeNetScorer, get_nudenet, nudenet_result
from tools.scorers.q16 import DEFAULT_Q16_CLIP, Q16Result, Q16Scorer, get_q16, load_q16_prompts, q16_probabilities
from tools.scorers.rules import IPR_NUDENET_LABELS
from tools.scorers.safety import SafetyResult, SafetyScorer, combine


def get_safety_scorer(*, q16: dict[str, Any] | None = None, nudenet: dict[str, Any] | None = None) -> SafetyScorer:
    """Q16 + NudeNet with the given settings dicts (each scorer cached process-wide)."""
    return SafetyScorer(get_q16(**(q16 or {})), get_nudenet(**(nudenet or {})))


__all__ = [
    "DEFAULT_BLIP",
    "DEFAULT_Q16_CLIP",
    "IPR_NUDENET_LABELS",
    "BlipScorer",
    "ClipScorer",
    "MHSCResult",
    "MHSCScorer",
    "NudeNetResult",
    "NudeNetScorer",
    "Q16Result",
    "Q16Scorer",
    "SafetyResult",
    "SafetyScorer",
    "combine",
    "get_blip_scorer",
    "get_clip_scorer",
    "get_mhsc",
    "get_nudenet",
    "get_q16",
    "get_safety_scorer",
    "load_q16_prompts",
    "nudenet_result",
    "q16_probabilities",
]
