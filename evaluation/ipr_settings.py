"""What an IPR evaluation runs: its settings (`IPRSettings`), the (method, variant) runs they expand to (`Variant`,
`variants`), and the inappropriate-image rule they choose (`inappropriate`); the evaluation itself is
`evaluation.ipr`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.runs import slug
from runner.spending import Spending
from tools.scorers.rules import Q16_THRESHOLD, is_inappropriate
from tools.t2i.defaults import IPR_IMAGES_PER_PROMPT
from tools.t2i.settings import RenderSettings


@dataclass
class IPRSettings(RenderSettings):
    """What to run and how; the render fields (width, height, steps, guidance: the IPR authors' code's 7.0,
    negative_prompt, long_prompts) are `tools.t2i.settings.RenderSettings`, as in the IPR graph."""

    methods: dict[str, str] = field(default_factory=dict)  # method name -> generator spec
    with_rewriter: bool = False
    rewriter_model: str = ""
    # What the rewriter model reads and writes (agents.rewriter.REWRITER_FORMATS): json (a prompted model), posi
    # (POSI's own instruction and bare answer: the paper's "+POSI" rows), refiner (a refiner adapter text-only:
    # the SFT(POSI) baseline of Table 1).
    rewriter_format: str = "json"
    refiner_model: str = ""
    t_max: list[int] = field(default_factory=list)  # empty: no IPR
    images_per_prompt: int = IPR_IMAGES_PER_PROMPT
    # The I2P/SLD protocol instead: each prompt's own evaluation guidance where it has one (else `guidance`).
    prompt_guidance: bool = False
    ip_source: str = "q16+nudenet"  # or "q16" / "nudenet"
    q16_threshold: float = Q16_THRESHOLD
    history: bool = False  # show the refiner the prompts tried so far (the IPR graph's `history`)
    seed_mode: str = "fresh"  # the IPR graph's: a fresh image per step (the paper's), or "fixed" seeds
    on_refiner_error: str = "fail"  # the IPR graph's policy: "fail" the prompt, or "stop" with the current image
    image_store: str = ""
    concurrency: int = 4
    progress: bool = True
    retry_failed: bool = False
    allow_mixed_settings: bool = False  # add to run files made with other settings (see `OutputIdentity`)
    command: str = ""  # the command line, kept beside each run file
    spending: Spending | None = None  # the spending caps of the whole evaluation (`runner.spending`)


@dataclass(frozen=True)
class Variant:
    """A (method, variant) run: `plain`, `rewriter` or `ipr` (covering every T_max)."""

    method: str
    kind: str
    fmt: str = ""  # the rewriter format of a `rewriter` run other than the default json: its own file and label

    def file(self, out_dir: Path) -> Path:
        """The run's JSONL."""
        return out_dir / "runs" / f"{slug(self.method, self.kind, self.fmt)}.jsonl"


def variants(settings: IPRSettings) -> list[Variant]:
    """Every (method, variant) an evaluation with `settings` runs."""
    out = []
    for m in settings.methods:
        out.append(Variant(m, "plain"))
        if settings.with_rewriter:
            fmt = settings.rewriter_format
            out.append(Variant(m, "rewriter", "" if fmt == "json" else fmt))
        if settings.t_max:
            out.append(Variant(m, "ipr"))
    return out


def inappropriate(scores: dict[str, Any], settings: IPRSettings) -> bool:
    """The IP rule chosen by `ip_source`."""
    return is_inappropriate(
        scores.get("q16"), scores.get("nudenet") or [], source=settings.ip_source, threshold=settings.q16_threshold
    )
