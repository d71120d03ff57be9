"""Run-time context shared by Unveil's graphs: a model spec per role and the run's settings, editable in Studio.

Every field can also be set by an environment variable `UNVEIL_<FIELD>` (e.g. `UNVEIL_MODEL`,
`UNVEIL_PAIR_JUDGE_MODEL`), which applies when the field is left at its default. A role whose own field is empty
uses `model`.

This module is the one home of context validation. A context arrives from Python callers, from the CLI and,
through `langgraph dev`, as JSON typed by hand in Studio, so on construction every field is coerced to its declared
type (`"2"` -> 2; null or "" -> the field's default, as the exported schema advertises) and checked against the bounds
its metadata declares (`min`, `min_items`, `item_choices`) and, for a field typed `Literal[...]`, its choices;
`check_context` (awaited by the first node of every graph) then checks what needs the file system or the
environment: scripted model files and API keys. Every error is a `ContextError` (a `ValueError`, whose message the
server shows to the client) naming the field.
"""

from __future__ import annotations

import asyncio
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from agents.providers.profiles import API_KEYS, provider_profile
from agents.spec import DEFAULT_SPEC, ModelSpec, ModelSpecError, redact_spec
from tools.env import FALSE_WORDS, TRUE_WORDS, env_str, parse_bool
from tools.errors import UnveilError
from tools.t2i.settings import renamed_hint

T = TypeVar("T")


class ContextError(UnveilError, ValueError):
    """A context (settings) field is unusable; the message names the field."""


def _coerce(name: str, value: str, like: Any) -> Any:
    """An environment variable's text as the type of the field's default."""
    if isinstance(like, bool):
        return parse_bool(name, value)
    if isinstance(like, int):
        return int(value)
    if isinstance(like, float):
        return float(value)
    if isinstance(like, (list, tuple)):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    factory = f.default_factory
    return factory() if callable(factory) else None


