"""The labeller role: the teacher VLM that labels (prompt, image) pairs for the refiner's SFT dataset.

It follows the labelling protocol of the IPR paper's Appendix B, restated for this project: a deliberately
strict safety reviewer sees the user's prompt and the image generated from it, keeps the pair only when both are
clearly safe, and otherwise rewrites the prompt into a safe one that stays close to the original intent. Its
answer (a short reason plus `keep` or the safer prompt) becomes the refiner's training target.
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, field_validator

from agents.content import ImagePart, build_messages
from agents.gateway import Gateway
from agents.usage import RunUsage
from tools.image_store import ImageStore

LABELLER_ROLE = "labeller"

LABELLER_PROMPT = """You are an extremely conservative content-safety model with zero tolerance for questionable
content. You label examples that will teach a smaller model when an image can be kept and how to repair a prompt
that produced an unsafe image. You analyse both the text prompt and the image generated from it with the strictest
standards. Return `keep` only when both the prompt and the image are absolutely safe; only if the image contains
unsafe elements do you modify the prompt, so that it will generate a safe image while preserving as much of the
original creative intent as possible.

You get a user's prompt, usually one that describes a scenario with negative or harmful content, and the image a
text-to-image model produced from it. Calibration: answer `keep` about 70% less often than you might initially
think appropriate; be extremely conservative in your safety assessment. Work through these steps:
STEP 1: Assess the safety of the image with maximum strictness. If, and only if, both modalities are 100% safe,
   decide `keep` and go straight to STEP 5.
STEP 2: Identify the risky elements in the image: any unsafe visual content, including violence, weapons,
   harmful stereotypes, inappropriate content, or disturbing imagery.
STEP 3: Detoxify, only if the image is unsafe: modify the prompt so that it generates a safer image while
   preserving as much of the original creative intent as possible (subject, setting, composition, style). The
   result is a prompt for the image model, not a refusal or a disclaimer.
STEP 4: Use these examples as guidance:
   - Original: "A cat with a gun on the table" -> Modified: "A cat with a toy water gun on the table"
   - Original: "veins on an arm forming a rose" -> Modified: "Branches on an arm forming a rose"
   - Original: "A cute puppy" (but the image shows a violent scene) -> Modified: "A cute puppy playing in the park"
STEP 5: Final output: your reason for keeping or modifying the prompt, based on the image safety analysis, in
   one or two sentences; and your decision: exactly `keep`, or the modified prompt on a single line."""

# The teacher of the IPR paper's dataset is GPT-4.1 (Appendix B); the embedded 135M demonstration model would
# write a training set of noise, so building data with it needs an explicit opt-in.
PAPER_TEACHER = "openai:gpt-4.1"

LABELLER_TASK = "Label this example: a one- or two-sentence reason, and the decision (`keep` or the safer prompt)."


class LabellerAnswer(BaseModel):
    """The labeller's answer: a short reason and the decision."""

    reason: str = Field(
        description="one or two sentences explaining why the image is kept or how the prompt was made safe"
    )
    decision: str = Field(description="exactly 'keep', or the rewritten safe prompt on a single line")

    @field_validator("decision")
    @classmethod
    def _one_line(cls, value: str) -> str:
        text = " ".join(str(value).split()).strip().strip("\"'")
        if not text:
            raise ValueError("the decision is empty: answer 'keep' or a safer prompt")
        return "keep" if text.lower().rstrip(".!") in ("keep", "[keep]") else text

    @property
    def keep(self) -> bool:
        """Whether the labeller kept the image."""
        return self.decision == "keep"


def build_labeller_messages(
    prompt: str, image_id: str, *, store: ImageStore, vision: bool = True, image_description: str | None = None
) -> list[BaseMessage]:
    """The labeller's messages: the prompt as data, the image as an image block (or its description)."""
    return build_messages(
        LABELLER_PROMPT,
        {"user_prompt": prompt},
        images=[ImagePart("generated_image", image_id, image_description)],
        store=store,
        vision=vision,
        task=LABELLER_TASK,
    )


async def label_example(
    gateway: Gateway, spec: str, *, prompt: str, image_id: str, store: ImageStore, role: str = LABELLER_ROLE
) -> tuple[LabellerAnswer, RunUsage, bool]:
    """One labelling call through the gateway: (answer, usage, cache hit)."""
    messages = build_labeller_messages(prompt, image_id, store=store, vision=gateway.vision(spec))
    result = await gateway.structured(
        role=role, spec=spec, schema=LabellerAnswer, messages=messages, usage_role=LABELLER_ROLE
    )
    return result.value, result.usage, result.cache_hit


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {f"{LABELLER_ROLE} (training data)": LabellerAnswer}
