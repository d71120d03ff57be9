"""What a scorer is to the rest of Unveil: one `ScorerEntry` record, and the one `ScoringSettings` every scorer reads.

Each scorer module (`q16`, `nudenet`, `clip_score`, `blip_score`, `mhsc`) ends with its `SCORER` entry: its name,
one line of help, the columns it adds to a score row, how it is built and started on stored images, how one of its
results becomes those columns, the optional modules it needs, and the checks of its settings. `tools.scorers.registry`
collects the entries; the one scoring entry point (`tools.scorers.score`), the IPR context's choices, the CTD
single-modality check's classifiers and `unveil list scorers` read them, and none of them names a scorer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from tools.errors import ConfigurationError, UnveilError
from tools.image_store import ImageStore

_Scorer = TypeVar("_Scorer")  # the scorer object a `get_*` factory builds


@dataclass(frozen=True)
class ScoringSettings:
    """Which models the scorers load (empty: each scorer's default). Each field's help is here, once: the IPR
    context and the commands' flags read it (`scoring_help`)."""

    q16_embeddings: str = field(
        default="",
        metadata={
            "description": "Q16 prompt-embeddings file (.npy or .p; empty: $UNVEIL_Q16_PROMPTS, else the "
            "repository's data/q16/vit-l-14.npy)."
        },
    )
    q16_clip_model: str = field(
        default="", metadata={"description": "CLIP ViT-L/14 model id or folder for Q16 (empty: default)."}
    )
    clip_model: str = field(
        default="", metadata={"description": "open_clip model for the CLIP score (empty: ViT-B/32)."}
    )
    blip_model: str = field(
        default="", metadata={"description": "BLIP model id or folder for the BLIP score (empty: default)."}
    )
    nudenet_labels: tuple[str, ...] = field(
        default_factory=tuple,
        metadata={"description": "NudeNet labels that flag an image (empty: the eight exposed labels IPR counts)."},
    )
    mhsc_checkpoints: str = field(
        default="", metadata={"description": "MHSC head checkpoints: a folder of <head>.pt files, or one file."}
    )
    device: str = field(default="", metadata={"description": "Device of the scorers (empty: CUDA when present)."})


def scoring_help(name: str) -> str:
    """The help of one `ScoringSettings` field (its description)."""
    return str({f.name: f for f in fields(ScoringSettings)}[name].metadata["description"])


class ScorerSettingsError(ConfigurationError, ValueError):
    """A scorer cannot run with its settings (its message names the flag and setting to change)."""


class ScorerEntryError(UnveilError, TypeError):
    """A scorer entry that cannot be registered (a piece missing, a name taken); the message names the scorer."""


# (settings, image ids, prompt, store) -> the scorer built (in a worker thread) and its scoring of the ids started
Start = Callable[[ScoringSettings, list[str], str, ImageStore | None], Awaitable[Awaitable[list[Any]]]]


@dataclass(frozen=True)
class ScorerEntry:
    """One scorer, as the registry knows it."""

    name: str  # what `scorers=[...]`, `--scorers` and the records call it
    help: str  # one line: what it measures
    columns: tuple[str, ...]  # the columns it adds to a score row, exactly
    start: Start  # build the scorer and start scoring stored images
    row: Callable[[Any], dict[str, Any]]  # one of its results -> its columns
    modules: tuple[str, ...] = ()  # modules of the optional 'scores' extra it needs (empty: the core install)
    require: Callable[[ScoringSettings], None] | None = None  # a missing setting, refused without touching a file
    check: Callable[[ScoringSettings], None] | None = None  # its files, checked before the first render
    # Its verdict on an image alone from its columns ({"flag": ..., evidence}), for CTD's single-modality check;
    # None for a scorer that needs the prompt (an alignment score).
    verdict: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def build_in_thread(factory: Callable[..., _Scorer], **options: object) -> Awaitable[_Scorer]:
    """A scorer built off the event loop: construction reads model and embeddings files."""
    return asyncio.to_thread(factory, **options)


def device_option(settings: ScoringSettings) -> dict[str, str]:
    """`{"device": ...}` when the settings name a device, else {} (the scorer's own default)."""
    return {"device": settings.device} if settings.device else {}
