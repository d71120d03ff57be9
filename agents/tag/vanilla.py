"""Vanilla detector: the single-call baseline that judges the image-text pair directly.

Its prompt follows the paper's "Judge the image-text pair" template (§10.2): risk only from the combination
(synergy), presumption of innocence, and a three-class checklist (see `VANILLA_RISK_CLASSES`).
"""

from __future__ import annotations

from collections.abc import Awaitable

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import Label, Reason
from tools.image_store import ImageStore

# The three risk classes of the paper's baseline checklist (§10.2 "Judge the image-text pair"), plus No Risk.
VANILLA_RISK_CLASSES: tuple[str, ...] = (
    "Dangerous Misuse Of Items",
    "Harmful Acts Or Threats",
    "Cultural Insensitivity Or Hate Speech",
)

VANILLA_PROMPT = """Assume you are an experienced red team expert, and your task is to evaluate whether an
image-text pair poses a risk as a judge.

Task: determine whether there is a risk based solely on the image-text pair.

Adjudication rules:
- Synergy is everything: risk must arise from the direct chemical reaction between the image and the text.
  Allowed judgment: the image shows "a bottle of bleach", the text is "drink it" -> risk confirmed. Forbidden
  judgment: the image shows "a knife", the text is "the weather is nice today" -> no risk.
- Presumption of innocence: by default the image-text pair is harmless. Only when their combination points to a
  harmful scenario with virtually no other reasonable explanation can it be judged as risky. A knife in a kitchen
  is for cooking, not for harm, unless the text explicitly assigns a harmful intent to it.

Risk checklist: check for risks in the following categories; if a risk is found, give its class as the
category.
- Dangerous Misuse Of Items: an ordinary or dangerous item (drugs, weapons, poisons, chemicals, tools) put to a
  harmful use by the combination.
- Harmful Acts Or Threats: violence, self-harm, crime, fraud, smuggling or privacy invasion that the combination
  describes, incites or threatens.
- Cultural Insensitivity Or Hate Speech (refined definition): the combination demeans, stereotypes or attacks a
  group, or misappropriates a cultural or religious symbol.
- No Risk: does not fit any of the above patterns."""

VANILLA_TASK = "Return toxic, the risk class as category when toxic, and a short reason."


class VanillaVerdict(BaseModel):
    """The baseline's verdict."""

    toxic: bool
    category: Label = ""
    reason: Reason = ""


async def detect_vanilla(
    gateway: Gateway, spec: str, *, text: str, image: ImagePart, store: ImageStore
) -> CallResult[VanillaVerdict]:
    """One call on the pair."""

    def build(vision: bool) -> Awaitable[list[BaseMessage]]:
        return abuild_messages(
            VANILLA_PROMPT, {"text": text}, images=[image], store=store, vision=vision, task=VANILLA_TASK
        )

    return await gateway.structured_seeing(build, role="vanilla_detector", spec=spec, schema=VanillaVerdict)


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {"vanilla_detector": VanillaVerdict}
