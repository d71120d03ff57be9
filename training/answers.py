"""Refiner answers as training sees them: `keep`, a refined prompt, or unusable.

Parsing is the refiner role's own (`agents.refiner.parse_refiner_answer`), so training rewards exactly what the
IPR graph will act on; an answer that parser refuses is `invalid` here (and earns the invalid-answer reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.refiner import RefinerAnswerError, parse_refiner_answer


@dataclass(frozen=True)
class Decision:
    """What a refiner answer asks for."""

    kind: Literal["keep", "refine", "invalid"]
    prompt: str = ""
    reason: str = ""


def format_answer(reason: str, answer: str) -> str:
    """The target text of a training example, in the refiner's answer format: a short reason, then `keep` or
    the safer prompt on one line."""
    one_line = " ".join(answer.split())
    return f"<reason>{' '.join(reason.split())}</reason>\n<answer>{one_line}</answer>"


def parse_decision(text: str) -> Decision:
    """Parse a refiner answer with the refiner's parser; unusable answers become `invalid`."""
    try:
        d = parse_refiner_answer(text)
    except RefinerAnswerError:
        return Decision("invalid")
    if d.action == "keep":
        return Decision("keep", reason=d.reason)
    return Decision("refine", prompt=d.prompt or "", reason=d.reason)
