"""What a text-to-image generator kind is to the registry: one `GeneratorKind` record.

Each kind module of `tools/t2i/kinds/` ends with its record(s): the name before the spec's ':', one line of help,
the options (`tools.t2i.options`) and `?key=` parameters it takes, whether it renders a diffusers pipeline in this
process (then the 't2i' extra and the model's availability are checked, and the over-long-prompt policy applies),
and how it is built. `tools.t2i.registry` collects them; nothing else names a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tools.image_store import ImageStore
from tools.t2i.base import ImageGenerator
from tools.t2i.options import GeneratorOptions

# (spec, model, the spec's `?key=value` parameters, store, options) -> the generator; spec, options and parameters
# are checked against the record before it is called.
Build = Callable[[str, str, Mapping[str, str], ImageStore | None, GeneratorOptions], ImageGenerator]


@dataclass(frozen=True)
class GeneratorKind:
    """One generator kind, as the registry knows it."""

    name: str  # the part of a spec before the first ':'
    help: str  # one line: what renders the images
    options: frozenset[str]  # the `GeneratorOptions` keys it takes (others are refused by name)
    params: tuple[str, ...]  # the `?key=` parameters its specs may carry (others are refused by name)
    build: Build
    pipeline: bool = True  # a diffusers pipeline in this process: the 't2i' extra, a Hub id or folder, long prompts
