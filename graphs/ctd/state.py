"""The state of a CTD generation run (its input, its output, the working state) and what nodes read off it."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, NotRequired

# typing_extensions' TypedDict: pydantic (Studio's schema export) rejects typing's on Python < 3.12.
from typing_extensions import TypedDict

from agents.usage import RunUsage, merge_usage
from graphs.ctd.context import PanelJudge
from graphs.ctd.rules import GateRecord


class CtdInput(TypedDict, total=False):
    """What to generate: a risk category, optionally a short scene idea and an erasure routine, and a seed."""

    id: str
    category: str
    scene_hint: str | None
    erase_routine: str | None
    seed: int


class ClassifierFlags(TypedDict):
    """One image classifier's verdict on the image alone: its flag, and the labels (nudenet) or the probability
    (q16) behind it."""

    flag: bool
    labels: NotRequired[list[str]]
    p_inappropriate: NotRequired[float]


class ModerationRecord(TypedDict):
    """The moderation API's scores of the image alone and the text alone (`ModerationScore.as_dict` each)."""

    model: str
    image: dict[str, Any]
    text: dict[str, Any]


class ModalityRecord(TypedDict):
    """The single-modality check of one attempt: whether either modality leaks the risk alone, and why; the judge
    role's verdicts and the classifiers' flags when the check is on."""

    round: int
    leak: bool
    detail: str
    moderation: ModerationRecord | None
    image: NotRequired[dict[str, Any]]
    text: NotRequired[dict[str, Any]]
    classifiers: NotRequired[dict[str, ClassifierFlags] | None]


class CtdDecision(GateRecord):
    """The Gatekeeper's decision on one attempt: the rule's record, with the round and the similarity role's
    reason."""

    round: int
    similarity_reason: str | None
    failed_judges: NotRequired[list[str]]  # judges whose model call failed: their votes were not counted


class JudgedAttempt(TypedDict):
    """The attempt that every panel judge votes on: the pair, what the image was asked to show, and the Eraser's
    reason."""

    round: int
    seed: int
    text: str
    image_id: str
    t2i_prompt: str
    erasure_reason: str


class JudgeTask(JudgedAttempt, PanelJudge):
    """What one panel judge is sent (a `Send` payload): the attempt, and the judge."""


class CtdOutput(TypedDict, total=False):
    """A generated sample (or a dropped scene) with its whole history."""

    id: str
    category: str
    subcategory: str
    status: Literal["accepted", "pending_review", "rejected", "sent_back", "dropped"]
    text: str
    image_id: str
    image_path: str
    t2i_prompt: str
    erasure_reason: str
    erasure: dict[str, Any]
    scene: dict[str, Any]
    votes: Annotated[list[dict[str, Any]], operator.add]
    decision: CtdDecision
    modality: ModalityRecord
    feedback_history: list[dict[str, Any]]
    rounds: int
    seeds: list[int]
    review: dict[str, Any]
    sent_back: list[dict[str, Any]]  # each reviewer's send back (note, reviewer, time, round), oldest first
    drop_reason: str
    models: dict[str, str | list[str]]
    web_search: bool
    usage: Annotated[RunUsage, merge_usage]


class CtdState(CtdInput, CtdOutput, total=False):
    """Working state of a generation run."""


def attempt_seed(state: CtdState, round_no: int | None = None) -> int:
    """The seed of an attempt (default: the current one): the scene's seed plus the round, minus one."""
    return int(state.get("seed", 0)) + (state.get("rounds", 0) if round_no is None else round_no) - 1


def round_votes(state: CtdState) -> list[dict[str, Any]]:
    """The votes of the current attempt."""
    return [v for v in state.get("votes", []) if v.get("round") == state.get("rounds")]
