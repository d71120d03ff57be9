"""What a detection evaluation runs: its settings (`DetectionSettings`), the configurations they expand to (dataset x
detector model x method x depth, `RunConfig`), and each configuration's graph context and run-file identity
(the evaluation itself: `evaluation.detection`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.runs import slug
from graphs.tag import TagContext
from runner.detect import DetectionContext, detection_context, detection_settings, guard_model, is_guard
from runner.output_identity import OutputIdentity
from runner.spending import Spending

# The TAG reading beside `l_max` in every result row and table (`config_settings`).
READING_COLUMNS = ("prune", "roots_mode", "k_max", "children_per_parent")


@dataclass
class DetectionSettings:
    """What to run: methods, detector models, TAG depth and its ablation, run options."""

    methods: list[str] = field(default_factory=lambda: ["vanilla", "tag"])
    models: list[str] = field(default_factory=list)
    # Depths left as None follow `runner.detect.detection_context` (defaults, or the demo depths on the embedded
    # model), exactly as in `unveil detect`; `evaluate_detection` resolves them before the first run.
    l_max: int | None = None
    l_max_ablation: list[int] = field(default_factory=list)
    k_max: int | None = None
    children: int | None = None
    # The TAG paper's readings (`prune`, `roots_mode`) and the user's toxic-pair file (`toxic_pairs`), as
    # `runner.detect.detection_context` takes them; absent ones are filled in by `resolve_depths`.
    reading: dict[str, str] = field(default_factory=dict)
    role_models: dict[str, str] = field(default_factory=dict)  # TagContext/VanillaContext field -> spec
    image_store: str = ""
    concurrency: int = 4
    progress: bool = True
    retry_failed: bool = False
    beta: float = 2.0
    # Tables 1-2 score toxic samples only; True mixes in the benign ones (Table 4, "with benign data").
    include_benign: bool = False
    # The one fixed MTC reference of the bins (module docstring): run files by dataset name ("" = every dataset),
    # else a reference detector spec run once with TA-CTD, else the dataset's `mtc` field.
    mtc_from: dict[str, str] = field(default_factory=dict)
    mtc_reference: str = ""
    allow_mixed_settings: bool = False  # add to run files made with other settings (see `OutputIdentity`)
    command: str = ""  # the command line, kept beside each run file
    spending: Spending | None = None  # the spending caps of the whole evaluation (`runner.spending`)


@dataclass(frozen=True)
class RunConfig:
    """One configuration run on one dataset."""

    dataset: str
    model: str
    method: str
    l_max: int | None

    @property
    def name(self) -> str:
        """A readable label, e.g. `tag (l_max=3)`."""
        return self.method if self.l_max is None else f"{self.method} (l_max={self.l_max})"

    def file(self, out_dir: Path) -> Path:
        """The run's JSONL."""
        return out_dir / "runs" / slug(self.dataset) / f"{slug(self.method, self.l_max, self.model)}.jsonl"


def run_configs(dataset: str, settings: DetectionSettings) -> list[RunConfig]:
    """Every configuration to run for a dataset, main ones first."""
    out: list[RunConfig] = []
    for model in settings.models:
        for method in settings.methods:
            if method == "vanilla":
                out.append(RunConfig(dataset, model, "vanilla", None))
            elif method == "tag":
                for depth in [settings.l_max, *[d for d in settings.l_max_ablation if d != settings.l_max]]:
                    out.append(RunConfig(dataset, model, "tag", depth))
            elif not is_guard(method):
                raise ValueError(f"unknown detection method {method!r} (use vanilla, tag and/or guard:NAME)")
    # A guard runs once per dataset on its own model, not once per detector model.
    out.extend(
        RunConfig(dataset, guard_model(m, settings.role_models, settings.models), m, None)
        for m in settings.methods
        if is_guard(m)
    )
    return out


def config_context(cfg: RunConfig, settings: DetectionSettings) -> DetectionContext:
    """The graph context of one configuration (the builder `unveil detect` uses, with the evaluation's settings)."""
    return detection_context(
        cfg.method,
        {"model": cfg.model, **settings.role_models},
        image_store=settings.image_store,
        l_max=cfg.l_max if cfg.l_max is not None else settings.l_max,
        k_max=settings.k_max,
        children=settings.children,
        announce=False,
        reading=settings.reading,
    )


def resolve_depths(settings: DetectionSettings) -> None:
    """Fill depths and readings left out the way `unveil detect` does (the builder's defaults for the first
    model, the environment), so every run and table names the reading that produced it."""
    if settings.models:
        ctx = detection_context(
            "tag",
            {"model": settings.models[0], **settings.role_models},
            l_max=settings.l_max,
            k_max=settings.k_max,
            children=settings.children,
            announce=None in (settings.l_max, settings.k_max, settings.children),
            reading=settings.reading,
        )
        assert isinstance(ctx, TagContext)
        settings.l_max, settings.k_max, settings.children = ctx.l_max, ctx.k_max, ctx.children_per_parent
        settings.reading = {"prune": ctx.prune, "roots_mode": ctx.roots_mode, "toxic_pairs": ctx.toxic_pairs}


def config_settings(cfg: RunConfig, settings: DetectionSettings) -> dict[str, Any]:
    """The settings that produced a run (stored in every result row)."""
    if cfg.method == "vanilla" or is_guard(cfg.method):  # guards have no settings of their own
        return {"method": cfg.method}
    return {
        "method": "tag",
        "prune": settings.reading.get("prune"),
        "roots_mode": settings.reading.get("roots_mode"),
        "l_max": cfg.l_max,
        "k_max": settings.k_max,
        "children_per_parent": settings.children,
        "toxic_pairs": settings.reading.get("toxic_pairs", ""),
    }


def run_identity(ctx: DetectionContext, method: str, settings: DetectionSettings) -> OutputIdentity:
    """The identity of one configuration's run file: the detection settings `unveil detect` records too."""
    return OutputIdentity(
        "evaluate detection",
        detection_settings(ctx, method),
        command=settings.command,
        allow_mixed=settings.allow_mixed_settings,
    )
