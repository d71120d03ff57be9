"""Explainer: a natural-language explanation that cites both association paths of the toxic pair."""

from __future__ import annotations

from pydantic import BaseModel

from agents.content import abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import LongText, ShortText

EXPLAIN_PROMPT = """You explain a covert-toxicity finding to a content moderator. You are given the image-side
association path and the text-side association path (each from a root concept to the concept where the risk
appears, with the probability of each step), the risk category and the judge's reason. Say in two to four
sentences how each path leads from what is visible or written to the risky concept, what the two together
hiddenly mean, and why that is harmful. Cite the concepts of both paths by name."""

EXPLAIN_TASK = "Return explanation (two to four sentences) and hidden_meaning (a short phrase)."


class Explanation(BaseModel):
    """The explanation of a toxic finding."""

    # The explanation comes first so a model cut at its token limit still delivers it.
    explanation: LongText
    hidden_meaning: ShortText = ""


async def explain(
    gateway: Gateway, spec: str, *, text: str, visual_path: list[str], textual_path: list[str], finding: dict
) -> CallResult[Explanation]:
    """Explain the toxic pair, citing both paths."""
    messages = await abuild_messages(
        EXPLAIN_PROMPT,
        {
            "text": text,
            "image_path": " -> ".join(visual_path),
            "text_path": " -> ".join(textual_path),
            "finding": finding,
        },
        task=EXPLAIN_TASK,
    )
    return await gateway.structured(role="explainer", spec=spec, schema=Explanation, messages=messages)
