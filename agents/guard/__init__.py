"""Guard models as detectors: each guard's own published prompt template and output parser.

A guard method (`guard:llama-guard-4`, `guard:llavaguard`, `guard:guardreasoner-vl`, `guard:template=FILE`) is a
one-call detector like the vanilla baseline, but it speaks the guard model's own protocol: the model's published
instruction goes in the system message, the pair under test goes as delimited data (text in a `<data>` element,
the image as an image block), and the model's own answer format is parsed into the common `GuardVerdict`, with
its category codes mapped onto Unveil's categories. `get_guard` resolves a method name.
"""

from __future__ import annotations

from agents.guard.base import GuardDefinition, GuardParseError, GuardVerdict, detect_guard
from agents.guard.guardreasoner import GUARDREASONER_VL
from agents.guard.llama_guard import LLAMA_GUARD_4
from agents.guard.llavaguard import LLAVAGUARD
from agents.guard.template import load_template_guard
from tools.env import SettingError

GUARDS: dict[str, GuardDefinition] = {g.name: g for g in (LLAMA_GUARD_4, LLAVAGUARD, GUARDREASONER_VL)}


def get_guard(name: str) -> GuardDefinition:
    """The guard of a method name without its `guard:` prefix: a built-in name or `template=FILE`."""
    name = name.removeprefix("guard:")
    if name.startswith("template="):
        return load_template_guard(name.partition("=")[2])
    if name not in GUARDS:
        raise SettingError(f"unknown guard {name!r} (one of {', '.join(GUARDS)}, or template=FILE)")
    return GUARDS[name]


__all__ = ["GUARDS", "GuardDefinition", "GuardParseError", "GuardVerdict", "detect_guard", "get_guard"]
