"""Run-time context shared by Unveil's graphs: a model spec per role, editable in LangGraph Studio.

Every field can also be set by an environment variable `UNVEIL_<FIELD>` (e.g. `UNVEIL_MODEL`,
`UNVEIL_PAIR_JUDGE_MODEL`), which applies when the field is left at its default. A role whose own field is empty
uses `model`.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from agents.spec import DEFAULT_SPEC, redact_spec


def _coerce(value: str, like: Any) -> Any:
    if isinstance(like, bool):
        return value.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(like, int):
        return int(value)
    if isinstance(like, float):
        return float(value)
    if isinstance(like, (list, tuple)):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


@dataclass(kw_only=True)
class ModelsContext:
    """Models per role plus the image store; subclassed by each graph's context."""

    model: str = field(
        default=DEFAULT_SPEC,
        metadata={"description": "Default model spec for every role: 'provider:model[@base_url]'. "
                  "The embedded default llamacpp:smollm2 is a 135M demonstration model, not a judge."},
    )
    image_store: str = field(default="", metadata={"description": "Image store folder (default ~/.cache/unveil/images)."})

    def __post_init__(self) -> None:
        # Environment overrides apply only to fields left at their defaults, so Studio and CLI values win.
        for f in fields(self):
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            current = getattr(self, f.name)
            env = os.environ.get(f"UNVEIL_{f.name.upper()}")
            if env is not None and current == default:
                setattr(self, f.name, _coerce(env, default))

    def spec_for(self, role: str) -> str:
        """The model spec of a role (its own field, else `model`)."""
        own = getattr(self, f"{role}_model", "") or ""
        return own or self.model

    def models(self) -> dict[str, str]:
        """Every role's effective spec, for provenance records (base-URL credentials redacted: records are written)."""
        return {f.name[:-6]: redact_spec(self.spec_for(f.name[:-6])) for f in fields(self) if f.name.endswith("_model")}

