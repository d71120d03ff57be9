"""Shared JSONL files: lines read with a size cap, whole-line appends under a per-file write lock, a torn tail cut
back, records read by id.

Every writer of a file that others append to as well (a batch's output, a dataset folder's `samples.jsonl` and
`decisions.jsonl`, written by `unveil generate`, the web app, `unveil review` and the CTD graph's review node)
goes through `append_lines` or `JsonlAppender`, or takes `tools.atomic_files.write_lock`, so no writer loses or
tears another's line. Files are written through `tools.safe_files.open_side_file`: a link planted at a name is
refused, never written through, and so is a FIFO or a device. Files are read only when regular
(`tools.safe_files.open_regular`: a FIFO cannot hang a reader). Lines are split on `\n` only (a U+2028 inside a
JSON string is data), and a line over the size cap is skipped without being read whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.atomic_files import atomic_write_bytes, write_all, write_lock
from tools.errors import InputDataError
from tools.safe_files import open_regular, open_side_file

MAX_LINE_BYTES = 4 * 1024 * 1024


def parse_json_line(raw: bytes) -> Any:
    """One JSON value of a line; every way a line can fail (not UTF-8, not JSON, an integer over Python's digit
    limit, nesting deeper than the parser's recursion limit) raises `ValueError` with a short reason."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from exc
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise ValueError(f"not usable JSON ({str(exc).split(';')[0]})") from exc


def iter_lines(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Iterator[tuple[int, bytes | None]]:
    """`(line number, raw bytes)` of a file split on `\n` only; a line longer than `max_bytes` (default
    `MAX_LINE_BYTES`) is skipped in chunks of that size (never held whole) and given as `None`. Blank lines are
    left out."""
    max_bytes = MAX_LINE_BYTES if max_bytes is None else max_bytes
    with open(open_regular(path), "rb") as fh:  # open() of a descriptor: regular files only
        lineno = 0
        while True:
            raw = fh.readline(max_bytes + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line
                    raw = fh.readline(max_bytes)
                yield lineno, None
                continue
            if raw.strip():
                yield lineno, raw


def read_jsonl_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(line number, object)` of a JSONL file whose every line must be an object; the first bad line raises
    `ValueError` naming the file and line (for small files a person wrote, such as review decisions)."""
    name = Path(path).name
    for lineno, raw in iter_lines(path):
        if raw is None:
            raise InputDataError(f"{name} line {lineno}: line is over {MAX_LINE_BYTES} bytes")
        try:
            value = parse_json_line(raw)
        except ValueError as exc:
            raise InputDataError(f"{name} line {lineno}: {exc}") from exc
        if not isinstance(value, dict):
            raise InputDataError(f"{name} line {lineno}: expected an object, got {type(value).__name__}")
        yield lineno, value


def repair_tail(path: Path) -> None:
    """Cut a torn last line (left by a killed writer) so appends start on a clean line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with os.fdopen(open_side_file(path, os.O_RDWR), "rb+") as fh:  # never truncate a file a link points to
        end = fh.seek(0, os.SEEK_END)
        fh.seek(end - 1)
        if fh.read(1) == b"\n":
            return  # the common case: one byte read, not the whole file (appends to large files stay cheap)
        cut, pos = 0, end
        while pos > 0:  # the last newline, searched backwards in chunks
            step = min(1 << 20, pos)
            pos -= step
            fh.seek(pos)
            at = fh.read(step).rfind(b"\n")
            if at >= 0:
                cut = pos + at + 1
                break
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def order_lines(path: Path, ids: list[str], *, id_field: str = "id") -> bool:
    """Rewrite a JSONL file with its records in the order of `ids` (a batch's input; concurrent samples are
    appended as they finish), records of other ids and lines that are no record after them, each in its place, every
    line's bytes unchanged. Atomic and under the file's write lock, as `runner.batch.drop_failed`; left alone (False)
    when already in order, or when a line is over the size cap (never read whole) or torn. True when rewritten."""
    if not path.is_file():
        return False
    rank = {sid: k for k, sid in enumerate(ids)}
    with write_lock(path):
        keyed: list[tuple[int, int, bytes]] = []
        for pos, (_lineno, raw) in enumerate(iter_lines(path)):
            if raw is None or not raw.endswith(b"\n"):
                return False
            try:
                value = parse_json_line(raw)
            except ValueError:
                value = None
            sid = value.get(id_field) if isinstance(value, dict) else None
            keyed.append((rank.get(str(sid), len(rank)) if sid is not None else len(rank), pos, raw))
        ordered = sorted(keyed)  # by input rank, then by place in the file (positions are unique)
        if [pos for _, pos, _ in ordered] == list(range(len(keyed))):
            return False
        atomic_write_bytes(path, b"".join(raw for _, _, raw in ordered))
    return True


def done_records(path: Path, *, id_field: str = "id") -> dict[str, dict[str, Any]]:
    """Records already in an output file, by id (a torn tail and unreadable lines are ignored)."""
    out: dict[str, dict[str, Any]] = {}
    if not Path(path).exists():
        return out
    for _lineno, raw in iter_lines(path):
        if raw is None:
            continue  # over the line cap: skipped in chunks, never held whole
        if not raw.endswith(b"\n"):
            break
        try:
            rec = parse_json_line(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and id_field in rec:
            out[str(rec[id_field])] = rec
    return out


def append_lines(path: str | os.PathLike[str], data: bytes) -> None:
    """Append whole lines to a file others append to as well (a reviewer's decisions to a running batch's output):
    under the file's write lock, after cutting a torn tail, complete or cut back and raised (`BatchWriteError` of
    `tools.atomic_files`)."""
    p = Path(path)
    with write_lock(p):
        repair_tail(p)
        fd = open_side_file(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            start = os.fstat(fd).st_size
            try:
                write_all(fd, data, p)
                os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


class JsonlAppender:
    """Appends whole records, one complete write + `fsync` each, under an asyncio lock and the file's write lock.

    A write that fails part-way (a full disk) is cut back to the last whole line and raised, so a record is never
    fused with the next. If another process replaced the file meanwhile (a reviewer's atomic rewrite), the
    appender reopens it first, so its records land in the file that is there, not in the unlinked old one."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(path)
        self._fd = self._open()
        self._lock = asyncio.Lock()
        self._broken: BaseException | None = None  # after a failed write, nothing more is written

    def _open(self) -> int:
        return open_side_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def _write_line(self, line: bytes) -> None:
        with write_lock(self.path):
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(self._fd)
            if current is None or (current.st_ino, current.st_dev) != (mine.st_ino, mine.st_dev):
                os.close(self._fd)
                self._fd = self._open()
            start = os.fstat(self._fd).st_size
            try:
                write_all(self._fd, line, self.path)
                os.fsync(self._fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)  # drop the partial record: the file ends on a whole line
                raise

    async def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line."""
        line = record_line(record)
        async with self._lock:
            if self._broken is not None:
                raise self._broken
            try:
                self._write_line(line)
            except BaseException as exc:
                self._broken = exc
                raise

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


def record_line(record: dict[str, Any]) -> bytes:
    """The line a record is written as (UTF-8 JSON and a newline)."""
    try:
        return (json.dumps(record, ensure_ascii=False, default=str, allow_nan=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable input bytes): escape them rather than lose the record
        return (json.dumps(record, ensure_ascii=True, default=str, allow_nan=False) + "\n").encode("ascii")
    except ValueError:  # NaN or Infinity: not JSON; write them as null rather than emit an unreadable line
        return (json.dumps(finite_values(record), ensure_ascii=True, default=str) + "\n").encode("ascii")


def finite_values(value: object) -> object:
    """`value` with every NaN/Infinity float replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: finite_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_values(v) for v in value]
    return value
