"""Building graph contexts from explicit settings: values given by the caller win over `UNVEIL_<FIELD>`.

The one "explicit beats environment" rule lives in `graphs.context.strict_init`: a context records the fields its
caller passed and applies `UNVEIL_<FIELD>` only to the others, so `--l-max 4` (the default) still wins over
`UNVEIL_L_MAX=2`. `explicit_context` is that constructor for callers that hold the class in a variable; the values
go through the context's own coercion and checks (`"3"` -> 3, `"yes"` -> True), exactly as `cls(**values)`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from graphs.context import ContextError, ModelsContext

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
        raise ContextError(f"unknown role(s) {names}; valid roles: {', '.join(roles)}")


# Context fields that say where things are kept or run, not what the records hold.
NOT_SETTINGS = frozenset({"model", "image_store", "image_roots", "device"})


# Query parameters of a spec that change when answers come, not what they say (`scripted:FILE?latency=0.2`).
TIMING_PARAMS = frozenset({"latency"})


def answers_spec(spec: str) -> str:
    """`spec` without its timing parameters (`TIMING_PARAMS`): two specs that give the same answers compare equal."""
    from urllib.parse import parse_qsl, urlencode

    head, sep, query = spec.rpartition("?")
    if not sep or "=" not in query:
        return spec
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in TIMING_PARAMS]
    return f"{head}?{urlencode(kept, safe='/:@')}" if kept else head


def context_settings(ctx: ModelsContext) -> dict[str, Any]:
    """The settings of a graph context that change its records, for an output's identity (`runner.batch.
    OutputIdentity`): every role's effective model spec (`models`, credentials redacted) and every other field
    except where things are kept or run (`NOT_SETTINGS`). String values pass through `redact_secrets`."""
    import dataclasses

    from tools.redact import redact_secrets

    def clean(value: object) -> object:
        if isinstance(value, str):
            return redact_secrets(value)
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        return value

    out: dict[str, Any] = {"models": {role: answers_spec(spec) for role, spec in ctx.models().items()}}
    content = model_content(ctx.models())
    if content:
        out["model_content"] = content
    for f in dataclasses.fields(ctx):
        if f.name in NOT_SETTINGS or f.name.endswith("_model"):
            continue
        out[f.name] = clean(getattr(ctx, f.name))
    return out


def model_content(models: dict[str, Any]) -> dict[str, str]:
    """The content fingerprint of each role's file-backed model (`agents.providers.registry.model_fingerprint`: a
    script's hash, a GGUF file's or a local folder's stamp), so an edited script or a swapped GGUF behind the same
    spec counts as another model. Models known by name only (APIs, Hub ids) and the embedded demo model (its files
    come with its package) have none."""
    from agents.providers.profiles import is_demo_spec
    from agents.providers.registry import model_fingerprint
    from agents.spec import ModelSpec, ModelSpecError

    seen: dict[str, str] = {}
    out: dict[str, str] = {}
    for role, spec in models.items():
        if not isinstance(spec, str) or not spec or is_demo_spec(spec):
            continue
        if spec not in seen:
            try:
                fingerprint = model_fingerprint(ModelSpec.parse(spec))
            except (ModelSpecError, OSError, ValueError):
                fingerprint = ""  # a bad spec is reported with its name when the model is built
            seen[spec] = fingerprint[:24] if fingerprint.startswith("sha256:") else fingerprint
        if seen[spec] and seen[spec] != ModelSpec.parse(spec).model.partition("?")[0]:
            out[role] = seen[spec]
    return out
