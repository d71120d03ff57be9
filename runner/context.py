"""Building graph contexts from explicit settings: values given by the caller win over `UNVEIL_<FIELD>`.

The one "explicit beats environment" rule lives in `graphs.context.strict_init`: a context records the fields its
caller passed and applies `UNVEIL_<FIELD>` only to the others, so `--l-max 4` (the default) still wins over
`UNVEIL_L_MAX=2`. `explicit_context` is that constructor for callers that hold the class in a variable; the values
go through the context's own coercion and checks (`"3"` -> 3, `"yes"` -> True), exactly as `cls(**values)`.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def explicit_context(cls: type[T], **values: Any) -> T:
    """A context of type `cls` whose given `values` win over environment overrides, coerced and checked."""
    if not getattr(cls, "strict_context", False):
        raise TypeError(f"{cls.__name__} is not a strict_init context: it cannot tell explicit values from defaults")
    return cls(**values)


def check_model_fields(classes: tuple[type, ...], kw: dict[str, Any]) -> None:
    """Refuse model fields none of the contexts has, listing the roles they have."""
    fields = {name for cls in classes for name in getattr(cls, "__dataclass_fields__", {})}
    unknown = sorted(k for k in kw if k.endswith("_model") and k not in fields)
    if unknown:
        roles = sorted(f[: -len("_model")] for f in fields if f.endswith("_model") and f != "model")
        names = ", ".join(u[: -len("_model")] for u in unknown)
        raise ValueError(f"unknown role(s) {names}; valid roles: {', '.join(roles)}")
