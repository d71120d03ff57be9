"""Shared JSONL files: whole-line appends under a per-file write lock, a torn tail cut back, records read by id.

Every writer of a file that others append to as well (a batch's output, a dataset folder's `samples.jsonl` and
`decisions.jsonl`, written by `unveil generate`, the web app, `unveil review` and the CTD graph's review node)
goes through `append_lines` or takes `write_lock`, so no writer loses or tears another's line. Files are opened
with `tools.safe_files.open_nofollow`: a link planted at a name is refused, never written through.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.errors import UnveilError
from tools.safe_files import open_nofollow


class BatchWriteError(UnveilError, OSError):
    """A record could not be written whole (disk full, I/O error); the file was cut back to its last whole line."""


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


def repair_tail(path: Path) -> None:
    """Cut a torn last line (left by a killed writer) so appends start on a clean line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with os.fdopen(open_nofollow(path, os.O_RDWR), "rb+") as fh:  # never truncate a file a link points to
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


def done_records(path: Path, *, id_field: str = "id") -> dict[str, dict[str, Any]]:
    """Records already in an output file, by id (a torn tail and unreadable lines are ignored)."""
    out: dict[str, dict[str, Any]] = {}
    if not Path(path).exists():
        return out
    with Path(path).open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                rec = parse_json_line(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and id_field in rec:
                out[str(rec[id_field])] = rec
    return out


def _write_all(fd: int, data: bytes, name: str | os.PathLike[str]) -> None:
    """Write every byte or raise `BatchWriteError` naming the file (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            raise BatchWriteError(exc.errno, f"could not write {str(name)!r}: {exc.strerror}") from exc
        if n <= 0:
            raise BatchWriteError(f"could not write {str(name)!r}: the device accepted no more bytes")
        view = view[n:]


def _lock_path(path: Path, what: str) -> Path:
    # Beside the file the name resolves to, so a symlink to an output shares the output's lock.
    real = Path(os.path.realpath(path))
    return real.parent / f".{real.name}.{what}.lock"


@contextlib.contextmanager
def write_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """The short lock taken around each append to, and each read-modify-rewrite of, a shared file (a batch's
    output, a dataset's samples.jsonl), so a reviewer's rewrite and a running batch's appends never lose each
    other's records. Blocking; safe across processes and threads (each holder opens its own descriptor)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_nofollow(_lock_path(p, "write"), os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def append_lines(path: str | os.PathLike[str], data: bytes) -> None:
    """Append whole lines to a file others append to as well (a reviewer's decisions to a running batch's output):
    under the file's write lock, after cutting a torn tail, complete or cut back and raised (`BatchWriteError`)."""
    p = Path(path)
    with write_lock(p):
        repair_tail(p)
        fd = open_nofollow(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            start = os.fstat(fd).st_size
            try:
                _write_all(fd, data, p)
                os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
