"""Explainer: a natural-language explanation that cites both association paths of the toxic pair."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agents.content import abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import LongText, ShortText

EXPLAIN_PROMPT = """You explain a covert-toxicity finding to a content moderator. You are given the image-side
association path and the text-side association path (each from a root concept to the concept where the risk
appears, with the probability of each step), the risk category, the judge's reason, and the pair's Multimodal
Toxicity Covertness score c (mtc: 0 when the image and text are toxic together as they are, near 1 when the risk
needs long, improbable association paths). Say in two to four sentences how each path leads from what is visible
or written to the risky concept, what the two together hiddenly mean, why that is harmful, and how covert it is
given c. Cite the concepts of both paths by name."""

EXPLAIN_TASK = "Return explanation (two to four sentences) and hidden_meaning (a short phrase)."


class Explanation(BaseModel):
    """The explanation of a toxic finding."""

    # The explanation comes first so a model cut at its token limit still delivers it.
    explanation: LongText
    hidden_meaning: ShortText = ""


def _steps(path: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A path as the explainer reads it: each concept with the association that reached it and that step's
    probability (the root has none), rounded so the numbers stay legible."""
    out: list[dict[str, Any]] = [{"concept": str(path[0]["concept"]), "root": True}] if path else []
    out.extend(
        {
            "concept": str(step["concept"]),
            "association": step.get("association"),
            "probability": round(float(step["prob"]), 4),
        }
        for step in path[1:]
    )
    return out


async def explain(
    gateway: Gateway,
    spec: str,
    *,
    text: str,
    visual_path: list[dict[str, Any]],
    textual_path: list[dict[str, Any]],
    finding: dict[str, Any],
    mtc: float,
) -> CallResult[Explanation]:
    """Explain the toxic pair, citing both paths. Each path is the list of its steps from the root (`concept`,
    `association`, `prob`: the step's transition probability); the model sees every step's probability, each
    path's cumulative probability and the detection's MTC score c, the inputs §3.3 Step 4 names ("the detected
    (y, c) and the semantic path"). Everything but the instructions goes in as delimited data."""

    def cumulative(path: list[dict[str, Any]]) -> float:
        prob = 1.0
        for step in path[1:]:
            prob *= float(step["prob"])
        return round(prob, 6)

    messages = await abuild_messages(
        EXPLAIN_PROMPT,
        {
            "text": text,
            "image_path": {"steps": _steps(visual_path), "path_probability": cumulative(visual_path)},
            "text_path": {"steps": _steps(textual_path), "path_probability": cumulative(textual_path)},
            "finding": finding,
            "detection": {"toxic": True, "mtc": round(float(mtc), 6)},
        },
        task=EXPLAIN_TASK,
    )
    return await gateway.structured(role="explainer", spec=spec, schema=Explanation, messages=messages)


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {"explainer": Explanation}
