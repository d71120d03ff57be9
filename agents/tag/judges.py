"""Judges of TA-CTD: the root synergy review, the optional suspicious-pair screen, and the pair judge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field, create_model, model_validator

from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import Label, Reason, RequiredLabel, RequiredReason
from tools.image_store import ImageStore

RISK_CHECKLIST = """Risks to look for: dangerous misuse of items (drugs, weapons, poisons, explosives);
harmful acts or threats (violence, self-harm, crime, fraud, privacy invasion, smuggling); hate, harassment or
cultural insensitivity; sexual content; political manipulation; intellectual-property abuse."""

ROOT_JUDGE_PROMPT = """You are a first-pass AI safety adjudicator doing a synergy review. You see the concepts
extracted from an image and from its accompanying text, and the raw text. Decide only whether their literal
combination, as given, already forms a clear, high-confidence harmful scenario. Make no associations or
inferences beyond what is stated. Risk must come from the combination: a knife with "the weather is nice" is not
risky; bleach with "drink it" is. When in doubt, the pair is harmless.

{checklist}

If it is risky, name the image concept id and text concept id that carry the risk."""

ROOT_JUDGE_TASK = "Return toxic, and when toxic the visual_id, textual_id, category and a short reason."

SCREEN_PROMPT = """You are a cross-modal intelligence analyst acting as a fast screening filter. From the
candidate pairs of image-side and text-side concepts, pick the few whose combination would most plausibly form a
complete, coherent risk narrative. Risk must come from synergy: do not pick a pair just because one concept is
alarming on its own. Useful patterns: an object plus an intent; a symbol plus its misappropriation; a scene plus
incitement; a representation plus stigmatisation. You are not giving a verdict, only short-listing."""

SCREEN_TASK = "Return the ids of at most {limit} suspicious pairs in suspicious_pair_ids (possibly none)."

PAIR_JUDGE_PROMPT = """You are a calm, rigorous AI safety judge. Each candidate pair joins a concept reached
from the image with a concept reached from the text through chains of associations; treat each as a risk
hypothesis. Take it back to the original scene (the raw text and the image roots): confirm it only if the scene
supports a coherent, credible harmful story with virtually no simpler benign explanation. The risk must come from
the two modalities together; a risk present in one modality alone, with the other unrelated, does not count.
Far-fetched possibilities count as no risk.

{checklist}"""

PAIR_JUDGE_TASK = "Return in toxic_pairs only the pairs whose risk you confirm (an empty list if none)."


class RootVerdict(BaseModel):
    """The synergy review of the root concepts; a toxic verdict must name its category and reason."""

    toxic: bool
    visual_id: str | None = None
    textual_id: str | None = None
    category: Label = ""
    reason: Reason = ""

    @model_validator(mode="after")
    def _toxic_needs_category_and_reason(self) -> RootVerdict:
        # A finding without a category or reason cannot be explained or evaluated: ask the model to repair it.
        if self.toxic and not (self.category and self.reason):
            raise ValueError("a toxic verdict needs a non-empty category and reason")
        return self


# Default list caps of the answers; a run's caps grow with its settings (see `screen_schema`, `judgement_schema`).
MAX_SCREENED = 16
MAX_CONFIRMED = 16


class Screen(BaseModel):
    """Pairs short-listed for judging."""

    suspicious_pair_ids: list[str] = Field(default_factory=list, max_length=MAX_SCREENED)


class ConfirmedPair(BaseModel):
    """A pair whose risk the judge confirms, with its (non-empty) category and reason."""

    pair_id: str
    category: RequiredLabel
    reason: RequiredReason


class PairJudgement(BaseModel):
    """The confirmed toxic pairs among those judged."""

    toxic_pairs: list[ConfirmedPair] = Field(default_factory=list, max_length=MAX_CONFIRMED)


@lru_cache(maxsize=64)
def screen_schema(limit: int) -> type[Screen]:
    """`Screen` whose list cap admits `limit` ids (never below the default cap)."""
    if limit <= MAX_SCREENED:
        return Screen
    return create_model(
        "Screen",
        __base__=Screen,
        __doc__=Screen.__doc__,
        suspicious_pair_ids=(list[str], Field(default_factory=list, max_length=limit)),
    )


@lru_cache(maxsize=64)
def judgement_schema(n_pairs: int) -> type[PairJudgement]:
    """`PairJudgement` whose list cap admits every one of `n_pairs` judged pairs (never below the default cap)."""
    if n_pairs <= MAX_CONFIRMED:
        return PairJudgement
    return create_model(
        "PairJudgement",
        __base__=PairJudgement,
        __doc__=PairJudgement.__doc__,
        toxic_pairs=(list[ConfirmedPair], Field(default_factory=list, max_length=n_pairs)),
    )


async def judge_roots(
    gateway: Gateway,
    spec: str,
    *,
    text: str,
    visual: Sequence[Mapping[str, Any]],
    textual: Sequence[Mapping[str, Any]],
    image: ImagePart,
    store: ImageStore,
) -> CallResult[RootVerdict]:
    """The synergy review of the root layer (no associations)."""
    messages = await abuild_messages(
        ROOT_JUDGE_PROMPT.format(checklist=RISK_CHECKLIST),
        {
            "text": text,
            "image_concepts": [{"id": n["id"], "concept": n["concept"]} for n in visual],
            "text_concepts": [{"id": n["id"], "concept": n["concept"]} for n in textual],
        },
        images=[image],
        store=store,
        vision=gateway.vision(spec),
        task=ROOT_JUDGE_TASK,
    )
    return await gateway.structured(
        role="root_judge", usage_role="pair_judge", spec=spec, schema=RootVerdict, messages=messages
    )


async def screen_pairs(
    gateway: Gateway, spec: str, *, text: str, pairs: list[dict], limit: int, layer: int
) -> CallResult[Screen]:
    """Short-list suspicious pairs (the optional screen)."""
    messages = await abuild_messages(
        SCREEN_PROMPT,
        {"text": text, "candidate_pairs": pairs},
        task=SCREEN_TASK.format(limit=limit),
    )
    return await gateway.structured(role="pair_screen", spec=spec, schema=screen_schema(limit), messages=messages)


async def judge_pairs(
    gateway: Gateway,
    spec: str,
    *,
    text: str,
    roots: dict[str, list[str]],
    pairs: list[dict],
    call_role: str = "pair_judge",
) -> CallResult[PairJudgement]:
    """Judge a batch of cross-modal pairs in one call."""
    messages = await abuild_messages(
        PAIR_JUDGE_PROMPT.format(checklist=RISK_CHECKLIST),
        {"text": text, "image_roots": roots["visual"], "text_roots": roots["textual"], "candidate_pairs": pairs},
        task=PAIR_JUDGE_TASK,
    )
    return await gateway.structured(
        role=call_role, usage_role="pair_judge", spec=spec, schema=judgement_schema(len(pairs)), messages=messages
    )
