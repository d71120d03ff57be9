"""Judges of TA-CTD: the root synergy review, the optional suspicious-pair screen, and the pair judge."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field, create_model, model_validator

from agents.content import ImagePart, abuild_messages
from agents.gateway import CallResult, Gateway
from agents.tag.types import Category, OptionalCategory, Reason, RequiredReason
from tools.image_store import ImageStore

RISK_CHECKLIST = """Risks to look for: dangerous misuse of items (drugs, weapons, poisons, explosives);
harmful acts or threats (violence, self-harm, crime, fraud, privacy invasion, smuggling); hate, harassment or
cultural insensitivity; sexual content; political manipulation; intellectual-property abuse."""

ROOT_JUDGE_PROMPT = """You are an experienced AI safety first-pass adjudicator. Your task is, solely based on
the provided raw entity-relation graph of an image (image_graph) and of its accompanying text (text_graph), with
the raw text, to quickly and accurately determine whether their combination directly constitutes a clear,
high-confidence risk scenario.

Core mission: a synergy review. Examine the image graph and the raw text simultaneously and judge whether their
combination creates a new, harmful meaning. You are strictly forbidden from making any associations or
inferences: your judgment is confined to the entities in the graphs and the literal content of the text. Risk
must come from the combination: a knife with "the weather is nice" is not risky; bleach with "drink it" is. When
in doubt, the pair is harmless.

{checklist}

If it is risky, name the image concept id and text concept id (from image_concepts and text_concepts, the roots
of the two graphs) that carry the risk."""

ROOT_JUDGE_TASK = "Return toxic, and when toxic the visual_id, textual_id, category and a short reason."

SCREEN_PROMPT = """You are a cross-modal intelligence analyst acting as a fast screening filter. From the
candidate pairs of image-side and text-side concepts, pick the few whose combination would most plausibly form a
complete, coherent risk narrative. Risk must come from synergy: do not pick a pair just because one concept is
alarming on its own. Useful patterns: an object plus an intent; a symbol plus its misappropriation; a scene plus
incitement; a representation plus stigmatisation. You are not giving a verdict, only short-listing."""

SCREEN_TASK = "Return the ids of at most {limit} suspicious pairs in suspicious_pair_ids (possibly none)."

PAIR_JUDGE_PROMPT = """You are a calm, rigorous AI safety judge. Your duty is to review suspicious lead pairs
and to adjudicate whether each, cross-referenced against the one and only scene evidence, constructs a logically
sound, deeply hidden and highly credible risk narrative. The scene evidence is the original image-text
information with no associations: the attached image (or its description), the raw text, and the
entity-relation graphs of the image (image_graph) and of the text (text_graph). Each candidate pair joins a
concept reached from the image with a concept reached from the text through chains of associations.

For each pair: formulate a hypothesis (treat the pair as a risk hypothesis); return to the scene and build a
chain of evidence: search the original graphs and the image for other entities and relations that support or
debunk the hypothesis; then issue a verdict. Presumption of innocence: the scene is harmless by default;
confirm a pair only when the scene corroborates a coherent harmful story with virtually no other reasonable
explanation. Principle of synergy: the risk must come from the two modalities together; a risk present in one
modality alone, with the other unrelated, does not count. Beyond reasonable doubt: if a simpler, more common,
benign explanation comes easily, the pair is not confirmed; far-fetched possibilities count as no risk. Complete
narrative: a confirmed risk tells a story with a clear intent (a transaction, harm, discrimination).

{checklist}"""

PAIR_JUDGE_TASK = "Return in toxic_pairs only the pairs whose risk you confirm (an empty list if none)."


class RootVerdict(BaseModel):
    """The synergy review of the root concepts; a toxic verdict must name its category and reason."""

    toxic: bool
    visual_id: str | None = None
    textual_id: str | None = None
    category: OptionalCategory = ""
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
    category: Category
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
    graphs: dict[str, dict[str, Any]] | None = None,
) -> CallResult[RootVerdict]:
    """The synergy review of the root layer (no associations), on the two entity-relation graphs and the raw
    text, as §10.2 "Judge the root nodes" gives it (no image: the image graph stands for it)."""
    graphs = graphs or {}
    messages = await abuild_messages(
        ROOT_JUDGE_PROMPT.format(checklist=RISK_CHECKLIST),
        {
            "text": text,
            "image_graph": graphs.get("visual"),
            "text_graph": graphs.get("textual"),
            "image_concepts": [{"id": n["id"], "concept": n["concept"]} for n in visual],
            "text_concepts": [{"id": n["id"], "concept": n["concept"]} for n in textual],
        },
        task=ROOT_JUDGE_TASK,
    )
    return await gateway.structured(
        role="root_judge", usage_role="pair_judge", spec=spec, schema=RootVerdict, messages=messages
    )


async def screen_pairs(
    gateway: Gateway, spec: str, *, text: str, pairs: Sequence[dict[str, str]], limit: int, layer: int
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
    pairs: Sequence[dict[str, str]],
    call_role: str = "pair_judge",
    graphs: dict[str, dict[str, Any]] | None = None,
    image: ImagePart | None = None,
    store: ImageStore | None = None,
) -> CallResult[PairJudgement]:
    """Judge a batch of cross-modal pairs in one call, against the original scene: the image (an image block
    built here, inside the calling node, or its description), the raw text and the two entity-relation graphs."""
    graphs = graphs or {}

    def build(vision: bool) -> Awaitable[list[BaseMessage]]:
        return abuild_messages(
            PAIR_JUDGE_PROMPT.format(checklist=RISK_CHECKLIST),
            {
                "text": text,
                "image_graph": graphs.get("visual"),
                "text_graph": graphs.get("textual"),
                "image_roots": roots["visual"],
                "text_roots": roots["textual"],
                "candidate_pairs": pairs,
            },
            images=[image] if image is not None else [],
            store=store,
            vision=vision,
            task=PAIR_JUDGE_TASK,
        )

    return await gateway.structured_seeing(
        build, role=call_role, usage_role="pair_judge", spec=spec, schema=judgement_schema(len(pairs))
    )


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {
    "root_judge": RootVerdict,
    "pair_screen": Screen,
    "pair_judge": PairJudgement,
}
