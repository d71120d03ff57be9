"""A batch's samples: a JSONL input read into `BatchItem`s, with ids that are stable and never collide.

Input lines are read one by one (`tools.jsonl_files.iter_lines`: split on `\n` only, a line over the size cap
skipped without being read whole); a line that is not a JSON object, lacks an id or repeats one becomes an error
item naming the line and field, which the runner writes as a failed record while the others go on. Generated ids
(`line-N`, `ID#dup-line-N`) never collide with ids the input uses, and are the same for an unchanged input, so a
resumed run recognises them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import jsonl_files
from tools.errors import MissingFileError
from tools.jsonl_files import iter_lines, parse_json_line


@dataclass
class BatchItem:
    """One input sample (or the error that stopped it from being one)."""

    id: str
    record: dict[str, Any] | None
    error: str | None = None


def duplicate_id(rid: str, where: str, taken: set[str]) -> str:
    """The id of a repeated id's item, `ID#dup-WHERE` (WHERE: `line-N` in a JSONL file, `item-N` in a JSON list),
    made distinct from every id in `taken` (the ids the input uses and those generated so far) and added to it."""
    return _unique(f"{rid}#dup-{where}", taken)


def unique_id(candidate: str, taken: set[str]) -> str:
    """`candidate`, or `candidate~N` when `taken` holds it (see `duplicate_id`); added to `taken`."""
    return _unique(candidate, taken)


def _unique(candidate: str, taken: set[str]) -> str:
    # Generated ids must never equal an id of the input (or another generated one): a collision would make the
    # resume logic skip a real sample or write a second record under one id.
    out, n = candidate, 1
    while out in taken:
        n += 1
        out = f"{candidate}~{n}"
    taken.add(out)
    return out


def read_jsonl(path: str | os.PathLike[str], *, id_field: str = "id") -> Iterator[BatchItem]:
    """Samples of a JSONL file; bad lines and duplicate ids become error items named by line.

    Two passes: the first collects the ids the input uses, so the ids generated for bad lines (`line-N`) and
    repeated ids (`ID#dup-line-N`) can be made distinct from them; both are stable for an unchanged input, so a
    resumed run recognises them."""
    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"input {str(path)!r}: file not found")
    parsed: list[tuple[int, Any, str | None]] = []  # (line, value, error)
    user_ids: set[str] = set()
    for lineno, raw in iter_lines(p):
        if raw is None:
            parsed.append((lineno, None, f"line is over {jsonl_files.MAX_LINE_BYTES} bytes (not read)"))
            continue
        try:
            value = parse_json_line(raw)
        except ValueError as exc:
            parsed.append((lineno, None, str(exc)))
            continue
        if not isinstance(value, dict):
            parsed.append((lineno, None, f"expected a JSON object, got {type(value).__name__}"))
            continue
        rid = value.get(id_field)
        if rid is not None and not isinstance(rid, bool) and isinstance(rid, (str, int)):
            user_ids.add(str(rid))
        parsed.append((lineno, value, None))
    taken = set(user_ids)
    seen: set[str] = set()
    for lineno, record, error in parsed:
        where = f"{p.name} line {lineno}"
        if error is not None or record is None:
            yield BatchItem(_unique(f"line-{lineno}", taken), None, f"{where}: {error}")
            continue
        rid = record.get(id_field)
        if rid is None:
            yield BatchItem(_unique(f"line-{lineno}", taken), record)
            continue
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            reason = f"{where}: field {id_field!r} must be a string or integer"
            yield BatchItem(_unique(f"line-{lineno}", taken), None, reason)
            continue
        rid = str(rid)
        if rid in seen:
            yield BatchItem(duplicate_id(rid, f"line-{lineno}", taken), None, f"{where}: duplicate {id_field} {rid!r}")
            continue
        seen.add(rid)
        yield BatchItem(rid, record)
