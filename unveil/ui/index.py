"""A line index of the JSONL file a page shows, read once and then only where it grew.

Pages list and filter small per-record summaries held in memory; a record itself is read from its byte offset
when one page needs it. The file is only ever read as a regular file, line by line with the batch reader's line
cap (`tools.jsonl_files.MAX_LINE_BYTES`: a longer line is skipped in chunks, never held whole), so a huge line, a FIFO
or a device in its place cannot hang the app or fill its memory. Appends (a reviewer's decision, a running batch)
are read from where the last read stopped; a file replaced or cut (an atomic rewrite) is indexed again.

Every line that cannot be used is kept as a problem with its line number and reason: a line that is not JSON or
has no id is listed alone; a record whose id is known but whose fields have the wrong shape (the summary function
raises `ValueError`/`TypeError`) stays listed under its id as bad, so one bad record never hides the others.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import Any

from tools.errors import UnveilError
from tools.jsonl_files import MAX_LINE_BYTES, parse_json_line

Summarize = Callable[[dict[str, Any]], dict[str, Any]]
HEAD_BYTES = 4096  # of an over-long line, read for the id that leads it


def head_id(head: bytes, id_field: str = "id") -> str | None:
    """The id of a record line that is over the cap, when the record starts with it (as every record Unveil
    writes does: `{"id": ...`); None otherwise."""
    match = re.match(rb'\s*\{\s*"' + re.escape(id_field.encode()) + rb'"\s*:\s*("(?:[^"\\]|\\.)*")', head)
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) and value else None


class NotARegularFileError(UnveilError, ValueError):
    """The path is a FIFO, a device, a folder or gone: the app reads regular files only."""


def open_regular(path: str | os.PathLike[str]) -> BufferedReader:
    """Open `path` for binary reading only if it is a regular file (checked on the open descriptor, and opened
    non-blocking so a FIFO cannot hang the open itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise NotARegularFileError(f"{path}: cannot open ({exc.strerror})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotARegularFileError(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


@dataclass
class Problem:
    """One unusable line: its number, the record id when known, and why."""

    line: int
    reason: str
    id: str | None = None


class JsonlIndex:
    """Offsets and summaries of a JSONL file's records by id (the last record of an id wins, as everywhere)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        summarize: Summarize,
        *,
        id_field: str = "id",
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.summarize = summarize
        self.id_field = id_field
        self.max_line_bytes = max_line_bytes
        self._lock = threading.RLock()
        self._reset()

    def _reset(self, ident: tuple[int, int] | None = None) -> None:
        self._ident = ident
        self._end = 0  # bytes read so far, always at a line start
        self._lineno = 0
        self.where: dict[str, tuple[int, int, int]] = {}  # id -> (offset, length, line) of its last record
        self.summaries: dict[str, dict[str, Any]] = {}  # in order of each id's first record
        self.problems: dict[str, Problem] = {}  # id -> why its last record is unusable
        self.unreadable: list[Problem] = []  # lines with no usable id
        self.overcap: set[str] = set()  # ids whose last line is over the cap (no record of theirs is used)
        self._head = b""  # the start of the last over-long line (its id, when it leads the record)

    def refresh(self) -> None:
        """Read what was appended since the last call (or everything, when the file was replaced or cut)."""
        with self._lock:
            with open_regular(self.path) as fh:
                st = os.fstat(fh.fileno())
                ident = (st.st_dev, st.st_ino)
                if ident != self._ident or st.st_size < self._end:
                    self._reset(ident)
                if st.st_size == self._end:
                    return
                fh.seek(self._end)
                for offset, raw in self._lines(fh):
                    self._add(offset, raw)

    def _lines(self, fh: BufferedReader) -> Iterator[tuple[int, bytes | None]]:
        """(offset, bytes) of each whole line from the current position; an over-long line gives None. A torn
        last line (a writer mid-append) is left for the next refresh."""
        while True:
            offset = self._end
            raw = fh.readline(self.max_line_bytes + 1)
            if not raw.endswith(b"\n"):
                if len(raw) <= self.max_line_bytes:
                    return  # end of file, or a line still being written
                size, self._head = len(raw), raw[:HEAD_BYTES]
                while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line
                    raw = fh.readline(self.max_line_bytes)
                    size += len(raw)
                if not raw:
                    return  # the over-long line is not finished yet
                self._end += size
                self._lineno += 1
                yield offset, None
                continue
            self._end += len(raw)
            self._lineno += 1
            if raw.strip():
                yield offset, raw

    def _add(self, offset: int, raw: bytes | None) -> None:
        line = self._lineno
        if raw is None:
            reason = f"line is over {self.max_line_bytes} bytes (not read)"
            sid = head_id(self._head, self.id_field)
            if sid is None:
                self.unreadable.append(Problem(line, reason))
                return
            # The id's last record is this line: its earlier copy is stale, so the id is shown as bad and takes
            # no decision (before, the page showed and decided on the earlier copy).
            self.overcap.add(sid)
            self.where[sid] = (offset, 0, line)  # known (a decision answers why not), never read
            self.problems[sid] = Problem(line, reason, sid)
            self.summaries[sid] = {"id": sid, "status": "", "bad": True, "line": line}
            return
        try:
            rec = parse_json_line(raw)
        except ValueError as exc:
            self.unreadable.append(Problem(line, str(exc)))
            return
        if not isinstance(rec, dict) or self.id_field not in rec:
            self.unreadable.append(Problem(line, f"not a record with an {self.id_field!r}"))
            return
        raw_id = rec[self.id_field]
        if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool) or str(raw_id) == "":
            self.unreadable.append(Problem(line, f"{self.id_field!r} is not a string"))
            return
        sid = str(raw_id)
        self.overcap.discard(sid)
        try:
            summary = self.summarize(rec)
            self.problems.pop(sid, None)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            summary = {
                "id": sid,
                "status": rec.get("status") if isinstance(rec.get("status"), str) else "",
                "bad": True,
            }
            self.problems[sid] = Problem(line, str(exc) or type(exc).__name__, sid)
        summary.update(id=sid, line=line)
        self.where[sid] = (offset, len(raw), line)
        self.summaries[sid] = summary

    def rows(self) -> list[dict[str, Any]]:
        """Every id's summary, in file order (refreshed first)."""
        self.refresh()
        with self._lock:
            return list(self.summaries.values())

    def get(self, sample_id: str) -> dict[str, Any] | None:
        """The last record of an id, read from its offset; None for an unknown id or one whose line no longer
        parses (the file changed under us: it is indexed again on the next refresh)."""
        self.refresh()
        with self._lock:
            at = self.where.get(sample_id)
            if at is None or sample_id in self.overcap:
                return None
            offset, length, _ = at
            with open_regular(self.path) as fh:
                fh.seek(offset)
                raw = fh.read(length)
        try:
            rec = parse_json_line(raw)
        except ValueError:
            return None
        return rec if isinstance(rec, dict) and str(rec.get(self.id_field)) == sample_id else None

    def problem(self, sample_id: str) -> Problem | None:
        """Why the record of an id cannot be shown, or None."""
        with self._lock:
            return self.problems.get(sample_id)

    def all_problems(self) -> list[Problem]:
        """Every unusable line, by line number."""
        with self._lock:
            return sorted([*self.unreadable, *self.problems.values()], key=lambda p: p.line)

    def mapping(self) -> LazyRecords:
        """The records by id as a read-on-demand mapping (each record parsed once per mapping)."""
        self.refresh()
        return LazyRecords(self)


class LazyRecords(Mapping[str, dict[str, Any]]):
    """A read-only view of an index's records that parses only the records asked for (and keeps them, so a
    caller that changes a record in place sees its change on the next lookup, as with a plain dict)."""

    def __init__(self, index: JsonlIndex) -> None:
        self._index = index
        self._cache: dict[str, dict[str, Any]] = {}

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key not in self._cache:
            rec = self._index.get(key)
            if rec is None:
                raise KeyError(key)
            self._cache[key] = rec
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._index.where))

    def __len__(self) -> int:
        return len(self._index.where)
