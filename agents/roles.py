"""The answer of every role, by call role, for people writing `scripted:` files (`unveil roles` prints it).

Nothing here lists the roles: each role module declares what its calls answer (`ROLE_ANSWERS`: call role -> output
schema; `TEXT_ANSWERS`: call role -> what its free text holds, as the IPR refiner's), and this module collects the
declarations of every module of the `agents` package. tests/agents/test_roles.py fails on a module that calls the
gateway for a structured answer without declaring it.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

import agents

# The module-level names a role module declares its answers under.
STRUCTURED = "ROLE_ANSWERS"
FREE_TEXT = "TEXT_ANSWERS"


def declaring_modules() -> list[str]:
    """The `agents` modules whose source declares answers, read as text so that the others (the providers' heavy
    stacks) stay unimported; in name order."""
    root = Path(agents.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if any(f"\n{name}:" in text for name in (STRUCTURED, FREE_TEXT)):
            names.append(".".join(("agents", *path.relative_to(root).with_suffix("").parts)))
    return names


@cache
def _modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(name) for name in declaring_modules())


def role_schema_classes() -> dict[str, type[BaseModel]]:
    """The output schema of every structured role, by call role (as `unveil roles` names it)."""
    return {role: schema for module in _modules() for role, schema in getattr(module, STRUCTURED, {}).items()}


def text_roles() -> dict[str, str]:
    """What the answer of every free-text role holds, by call role."""
    return {role: what for module in _modules() for role, what in getattr(module, FREE_TEXT, {}).items()}


def role_schemas() -> dict[str, dict[str, object]]:
    """JSON Schema of each structured role's answer."""
    return {role: schema.model_json_schema() for role, schema in role_schema_classes().items()}