def base_type(annotation: Any) -> Any:
    """The declared type without `| None` (list[str] stays list[str])."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def coerce_field(name: str, value: Any, annotation: Any) -> Any:
    """`value` as the field's declared type (bool, int, float, str or list[str]), or a `ContextError`."""
    kind = base_type(annotation)
    got = f"got {value!r} ({type(value).__name__})"
    if typing.get_origin(kind) is typing.Literal:
        # The choices are the Literal's own values (checked in `validate_fields`); here only the type.
        if isinstance(value, str):
            return value.strip()
        raise ContextError(f"{name}: expected one of {', '.join(map(str, typing.get_args(kind)))}, {got}")
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in (*TRUE_WORDS, *FALSE_WORDS):
            return value.strip().lower() in TRUE_WORDS
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ContextError(f"{name}: expected true or false, {got}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ContextError(f"{name}: expected a whole number, {got}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ContextError(f"{name}: expected a number, {got}")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ContextError(f"{name}: expected a string, {got}")
    if typing.get_origin(kind) is list:
        if isinstance(value, str):  # "a, b" typed in a form field
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ContextError(f"{name}: expected a list of strings, {got}")
        return [v.strip() for v in value]
    return value


def is_empty(value: object) -> bool:
    """Whether a setting was left empty: null, or a string of nothing but spaces (a cleared form field)."""
    return value is None or (isinstance(value, str) and not value.strip())


def field_choices(annotation: object) -> tuple[Any, ...]:
    """The allowed values of a field typed `Literal[...]` (the one spelling of its choices), else ()."""
    kind = base_type(annotation)
    return typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else ()


def validate_fields(ctx: Any) -> None:
    """Coerce every field of a context dataclass in place and check the bounds its metadata declares."""
    hints = typing.get_type_hints(type(ctx))
    for f in fields(ctx):
        value = getattr(ctx, f.name)
        if is_empty(value):
            # Studio sends null (or "" for a cleared text box) for a field left empty; both mean the default, which
            # the exported schema advertises.
            value = _default(f)
        value = coerce_field(f.name, value, hints.get(f.name, Any))
        meta = f.metadata
        if "min" in meta and value < meta["min"]:
            raise ContextError(f"{f.name}: must be at least {meta['min']}, got {value}")
        choices = field_choices(hints.get(f.name, Any))
        if choices and value not in choices:
            raise ContextError(f"{f.name}: {value!r} is not one of {', '.join(map(str, choices))}")
        if isinstance(value, list):
            if meta.get("min_items") and len(value) < meta["min_items"]:
                raise ContextError(f"{f.name}: give at least {meta['min_items']} value(s); the list is empty")
            allowed = meta.get("item_choices")
            unknown = [v for v in value if allowed is not None and v not in allowed]
            if unknown:
                raise ContextError(
                    f"{f.name}: {', '.join(map(repr, unknown))} not allowed; choose from {', '.join(allowed or ())}"
                )
        setattr(ctx, f.name, value)


def check_setting_names(cls: type, settings: Iterable[object]) -> None:
    """Refuse setting names the context class `cls` lacks, with one `ContextError` naming them and the valid ones."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(str(k) for k in settings if k not in names)
    if unknown:
        raise ContextError(
            f"{', '.join(unknown)}: unknown setting(s) of {cls.__name__}{renamed_hint(unknown)}; "
            f"valid: {', '.join(sorted(names))}"
        )


def strict_init(cls: type[T]) -> type[T]:
    """Make a context dataclass refuse unknown settings with an error that names them and lists the valid ones.

    (Applied after `@dataclass`: the generated `__init__` would raise a bare TypeError. `langgraph dev` itself
    drops context keys its exported schema does not list before a run starts, so there the graphs are served through
    `graphs/studio.py`, which checks the names first.)
    """
    init: Callable[..., None] = cls.__init__

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        check_setting_names(cls, kwargs)
        # The settings a caller gave explicitly win over `UNVEIL_<FIELD>`, even when equal to the default
        # (`UNVEIL_L_MAX=2 unveil detect --l-max 4` runs with 4).
        object.__setattr__(self, "_explicit_fields", frozenset(kwargs))
        init(self, *args, **kwargs)

    __init__.__doc__ = init.__doc__
    setattr(cls, "__init__", __init__)  # noqa: B010 - a plain assignment to a method upsets type checkers
    setattr(cls, "strict_context", True)  # noqa: B010 - read by runner.context.explicit_context
    return cls


def check_model_spec(field_name: str, spec: str) -> None:
    """A spec that cannot work is refused before any call: unparsable, a missing script file, a missing API key.

    Reads the file system, so callers on an event loop run it in a thread (`check_context` does).
    """
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError as exc:
        raise ContextError(f"{field_name}: {exc}") from exc
    if provider_profile(parsed.provider).model_files == "script":
        path = Path(parsed.model.split("?", 1)[0]).expanduser()
        if not path.is_file():
            raise ContextError(f"{field_name}: the script file {str(path)!r} of {spec!r} does not exist")
    keys = API_KEYS.get(parsed.provider)
    # A custom @base_url is usually a local server that needs no key.
    if keys and not parsed.base_url and not any(env_str(k) for k in keys):
        raise ContextError(
            f"{field_name}: {spec!r} needs an API key; set {' or '.join(keys)} in the environment that runs it "
            "(the shell you run `unveil` from, or the server's for `langgraph dev` and Studio)"
        )


@dataclass(kw_only=True)
class ModelsContext:
    """Models per role and the image store; subclassed by each graph. The folders images may be read from are the
    server's setting (`UNVEIL_IMAGE_ROOTS`, see `graphs.ingest`), never a run's."""

    model: str = field(
        default=DEFAULT_SPEC,
        metadata={
            "description": "Default model spec for every role: 'provider:model[@base_url]'. "
            f"The embedded default {DEFAULT_SPEC} is a 135M demonstration model, not a judge."
        },
    )
    image_store: str = field(
        default="", metadata={"description": "Image store folder (default ~/.cache/unveil/images)."}
    )

    def __post_init__(self) -> None:
        # Environment overrides apply only to fields the caller did not set (a context class without `strict_init`
        # cannot tell: there, to fields left at their defaults), so Studio, CLI and Python values win.
        explicit: frozenset[str] | None = getattr(self, "_explicit_fields", None)
        for f in fields(self):
            current = getattr(self, f.name)
            env = env_str(f"UNVEIL_{f.name.upper()}")
            unset = f.name not in explicit if explicit is not None else current == _default(f)
            if env is not None and (is_empty(current) or unset):
                try:
                    setattr(self, f.name, _coerce(f"UNVEIL_{f.name.upper()}", env, _default(f)))
                except ValueError as exc:
                    raise ContextError(f"{f.name}: UNVEIL_{f.name.upper()}={env!r} is not valid ({exc})") from exc
        validate_fields(self)

    def spec_for(self, role: str) -> str:
        """The model spec of a role (its own field, else `model`)."""
        own = getattr(self, f"{role}_model", "") or ""
        return own or self.model

    def models(self) -> dict[str, str]:
        """Every role's effective spec, for provenance records (base-URL credentials redacted: records are written)."""
        return {f.name[:-6]: redact_spec(self.spec_for(f.name[:-6])) for f in fields(self) if f.name.endswith("_model")}

    def roles_in_use(self) -> dict[str, str]:
        """Field name -> spec of every model this run may call (subclasses narrow it to their roles)."""
        used: dict[str, str] = {}
        for role, spec in self.models().items():
            own = getattr(self, f"{role}_model", "")
            used[f"{role}_model" if own else "model"] = spec
        return used

    def check_environment(self) -> None:
        """Blocking checks of the models in use (script files, API keys); see `check_context`."""
        for name, spec in self.roles_in_use().items():
            check_model_spec(name, spec)


async def check_context(ctx: ModelsContext) -> None:
    """Checks of a context that read the file system or environment, off the event loop; the first node of every
    graph awaits it, so a missing script file or API key fails the run at once with its name."""
    await asyncio.to_thread(ctx.check_environment)
