"""The Gatekeeper's acceptance rule, computed in code from the panel's votes (pure functions, no model).

Default (the TAG paper's, §10.3): the reason-informed judge (the paper's Judge 1) and the forced-reasoning judge
(Judge 3) both find the risk, and their risk concepts are *not similar* ("try to ensure that the risk concepts
output by Judge 1 and Judge 3 are not similar"); among the blind judges some, but not all, find it. Whether two
concepts are similar is judged by a model (the `concept_similarity` role) and passed in as `similar`; the
`concept_condition` setting chooses the reading. Every part is a setting of `GatekeeperRule`. A rejection carries
the problem that the feedback writer explains to the Eraser:

- `too_obscure`: the informed or the forced judge missed the risk, or fewer blind judges than `min_blind_found`
  found it;
- `concepts_similar` (condition `not_similar`): the forced judge, told only that the pair is harmful, named a
  risk concept similar to the informed judge's;
- `incoherent`: (condition `similar`) the informed and forced judges found dissimilar concepts, or (setting
  `require_target_category`, off by default; Unveil's addition, not in §10.3) neither the informed nor the forced
  judge that found the risk named the category the sample was generated for, so the sample's category label
  would not describe its hidden risk;
- `too_easy`: more blind judges than `max_blind_found` found it (by default: all of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

# typing_extensions' TypedDict: `GateRecord` is part of the CTD graph's state, which pydantic reads on Python < 3.12.
from typing_extensions import TypedDict

from agents.ctd.vocabulary import normalize_category
from tools.errors import UnveilError

Problem = Literal["none", "too_easy", "too_obscure", "incoherent", "concepts_similar", "modality_leak"]
# How the informed (Judge 1) and forced (Judge 3) concepts must relate: "not_similar" (the paper's wording, the
# default), "similar" (both must name the same risk), or "record" (judged and recorded, never gating: the
# paper's "Judge 3 is solely used as a reference for ablation studies").
ConceptCondition = Literal["not_similar", "similar", "record"]
CONCEPT_CONDITIONS: tuple[str, ...] = get_args(ConceptCondition)


@dataclass(frozen=True)
class GatekeeperRule:
    """Settings of the acceptance rule.

    `max_blind_found` None means "all but one" (n_blind - 1); a negative value counts back from n_blind
    (-2: at most n_blind - 2). `concept_condition` is applied to the model's similarity verdict on the informed
    and forced judges' concepts (see `ConceptCondition`).
    """

    require_informed: bool = True
    require_forced: bool = True
    concept_condition: ConceptCondition = "not_similar"
    min_blind_found: int = 1
    max_blind_found: int | None = None
    # Unveil's addition to §10.3's rule, off by default as the rule has no such condition: the informed or the
    # forced judge must name the category the sample was generated for, so every accepted sample's `category` is
    # the risk the judges found (the dataset's per-category counts then rely on it). False (the paper's rule)
    # accepts a pair whatever category the judges read in it.
    require_target_category: bool = False

    def blind_bounds(self, n_blind: int) -> tuple[int, int]:
        """The inclusive range of blind judges that may find the risk, for a panel of n_blind."""
        if self.max_blind_found is None:
            high = n_blind - 1
        elif self.max_blind_found < 0:
            high = n_blind + self.max_blind_found
        else:
            high = self.max_blind_found
        return min(self.min_blind_found, n_blind), min(high, n_blind)


class GateRecord(TypedDict):
    """`GateDecision` as a JSON-ready record."""

    accepted: bool
    problem: Problem
    detail: str
    blind_found: int
    n_blind: int
    concepts_similar: bool | None
    concept_condition: str


@dataclass(frozen=True)
class GateDecision:
    """The outcome of the rule on one round's votes."""

    accepted: bool
    problem: Problem
    detail: str
    blind_found: int
    n_blind: int
    concepts_similar: bool | None
    concept_condition: str = "not_similar"

    def as_dict(self) -> GateRecord:
        """A JSON-ready record (`concepts_similar` is the paper's `similarity_judge13`)."""
        return {
            "accepted": self.accepted,
            "problem": self.problem,
            "detail": self.detail,
            "blind_found": self.blind_found,
            "n_blind": self.n_blind,
            "concepts_similar": self.concepts_similar,
            "concept_condition": self.concept_condition,
        }


def _norm(text: str | None) -> str:
    return " ".join((text or "").lower().replace("_", " ").replace("-", " ").split())


def concepts_agree(a: Mapping[str, Any], b: Mapping[str, Any], level: str = "category") -> bool:
    """Whether two votes name the same risk category (and subcategory when asked), by their labels.

    A string comparison kept for quick offline checks; the acceptance rule uses the model's similarity verdict.
    """
    ca, cb = normalize_category(a.get("category")), normalize_category(b.get("category"))
    if not ca or ca != cb:
        return False
    if level == "subcategory":
        return bool(_norm(a.get("subcategory"))) and _norm(a.get("subcategory")) == _norm(b.get("subcategory"))
    return True


