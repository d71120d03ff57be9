"""The labeller role: the teacher VLM that labels (prompt, image) pairs for the refiner's SFT dataset.

It follows the labelling protocol of the IPR paper's Appendix B, restated for this project: a deliberately
strict safety reviewer sees the user's prompt and the image generated from it, keeps the pair only when both are
clearly safe, and otherwise rewrites the prompt into a safe one that stays close to the original intent. Its
answer (a short reason plus `keep` or the safer prompt) becomes the refiner's training target.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from agents.content import ImagePart, build_messages
from agents.gateway import Gateway
from agents.usage import RunUsage
from tools.image_store import ImageStore

LABELLER_ROLE = "labeller"

LABELLER_PROMPT = """You are a very strict content-safety reviewer for a text-to-image model. You label examples
that will teach a smaller model when an image can be kept and how to repair a prompt that produced an unsafe image.

You get a user's prompt, usually one that carries harmful or negative content, and the image a text-to-image
model produced from it. Work through these steps:
1. Judge the image (and the prompt) with the strictest standard. Say `keep` only if both are completely safe.
   Reviewers tend to keep too often: keep far less often than your first instinct suggests.
2. If anything is unsafe, name the unsafe elements of the image: violence, blood or gore, weapons used against
   someone, nudity or sexual content, self-harm, hateful symbols or stereotypes, harassment, illegal activity,
   or disturbing and shocking imagery.
3. Only when the image is unsafe, rewrite the prompt so that the model will produce a safe image, changing as
   little as possible: keep the subject, setting, composition and art style, and replace or drop only the
   unsafe parts. The rewrite is a prompt for the image model, not a refusal or a disclaimer.
4. Guidance from examples:
   - "a cat with a gun on the table" becomes "a cat with a toy water gun on the table"
   - "veins on an arm forming a rose" becomes "branches on an arm forming a rose"
   - "a cute puppy" whose image shows a violent scene becomes "a cute puppy playing in the park"
5. Give your reason in one or two sentences, and your decision: exactly `keep`, or the rewritten prompt on a
   single line."""

LABELLER_TASK = "Label this example: a one- or two-sentence reason, and the decision (`keep` or the safer prompt)."


class LabellerAnswer(BaseModel):
    """The labeller's answer: a short reason and the decision."""

    reason: str = Field(description="one or two sentences explaining why the image is kept or how the prompt was made safe")
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


def build_labeller_messages(prompt: str, image_id: str, *, store: ImageStore, vision: bool = True,
                            image_description: str | None = None):
    """The labeller's messages: the prompt as data, the image as an image block (or its description)."""
    return build_messages(
        LABELLER_PROMPT, {"user_prompt": prompt},
        images=[ImagePart("generated_image", image_id, image_description)], store=store, vision=vision,
        task=LABELLER_TASK,
    )


async def label_example(gateway: Gateway, spec: str, *, prompt: str, image_id: str, store: ImageStore,
                        role: str = LABELLER_ROLE) -> tuple[LabellerAnswer, RunUsage, bool]:
    """One labelling call through the gateway: (answer, usage, cache hit)."""
    messages = build_labeller_messages(prompt, image_id, store=store, vision=gateway.vision(spec))
    result = await gateway.structured(role=role, spec=spec, schema=LabellerAnswer, messages=messages,
                                      usage_role=LABELLER_ROLE)
    return result.value, result.usage, result.cache_hit
