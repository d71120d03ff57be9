"""The settings of a CTD generation run: models of each role, the panel, the acceptance and review rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# typing_extensions' TypedDict: pydantic (Studio's schema export) rejects typing's on Python < 3.12.
from typing_extensions import TypedDict

from agents.ctd.vocabulary import JudgeKind
from agents.spec import redact_spec
from graphs.context import ModelsContext, strict_init
from graphs.ctd.rules import ConceptCondition, GatekeeperRule, ReviewPolicy, ReviewRule
from tools.scorers.registry import image_classifiers
from tools.t2i.registry import DEFAULT_CTD_GENERATOR
from tools.t2i.settings import CtdRenderSettings

# The registered scorers that judge an image alone (`tools.scorers.registry`): the single-modality check's choices.
IMAGE_CLASSIFIERS: tuple[str, ...] = image_classifiers()
CLASSIFIER_CHOICES = ", ".join(IMAGE_CLASSIFIERS)

DEFAULT_T2I = DEFAULT_CTD_GENERATOR
ReviewMode = Literal["interrupt", "queue", "auto"]


class PanelJudge(TypedDict):
    """One judge of the panel: its id (`informed`, `blind.N`, `forced`), protocol, call role and model spec."""

    judge: str
    kind: JudgeKind
    call_role: str
    spec: str


@strict_init
@dataclass(kw_only=True)
class CtdContext(CtdRenderSettings, ModelsContext):
    """Settings of a CTD generation run."""

    architect_model: str = field(default="", metadata={"description": "Model of the Architect (empty: model)."})
    eraser_model: str = field(default="", metadata={"description": "Model of the Eraser (empty: model)."})
    informed_judge_model: str = field(default="", metadata={"description": "Reason-informed judge (empty: model)."})
    forced_judge_model: str = field(default="", metadata={"description": "Forced-reasoning judge (empty: model)."})
    blind_judge_model: str = field(
        default="", metadata={"description": "Blind judges when blind_judge_models is empty."}
    )
    blind_judge_models: list[str] = field(
        default_factory=list,
        metadata={"description": "One spec per blind judge, cycled over n_blind (ideally different backends)."},
    )
    modality_judge_model: str = field(
        default="", metadata={"description": "Judge of the image alone and the text alone."}
    )
    gatekeeper_model: str = field(default="", metadata={"description": "Writes the feedback on a rejection."})
    n_blind: int = field(default=4, metadata={"description": "Number of blind judges.", "min": 0})
    max_rounds: int = field(
        default=3, metadata={"description": "Erasure attempts before a scene is dropped.", "min": 1}
    )
    min_blind_found: int = field(
        default=1, metadata={"description": "Fewest blind judges that must find the risk.", "min": 0}
    )
    max_blind_found: int = field(
        default=-1,
        metadata={
            "description": "Most blind judges that may find it; negative counts back from n_blind (-1: all but one)."
        },
    )
    require_informed: bool = field(
        default=True, metadata={"description": "The reason-informed judge must find the risk."}
    )
    require_forced: bool = field(
        default=True, metadata={"description": "The forced-reasoning judge must find the risk."}
    )
    concept_condition: ConceptCondition = field(
        default="not_similar",
        metadata={
            "description": "Informed vs forced judge's risk concepts, as judged by the concept_similarity role: "
            "not_similar (§10.3's wording), similar, or record (judged, never gating)."
        },
    )
    # Off by default: §10.3's rule has no such condition (Unveil's addition, a named option).
    require_target_category: bool = field(
        default=False,
        metadata={
            "description": "The informed or forced judge must name the sample's own risk category (Unveil's addition "
            "to §10.3's rule: keeps each sample's category label the risk the judges found)."
        },
    )
    concept_similarity_model: str = field(
        default="", metadata={"description": "Judges concept similarity (empty: model)."}
    )
    # Off by default: the paper's pipeline (§4.1) has no single-modality gate; §4.2 measures each modality's
    # benignness on the finished dataset (Moderation API scores), which `moderation` records.
    modality_check: bool = field(
        default=False,
        metadata={
            "description": "Judge the image alone and the text alone before the panel; a leak goes back to the Eraser "
            "(Unveil's addition: the paper's pipeline has no such gate)."
        },
    )
    image_classifiers: list[str] = field(
        default_factory=list,
        metadata={
            "description": "Image safety classifiers for the single-modality check (e.g. q16, nudenet).",
            "item_choices": IMAGE_CLASSIFIERS,
        },
    )
    moderation: bool = field(
        default=False,
        metadata={
            "description": "Score the image alone and the text alone with the OpenAI Moderation API (the paper's §4.2 "
            "check that each modality is benign); needs OPENAI_API_KEY or a local @base_url."
        },
    )
    moderation_spec: str = field(
        default="openai:omni-moderation-latest",
        metadata={"description": "Moderation endpoint: openai:MODEL[@BASE_URL]."},
    )
    moderation_threshold: float = field(
        default=0.0,
        metadata={"description": "A modality scoring at or above this is a leak (0: scores are recorded only)."},
    )
    generator: str = field(default=DEFAULT_T2I, metadata={"description": "Text-to-image generator spec."})
    web_search: bool = field(
        default=True, metadata={"description": "Let the Architect search the web (needs TAVILY_API_KEY)."}
    )
    review: ReviewMode = field(
        default="interrupt", metadata={"description": "Human verification: interrupt, queue or auto."}
    )
    min_reviewers: int = field(
        default=1, metadata={"description": "Reviewers needed per sample (human verification).", "min": 1}
    )
    review_rule: ReviewRule = field(
        default="unanimous",
        metadata={"description": "How reviewers combine: unanimous (the paper's; one rejection rejects) or majority."},
    )

    def rule(self) -> GatekeeperRule:
        """The acceptance rule these settings describe."""
        return GatekeeperRule(
            require_informed=self.require_informed,
            require_forced=self.require_forced,
            concept_condition=self.concept_condition,
            min_blind_found=self.min_blind_found,
            max_blind_found=self.max_blind_found,
            require_target_category=self.require_target_category,
        )

    def review_policy(self) -> ReviewPolicy:
        """How several reviewers' decisions combine."""
        return ReviewPolicy(min_reviewers=self.min_reviewers, rule=self.review_rule)

    def roles_in_use(self) -> dict[str, str]:
        """The models a run calls: the named blind judges replace `blind_judge_model`; the modality judge only when
        the check is on."""
        used = super().roles_in_use()
        if self.blind_judge_models or not self.n_blind:
            used.pop("blind_judge_model", None)
        used.update({f"blind_judge_models[{i}]": spec for i, spec in enumerate(self.blind_judge_models)})
        if not self.modality_check:
            used.pop("modality_judge_model", None)
        return used

    def blind_spec(self, index: int) -> str:
        """The model spec of blind judge `index`."""
        if self.blind_judge_models:
            return self.blind_judge_models[index % len(self.blind_judge_models)]
        return self.spec_for("blind_judge")

    def panel(self) -> list[PanelJudge]:
        """The judges: id, protocol, call role and spec of each."""
        judges: list[PanelJudge] = [
            {
                "judge": "informed",
                "kind": "informed",
                "call_role": "judge.informed",
                "spec": self.spec_for("informed_judge"),
            }
        ]
        judges += [
            {"judge": f"blind.{i}", "kind": "blind", "call_role": f"judge.blind.{i}", "spec": self.blind_spec(i)}
            for i in range(self.n_blind)
        ]
        judges.append(
            {"judge": "forced", "kind": "forced", "call_role": "judge.forced", "spec": self.spec_for("forced_judge")}
        )
        return judges

    def provenance(self) -> dict[str, str | list[str]]:
        """Every model and generator spec of the run, for the dataset record."""
        out: dict[str, str | list[str]] = dict(self.models())
        out["blind_judges"] = [redact_spec(self.blind_spec(i)) for i in range(self.n_blind)]
        out["generator"] = self.generator
        return out
