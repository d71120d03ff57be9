"""Guard models as detectors: each guard's own published prompt template and output parser.

A guard method (`guard:llama-guard-4`, `guard:llavaguard`, `guard:guardreasoner-vl`, `guard:template=FILE`) is a
one-call detector like the vanilla baseline, but it speaks the guard model's own protocol: the model's published
instruction goes in the system message, the pair under test goes as delimited data (text in a `<data>` element,
the image as an image block), and the model's own answer format is parsed into the common `GuardVerdict`, with
its category codes mapped onto Unveil's categories. `parse_guard` reads a method name (the one reading of it: the
server's context check and the graph both use it), `get_guard` resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.guard.base import GuardDefinition, GuardParseError, GuardVerdict, detect_guard
from agents.guard.guardreasoner import GUARDREASONER_VL
from agents.guard.llama_guard import LLAMA_GUARD_4
from agents.guard.llavaguard import LLAVAGUARD
from agents.guard.template import load_template_guard
from tools.env import SettingError

GUARDS: dict[str, GuardDefinition] = {g.name: g for g in (LLAMA_GUARD_4, LLAVAGUARD, GUARDREASONER_VL)}


@dataclass(frozen=True)
class GuardRef:
    """What a guard method names: a built-in guard (`name`) or a template file (`template`), never both."""

    name: str = ""
    template: str | None = None


def parse_guard(method: str) -> GuardRef:
    """The one reading of a guard method, with or without its `guard:` prefix (`guard:llavaguard`, `llavaguard`,
    `guard:template=FILE`, `template=FILE`; surrounding spaces ignored). Whoever checks a method (the server's
    context check) reads it with this, as `get_guard` does: a check that parsed the value its own way let
    `guard:template=/proc/self/environ` through while the graph read that file."""
    text = method.strip()
    text = text.removeprefix("guard:").strip()
    if text.startswith("template="):
        return GuardRef(template=text.partition("=")[2].strip())
    if text not in GUARDS:
        raise SettingError(f"unknown guard {method!r} (one of {', '.join(GUARDS)}, or template=FILE)")
    return GuardRef(name=text)


def get_guard(method: str) -> GuardDefinition:
    """The guard of a method (see `parse_guard`): a built-in guard, or one read from its template file."""
    ref = parse_guard(method)
    if ref.template is not None:
        return load_template_guard(ref.template)
    return GUARDS[ref.name]


__all__ = [
    "GUARDS",
    "GuardDefinition",
    "GuardParseError",
    "GuardRef",
    "GuardVerdict",
    "detect_guard",
    "get_guard",
    "parse_guard",
]
