"""The user's set S of known toxic concept pairs (TAG §3.3 Step 2's "oracle set of toxic pairs S, user-defined,
obtained from a knowledge base"), checked beside the model-judged pairs.

A file of pairs, one per JSONL line (`{"image_concept": ..., "text_concept": ..., "category": ..., "reason": ...}`)
or CSV row (a header naming the same columns; `reason` optional). A candidate pair whose image-side and text-side
concepts both match a listed pair (case-insensitive, Unicode-normalised, whitespace collapsed, surrounding
punctuation dropped) is toxic without a model call. The file is read once per (path, size, mtime) and refused as a
whole, with the line, when any row is unusable: a set with a silently skipped row would miss a pair the user listed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tools.errors import UnveilError
from tools.safe_files import read_named_file

MAX_BYTES = 16 * 1024 * 1024  # a knowledge base of pairs, not a corpus
MAX_FIELD_CHARS = 500
FIELDS = ("image_concept", "text_concept", "category", "reason")


class ToxicPairsError(UnveilError, ValueError):
    """The toxic-pair file cannot be used (missing, not a regular file, too large, or a row without its fields)."""


@dataclass(frozen=True)
class KnownPair:
    """One listed toxic pair: the two concepts as written, the category and the reason (may be empty)."""

    image_concept: str
    text_concept: str
    category: str
    reason: str


def normalise(concept: str) -> str:
    """The form concepts are compared in: NFKC, case-folded, whitespace collapsed, surrounding punctuation and
    quotes dropped ("Weapon  Component." and "weapon component" match)."""
    text = " ".join(unicodedata.normalize("NFKC", concept).casefold().split())
    return text.strip(" \t.,;:!?\"'`()[]{}")


def _read_capped(path: str) -> str:
    """The file's text, refusing a missing file, one that is not a regular file, or one over `MAX_BYTES`."""
    data = read_named_file(path, MAX_BYTES, what="toxic pairs", error=ToxicPairsError)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ToxicPairsError(f"toxic pairs {path!r}: not UTF-8 text") from exc


def _rows(path: str, text: str) -> list[tuple[int, Any]]:
    """(line number, row) of a CSV (`.csv`) or JSONL file; blank JSONL lines are skipped."""
    if path.lower().endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        missing = [f for f in FIELDS[:3] if f not in (reader.fieldnames or [])]
        if missing:
            raise ToxicPairsError(f"toxic pairs {path!r}: the CSV header lacks {', '.join(missing)}")
        return [(i, row) for i, row in enumerate(reader, start=2)]
    out: list[tuple[int, Any]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ToxicPairsError(f"toxic pairs {path!r} line {i}: not JSON ({exc.msg})") from exc
    return out


def _pair(path: str, line: int, row: object) -> KnownPair:
    """One row as a pair; a row that is not an object or lacks a concept or the category is refused."""
    if not isinstance(row, dict):
        raise ToxicPairsError(f"toxic pairs {path!r} line {line}: expected an object with {', '.join(FIELDS[:3])}")
    values = {f: " ".join(str(row.get(f) or "").split()) for f in FIELDS}
    for name in FIELDS[:3]:
        if not normalise(values[name]):
            raise ToxicPairsError(f"toxic pairs {path!r} line {line}: {name} is missing or empty")
    for name, value in values.items():
        if len(value) > MAX_FIELD_CHARS:
            raise ToxicPairsError(f"toxic pairs {path!r} line {line}: {name} is over {MAX_FIELD_CHARS} characters")
    return KnownPair(**values)


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int) -> dict[tuple[str, str], KnownPair]:
    """The set by normalised (image concept, text concept); the first row of a repeated pair wins."""
    pairs: dict[tuple[str, str], KnownPair] = {}
    for line, row in _rows(path, _read_capped(path)):
        pair = _pair(path, line, row)
        pairs.setdefault((normalise(pair.image_concept), normalise(pair.text_concept)), pair)
    if not pairs:
        raise ToxicPairsError(f"toxic pairs {path!r}: no pair listed")
    return pairs


def load_toxic_pairs(path: str) -> dict[tuple[str, str], KnownPair]:
    """The toxic-pair set of `path` by normalised (image concept, text concept), read again when the file changed;
    raises `ToxicPairsError` naming the file (and line) when it cannot be used."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    return _load(path, st.st_size if st else -1, st.st_mtime_ns if st else -1)


def fingerprint(path: str) -> str:
    """The SHA-256 of the set's file (capped like the load), so an output's settings notice an edited set."""
    import hashlib

    return hashlib.sha256(_read_capped(path).encode("utf-8")).hexdigest()


def match(pairs: dict[tuple[str, str], KnownPair], image_concept: str, text_concept: str) -> KnownPair | None:
    """The listed pair that an image-side and a text-side concept form, or None."""
    return pairs.get((normalise(image_concept), normalise(text_concept)))
