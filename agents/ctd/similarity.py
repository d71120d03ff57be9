"""The concept-similarity judge: whether two panel judges name conceptually similar risks.

The paper's Gatekeeper (§10.3) asks a model "whether the risk judgments given by [Judge 1 and Judge 3] are
conceptually similar" from their risk category and subcategory; Unveil asks that one question of this small
structured role (call role `concept_similarity`) instead of comparing category strings, and the acceptance rule
(`graphs/ctd/rules.py`, setting `concept_condition`) uses the answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agents.content import build_messages
from agents.gateway import CallResult, Gateway

SIMILARITY_PROMPT = """You compare two risk judgments made by different reviewers of the same image-text pair.
Each names a risk category, a subcategory and a reason. Decide whether the two judgments are conceptually
similar: whether they point to the same underlying harmful concept (for example "drug dealing" and "sale of
narcotics" are similar; "drug dealing" and "weapon smuggling" are not), regardless of wording, spelling or the
level of detail. A judgment with no category is similar to nothing."""

SIMILARITY_TASK = "Return similar (true or false) and a one-sentence reason."


class ConceptSimilarity(BaseModel):
    """Whether two risk judgments name conceptually similar risks."""

    similar: bool
    reason: str = Field(default="", max_length=300)


def _judgment(vote: dict[str, Any]) -> dict[str, Any]:
    return {k: vote.get(k) for k in ("category", "subcategory", "reason")}


async def judge_similarity(
    gateway: Gateway, spec: str, *, first: dict[str, Any], second: dict[str, Any], seed: int | None = None
) -> CallResult[ConceptSimilarity]:
    """Are the risk concepts of `first` and `second` (votes with category, subcategory, reason) similar? (`seed`:
    the attempt's, so each round's judgment is its own request.)"""
    messages = build_messages(
        SIMILARITY_PROMPT, {"judgment_1": _judgment(first), "judgment_2": _judgment(second)}, task=SIMILARITY_TASK
    )
    return await gateway.structured(
        role="concept_similarity", spec=spec, schema=ConceptSimilarity, messages=messages, seed=seed
    )


# What this module's model calls answer, by call role as `unveil roles` shows it (`agents.roles` collects it).
ROLE_ANSWERS: dict[str, type[BaseModel]] = {"concept_similarity": ConceptSimilarity}
