"""The one reader of environment variables: text, booleans, numbers with bounds and lists, each bad value a
`SettingError` that names the variable and says what it must be.

Product code reads the environment only through this module (the CLI in `unveil/` may read it too);
`tests/project/test_settings_env.py` keeps it so. An unset variable and an empty one are the same: the default applies.
Booleans have one vocabulary, `1/true/yes/on` and `0/false/no/off` (any case); anything else is an error.
"""

from __future__ import annotations

import os
from typing import TypeVar

from tools.errors import UnveilError

N = TypeVar("N", int, float)

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
BOOL_WORDS = f"{'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}"  # for messages


class SettingError(UnveilError, ValueError):
    """A setting (an environment variable or its explicit counterpart) has a value that cannot be used."""


def parse_bool(name: str, text: str) -> bool:
    """`text` as a boolean of the one vocabulary, or a `SettingError` naming `name` and the accepted words."""
    low = text.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise SettingError(f"{name}={text!r}: expected {BOOL_WORDS}")


def env_str(name: str, default: str | None = None) -> str | None:
    """A text variable, stripped (`default` when unset or empty)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip()


def env_bool(name: str, default: bool = False) -> bool:
    """A boolean variable of the one vocabulary (`default` when unset or empty)."""
    raw = env_str(name)
    return default if raw is None else parse_bool(name, raw)


def env_list(name: str, sep: str = ",") -> list[str]:
    """A list variable: the non-empty stripped items between `sep` (empty when unset)."""
    return [item.strip() for item in (env_str(name) or "").split(sep) if item.strip()]


def check_minimum(name: str, value: float, minimum: float | None, *, strict: bool = False) -> None:
    """Raise `SettingError` naming `name` when `value` is below `minimum` (or not above it, when `strict`)."""
    if minimum is None:
        return
    if value < minimum or (strict and value <= minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise SettingError(f"{name}={value!r}: must be {bound}")


def _number(name: str, default: N | None, kind: type[N], minimum: float | None, strict: bool) -> N | None:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise SettingError(f"{name}={raw!r}: expected {what}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SettingError(f"{name}={raw!r}: expected a finite number")
    check_minimum(name, value, minimum, strict=strict)
    return value


def env_int(name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    """An integer variable (`default` when unset or empty), at least `minimum`."""
    return _number(name, default, int, minimum, False)


def env_float(name: str, default: float | None, *, minimum: float | None = None, strict: bool = False) -> float | None:
    """A number variable (`default` when unset or empty); `strict` makes `minimum` exclusive."""
    return _number(name, default, float, minimum, strict)


def env_items() -> dict[str, str]:
    """A copy of the whole environment, for code that must look at every variable (secret redaction)."""
    return dict(os.environ)


def set_default(name: str, value: str, *, unless_only: str | None = None) -> str:
    """Set a variable that configures a third-party library unless the user set it; its value either way.

    `unless_only`: a value the library itself writes into the variable when nothing set it (so it is no choice of
    the user's); found there, it is replaced by `value` as if the variable were unset."""
    current = os.environ.get(name)
    if current is None or (unless_only is not None and current == unless_only):
        os.environ[name] = value
        return value
    return current
