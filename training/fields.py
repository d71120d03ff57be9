"""The field of a training settings dataclass: its default and its help, which `unveil train` shows per flag."""

from __future__ import annotations

import copy
from dataclasses import field
from typing import TypeVar

T = TypeVar("T")


def setting(default: T, description: str) -> T:
    """A dataclass field with `default` (copied per instance when mutable) and `description` as its help, kept in
    the field's metadata as the graph contexts keep theirs."""
    meta = {"description": description}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: copy.copy(default), metadata=meta)
    return field(default=default, metadata=meta)
