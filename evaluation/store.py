"""A persistent key -> JSON store for generations and image scores made during an evaluation.

Model calls are cached by the gateway; this store does the same for the other two costly steps, so that the
same request (generator spec, prompt, negative prompt, seed, size, steps, guidance) is rendered once and each
image is scored once, across methods (an IPR trajectory starts from the plain run's image), across reruns, and
after a run file is deleted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agents.cache import ResponseCache


def key_of(namespace: str, payload: dict[str, Any]) -> str:
    """A stable key for a payload within a namespace."""
    blob = json.dumps({"ns": namespace, **payload}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class EvalStore:
    """Generations and scores by key (SQLite, shared by concurrent tasks of one process)."""

    def __init__(self, path: str | Path):
        self._cache = ResponseCache(path)

    def get(self, namespace: str, payload: dict[str, Any]) -> Any:
        """The stored value, or None."""
        hit = self._cache.get(key_of(namespace, payload))
        return None if hit is None else hit.get("value")

    def put(self, namespace: str, payload: dict[str, Any], value: object) -> None:
        """Store a value."""
        self._cache.put(key_of(namespace, payload), {"value": value})