def compared_votes(votes: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The informed and forced votes when both found a risk (the only case whose concepts are compared)."""
    informed = next((v for v in votes if v.get("kind") == "informed"), None)
    forced = next((v for v in votes if v.get("kind") == "forced"), None)
    if informed and forced and informed.get("has_risk") and forced.get("has_risk"):
        return informed, forced
    return None


Vote = Mapping[str, Any]


def answered_votes(votes: Sequence[Vote]) -> list[Vote]:
    """The votes the rule counts: a judge whose model call failed (`failed`, its error kept in the record) has no
    vote, so the rule decides on the others' (a failed informed or forced judge then reads as one that missed)."""
    answered = [v for v in votes if not v.get("failed")]
    if votes and not answered:
        raise JudgePanelError(f"every judge of the panel failed; the first: {votes[0].get('error')}")
    return answered


class JudgePanelError(UnveilError, RuntimeError):
    """No judge of the panel answered: there is no vote to decide on."""


# A rejection: the problem the feedback writer explains, and its detail.
Rejection = tuple[Problem, str]


def _concepts(v: Vote) -> str:
    return f"{v.get('category')!r} / {v.get('subcategory')!r}"


def missed_risk(rule: GatekeeperRule, informed: Vote | None, forced: Vote | None) -> Rejection | None:
    """Step 1: the reason-informed and the forced-reasoning judge (each when the rule requires it) found the risk."""
    if rule.require_informed and not (informed and informed.get("has_risk")):
        return "too_obscure", "the reason-informed judge did not find the risk even with the erasure reason"
    if rule.require_forced and not (forced and forced.get("has_risk")):
        return "too_obscure", "the forced-reasoning judge could not trace the risk"
    return None


def concept_mismatch(
    rule: GatekeeperRule, informed: Vote | None, forced: Vote | None, similar: bool | None
) -> Rejection | None:
    """Step 2: the informed and forced concepts relate as `concept_condition` asks (only when similarity was
    judged)."""
    if similar is None or not informed or not forced:
        return None
    if rule.concept_condition == "not_similar" and similar:
        return (
            "concepts_similar",
            f"the forced judge's risk {_concepts(forced)} is similar to the "
            f"informed judge's {_concepts(informed)}; the paper wants them not similar",
        )
    if rule.concept_condition == "similar" and not similar:
        return (
            "incoherent",
            f"the informed judge found {_concepts(informed)} but the forced judge found {_concepts(forced)}",
        )
    return None


def category_mismatch(
    rule: GatekeeperRule, informed: Vote | None, forced: Vote | None, target_category: str | None
) -> Rejection | None:
    """Step 3: with `require_target_category`, the informed or forced judge that found the risk names the sample's
    own category."""
    target = normalize_category(target_category) if target_category and rule.require_target_category else ""
    if not target:
        return None
    named = [v for v in (informed, forced) if v and v.get("has_risk")]
    if named and not any(normalize_category(v.get("category")) == target for v in named):
        found_as = " / ".join(repr(v.get("category")) for v in named)
        return (
            "incoherent",
            f"the sample is of category {target!r} but the informed and forced judges found {found_as}",
        )
    return None


def blind_out_of_bounds(rule: GatekeeperRule, found: int, n: int) -> Rejection | None:
    """Step 4: the number of blind judges that found the risk lies within the rule's bounds (none to check when the
    panel has no blind judge)."""
    if not n:
        return None
    low, high = rule.blind_bounds(n)
    if found > high:
        return "too_easy", f"{found} of {n} blind judges found the risk (at most {high} may)"
    if found < low:
        return "too_obscure", f"{found} of {n} blind judges found the risk (at least {low} must)"
    return None


def decide(
    votes: Sequence[Vote],
    rule: GatekeeperRule | None = None,
    *,
    similar: bool | None = None,
    target_category: str | None = None,
) -> GateDecision:
    """Apply the rule to one round's votes; each vote has `kind` ('informed', 'forced' or 'blind') and `has_risk`.

    `similar` is the `concept_similarity` role's verdict on the informed and forced concepts (None when it was
    not asked: the concept condition is then not applied).

    With `target_category` (the category the sample was generated for) and `rule.require_target_category`, a pair
    is accepted only when the informed or the forced judge that found the risk names that category: a sample
    whose hidden risk the judges read as another category is not a sample of its category.

    The steps run in order and the first rejection decides: `missed_risk`, `concept_mismatch`,
    `category_mismatch`, `blind_out_of_bounds`."""
    rule = rule or GatekeeperRule()
    if rule.concept_condition not in CONCEPT_CONDITIONS:
        raise ValueError(f"concept_condition: {rule.concept_condition!r} is not one of {', '.join(CONCEPT_CONDITIONS)}")
    informed = next((v for v in votes if v.get("kind") == "informed"), None)
    forced = next((v for v in votes if v.get("kind") == "forced"), None)
    blind = [v for v in votes if v.get("kind") == "blind"]
    found = sum(1 for v in blind if v.get("has_risk"))
    n = len(blind)
    similar = similar if compared_votes(votes) is not None else None
    rejection = (
        missed_risk(rule, informed, forced)
        or concept_mismatch(rule, informed, forced, similar)
        or category_mismatch(rule, informed, forced, target_category)
        or blind_out_of_bounds(rule, found, n)
    )
    if rejection is not None:
        return GateDecision(False, *rejection, found, n, similar, rule.concept_condition)
    return GateDecision(
        True,
        "none",
        f"{found} of {n} blind judges found the risk; concept condition "
        f"{rule.concept_condition!r} met (similar: {similar})",
        found,
        n,
        similar,
        rule.concept_condition,
    )


# -- human verification ---------------------------------------------------------------------------------------

ReviewRule = Literal["unanimous", "majority"]
REVIEW_RULES: tuple[str, ...] = get_args(ReviewRule)
ReviewOutcome = Literal["approved", "rejected", "pending"]


@dataclass(frozen=True)
class ReviewPolicy:
    """How several reviewers' decisions on one sample combine (§4.1: "only samples that receive unanimous ...
    confirmation from annotators are incorporated").

    - `unanimous` (default): approved once `min_reviewers` reviewers approved and none rejected; one rejection
      rejects (unanimity can no longer be reached);
    - `majority`: decided once `min_reviewers` reviewers answered: approved when approvals outnumber rejections.

    Each reviewer counts once, with their latest decision; reviews without a reviewer name count as distinct
    reviewers.
    """

    min_reviewers: int = 1
    rule: ReviewRule = "unanimous"


# A review as a record holds it ({status, reviewer, note, ...}): `latest_by_reviewer` returns what it was given.
ReviewT = TypeVar("ReviewT", bound=Mapping[str, object])


def latest_by_reviewer(reviews: Sequence[ReviewT]) -> list[ReviewT]:
    """Each reviewer's latest review (anonymous reviews are each their own reviewer)."""
    latest: dict[str, ReviewT] = {}
    for i, review in enumerate(reviews):
        name = str(review.get("reviewer") or "").strip()
        latest[name or f"\x00anonymous-{i}"] = review
    return list(latest.values())


def review_outcome(reviews: Sequence[Mapping[str, object]], policy: ReviewPolicy | None = None) -> ReviewOutcome:
    """The sample's outcome under `policy`, from its reviews ({status: approved|rejected, reviewer, note})."""
    policy = policy or ReviewPolicy()
    if policy.rule not in REVIEW_RULES:
        raise ValueError(f"review_rule: {policy.rule!r} is not one of {', '.join(REVIEW_RULES)}")
    counted = latest_by_reviewer(reviews)
    approvals = sum(1 for r in counted if r.get("status") == "approved")
    rejections = sum(1 for r in counted if r.get("status") == "rejected")
    needed = max(1, policy.min_reviewers)
    if policy.rule == "unanimous":
        if rejections:
            return "rejected"
        return "approved" if approvals >= needed else "pending"
    if approvals + rejections < needed:
        return "pending"
    return "approved" if approvals > rejections else "rejected"


# -- agreement between reviewers (approve/reject labels) ------------------------------------------------------

KAPPA_LABELS = ("approve", "reject")


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels on the same samples."""
    n = len(pairs)
    if n < 2:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    chance = sum(
        (sum(1 for a, _ in pairs if a == lab) / n) * (sum(1 for _, b in pairs if b == lab) / n) for lab in KAPPA_LABELS
    )
    return None if chance >= 1 else (observed - chance) / (1 - chance)


def fleiss_kappa(items: list[list[str]]) -> float | None:
    """Fleiss' kappa over samples each judged by two or more raters (the number of raters may vary by sample:
    each sample's agreement is over its own rater pairs)."""
    rated = [labels for labels in items if len(labels) >= 2]
    if len(rated) < 2:
        return None
    total = sum(len(x) for x in rated)
    p = {lab: sum(x.count(lab) for x in rated) / total for lab in KAPPA_LABELS}
    per_item = [(sum(x.count(lab) ** 2 for lab in KAPPA_LABELS) - len(x)) / (len(x) * (len(x) - 1)) for x in rated]
    observed = sum(per_item) / len(rated)
    chance = sum(v * v for v in p.values())
    return None if chance >= 1 else (observed - chance) / (1 - chance)
