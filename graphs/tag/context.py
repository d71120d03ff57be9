"""The settings of a TAG detection run (`TagContext`): the role models, the tree's size and readings, and the
user's set S of known toxic pairs. Read by the CLI's help without building the graph."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.tag.types import ASSOCIATION_TYPES, RootsMode
from graphs.context import ModelsContext, strict_init
from graphs.tag.tree import READING_HELP, Prune


@strict_init
@dataclass(kw_only=True)
class TagContext(ModelsContext):
    """Settings of a TAG detection run."""

    root_extractor_model: str = field(default="", metadata={"description": "Model for root concepts (empty: model)."})
    expander_model: str = field(default="", metadata={"description": "Model that expands the trees (empty: model)."})
    pair_judge_model: str = field(
        default="", metadata={"description": "Model for the synergy review and pair judging."}
    )
    screen_model: str = field(default="", metadata={"description": "Model for the optional suspicious-pair screen."})
    explainer_model: str = field(default="", metadata={"description": "Model that writes the explanation."})
    l_max: int = field(default=4, metadata={"description": "Layers per tree, counting the roots.", "min": 1})
    k_max: int = field(
        default=6,
        metadata={"description": "Children kept per node (prune=per_node) or nodes per layer (per_layer).", "min": 1},
    )
    prune: Prune = field(
        default="per_node",
        metadata={"description": READING_HELP["prune"]},
    )
    roots_mode: RootsMode = field(
        default="separate",
        metadata={"description": READING_HELP["roots_mode"]},
    )
    children_per_parent: int = field(default=3, metadata={"description": "Children asked for per parent.", "min": 1})
    association_types: list[str] = field(
        default_factory=lambda: list(ASSOCIATION_TYPES),
        metadata={
            "description": f"Allowed association types, any of: {', '.join(ASSOCIATION_TYPES)} (default: all).",
            "min_items": 1,
            "item_choices": ASSOCIATION_TYPES,
        },
    )
    screen_pairs: bool = field(
        default=False, metadata={"description": "Screen pairs for suspicious ones before judging."}
    )
    screen_limit: int = field(default=8, metadata={"description": "Pairs kept by the screen per layer.", "min": 1})
    max_pairs_per_call: int = field(
        default=200, metadata={"description": "Pairs judged per pair-judge call.", "min": 1}
    )
    toxic_pairs: str = field(
        default="",
        metadata={"description": READING_HELP["toxic_pairs"]},
    )

    def roles_in_use(self) -> dict[str, str]:
        """The models a run calls (the screen only when it is on)."""
        used = super().roles_in_use()
        if not self.screen_pairs:
            used.pop("screen_model", None)
        return used
