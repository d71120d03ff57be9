"""Numbers from `UNVEIL_*` environment variables, with errors that name the variable and say what it must be."""

from __future__ import annotations

import os

from tools.errors import UnveilError


class SettingError(UnveilError, ValueError):
    """A setting (an environment variable or its explicit counterpart) has a value that cannot be used."""


def _number(name: str, default: float | None, kind: type, minimum: float | None, strict: bool) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise SettingError(f"{name}={raw!r}: expected {what}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SettingError(f"{name}={raw!r}: expected a finite number")
    check_minimum(name, value, minimum, strict=strict)
    return value


def check_minimum(name: str, value: float, minimum: float | None, *, strict: bool = False) -> None:
    """Raise `SettingError` naming `name` when `value` is below `minimum` (or not above it, when `strict`)."""
    if minimum is None:
        return
    if value < minimum or (strict and value <= minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise SettingError(f"{name}={value!r}: must be {bound}")


def env_int(name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    """An integer variable (`default` when unset or empty)."""
    value = _number(name, default, int, minimum, False)
    return None if value is None else int(value)


def env_float(name: str, default: float | None, *, minimum: float | None = None, strict: bool = False) -> float | None:
    """A number variable (`default` when unset or empty); `strict` makes `minimum` exclusive."""
    return _number(name, default, float, minimum, strict)
