"""The label schema of a review folder (`DIR/labels.json`): what a reviewer records beside approve/reject.

```json
{"category": true, "rationale": "reject", "ratings": {"covertness": [1, 5], "image_quality": [1, 5]}}
```

- `category` (default false): the reviewer may correct the sample's risk category (one of the project's ten);
  the correction stays with the review until the sample is decided, then the record's `category` changes in
  place and the generated one is kept as `category_generated` (`graphs.ctd.review.settle_category`);
- `rationale`: when a note is required: `never` (default), `reject` (a rejection needs one: the paper's "clearly
  substantiated"), or `always`;
- `ratings` (default none): optional whole-number ratings, each with its bounds.

Without the file a decision is approve/reject with an optional note, as before. The schema is checked by
`check_answer` before a decision is applied (the web app and `unveil review` both go through it), as is a
rejection that sends the sample back to the Eraser (`send_back`: it needs a note, which the Eraser reads).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.categories import CATEGORIES, normalize_category
from tools.errors import UnveilError
from tools.safe_files import read_named_file

LABELS = "labels.json"
RATIONALE_RULES = ("never", "reject", "always")
MAX_BYTES = 64 * 1024


class LabelSchemaError(UnveilError, ValueError):
    """A labels.json that is not the expected shape, or an answer that does not meet it."""


@dataclass(frozen=True)
class LabelSchema:
    """What a reviewer records beside approve/reject (see the module docstring)."""

    category: bool = False
    rationale: str = "never"
    ratings: dict[str, tuple[int, int]] = field(default_factory=dict)


def _parse(data: object, where: str) -> LabelSchema:
    """The schema of a parsed labels.json; a `LabelSchemaError` names the file and the field that is wrong."""
    if not isinstance(data, dict) or set(data) - {"category", "rationale", "ratings"}:
        raise LabelSchemaError(f"{where}: expected an object with category, rationale and ratings only")
    if not isinstance(data.get("category", False), bool):
        raise LabelSchemaError(f"{where}: category: expected true or false")
    raw_ratings = data.get("ratings") or {}
    if not isinstance(raw_ratings, dict):
        raise LabelSchemaError(f"{where}: ratings: expected {{NAME: [LOW, HIGH]}}")
    ratings: dict[str, tuple[int, int]] = {}
    for name, bounds in raw_ratings.items():
        ok = isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds)
        if not ok or bounds[0] > bounds[1]:
            raise LabelSchemaError(f"{where}: ratings.{name}: expected [LOW, HIGH], two whole numbers")
        ratings[str(name)] = (bounds[0], bounds[1])
    rationale = data.get("rationale", "never")
    if not isinstance(rationale, str) or rationale not in RATIONALE_RULES:
        raise LabelSchemaError(f"{where}: rationale: expected one of {', '.join(RATIONALE_RULES)}")
    return LabelSchema(category=bool(data.get("category", False)), rationale=rationale, ratings=ratings)


def load_schema(folder: str | os.PathLike[str]) -> LabelSchema | None:
    """The folder's label schema, or None without `labels.json` (a link or a device in its place is refused)."""
    p = Path(folder) / LABELS
    raw = read_named_file(p, MAX_BYTES, what="label schema", error=LabelSchemaError, nofollow=True, missing_ok=True)
    if raw is None:
        return None
    try:
        return _parse(json.loads(raw.decode("utf-8")), str(p))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LabelSchemaError(f"{p}: not valid JSON ({exc})") from exc


def check_answer(answer: dict[str, Any], schema: LabelSchema | None) -> dict[str, Any]:
    """The labels of an approve/reject answer under `schema` ({category?, ratings?}); a `LabelSchemaError` names
    what is missing or wrong (a required rationale, a category outside the vocabulary, a rating out of bounds or
    not in the schema). Other decisions (note, undo) carry no labels."""
    decision = str(answer.get("decision", "")).strip().lower()
    note = str(answer.get("note") or "").strip()
    if answer.get("send_back"):
        if decision != "reject":
            raise LabelSchemaError(
                f"send_back: sending a sample back to the Eraser is a rejection with a note; decision is {decision!r}"
            )
        if not note:
            raise LabelSchemaError(
                "send_back: sending a sample back to the Eraser is a rejection with a note; the note is empty "
                "(the Eraser reads it)"
            )
        return {**check_answer({**answer, "send_back": False}, schema), "send_back": True}
    if schema is None or decision not in ("approve", "reject"):
        return {}
    if not note and (schema.rationale == "always" or (schema.rationale == "reject" and decision == "reject")):
        what = "every decision" if schema.rationale == "always" else "a rejection"
        raise LabelSchemaError(f"a rationale (the note) is required for {what} in this dataset (labels.json)")
    labels: dict[str, Any] = {}
    if schema.category and answer.get("category"):
        category = normalize_category(str(answer["category"]))
        if category not in CATEGORIES:
            raise LabelSchemaError(f"category {answer['category']!r}: not one of {', '.join(CATEGORIES)}")
        labels["category"] = category
    ratings = _check_ratings(answer.get("ratings") or {}, schema)
    if ratings:
        labels["ratings"] = ratings
    return labels


def _check_ratings(ratings: object, schema: LabelSchema) -> dict[str, int]:
    """An answer's ratings checked against the schema's names and bounds (empty values skipped)."""
    if not isinstance(ratings, dict):
        raise LabelSchemaError("ratings: expected {NAME: NUMBER}")
    checked: dict[str, int] = {}
    for name, value in ratings.items():
        if value in (None, ""):
            continue
        if name not in schema.ratings:
            raise LabelSchemaError(f"rating {name!r}: not in this dataset's labels.json")
        low, high = schema.ratings[name]
        try:
            number = int(str(value))
        except ValueError:
            raise LabelSchemaError(f"rating {name}: expected a whole number from {low} to {high}") from None
        if not low <= number <= high:
            raise LabelSchemaError(f"rating {name}: {number} is outside {low} to {high}")
        checked[name] = number
    return checked
