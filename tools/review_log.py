"""A review folder's files and lock, shared by every reviewer: the web app, `unveil review`, and the CTD graph's
human-review node under `langgraph dev` (Studio).

A review folder is a CTD dataset folder (see `runner.ctd_dataset`); reviewers touch three of its files:

- `samples.jsonl`: one record per sample; a decision appends the updated record (the last record of an id wins);
- `decisions.jsonl`: every decision taken, one line each (`id`, `decision`, `note`, `reviewer`, `time`, and
  `undoes` for an undo), never rewritten;
- `.lock`: the folder lock (`review_lock`), held while a reviewer reads a record, decides and appends both lines,
  so two reviewers (two processes or two threads) never interleave their read-modify-write. Nobody needs it to
  read: a page reads whole lines of `samples.jsonl` and the atomically replaced views, so a held lock never
  stops a page; a web app decision waits for it in the event loop (`review_lock_async`, a few seconds at most,
  then "busy, nothing was saved"), never in a thread the pages need.

Appends go through `tools.jsonl_files.append_lines` (the per-file write lock shared with a running batch), and
the lock file is opened with `tools.safe_files.open_in`: a link planted in the folder is refused, never followed.

Which folder the Studio graph uses is the server's own setting, `UNVEIL_REVIEW_DIR` (the environment, or
langgraph.json's `env`), never a run's context or input: a run cannot make the server write elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from tools.env import env_str
from tools.errors import UnveilError
from tools.jsonl_files import MAX_LINE_BYTES, append_lines, done_records
from tools.safe_files import open_in

SAMPLES = "samples.jsonl"
DECISIONS = "decisions.jsonl"
LOCK = ".lock"
LOCK_TIMEOUT_S = 30.0  # how long `review_lock` waits (the CLI, Studio, the views' rewrite)
DECISION_WAIT_S = 5.0  # how long a web app decision waits before it answers "busy, not saved"
POLL_S = 0.05
REVIEW_DIR_ENV = "UNVEIL_REVIEW_DIR"


# The folders whose lock this context holds (a thread started by `asyncio.to_thread` carries its caller's).
_HELD: ContextVar[frozenset[str]] = ContextVar("unveil_review_locks_held", default=frozenset())


class ReviewBusyError(UnveilError, RuntimeError):
    """Another process held the review folder's lock for longer than the timeout."""


class ReviewWriteError(UnveilError, OSError):
    """A decision could not be written (a full disk, no permission); the message says what was saved."""


def review_dir() -> Path | None:
    """The review folder the server's configuration names (`UNVEIL_REVIEW_DIR`), or None when it names none (no
    filesystem call: async graph nodes call it)."""
    value = env_str(REVIEW_DIR_ENV)
    return Path(value).expanduser() if value else None


@contextlib.contextmanager
def review_lock(folder: str | os.PathLike[str], *, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the folder's exclusive lock (flock on `DIR/.lock`): reviewers (CLI, web or Studio) and view rewrites
    take it, so two reviewers never interleave their read-modify-write. `unveil generate` appends records with
    single O_APPEND writes, which never lose or tear a reviewer's appended line, so generation need not stop for
    review. flock locks belong to the open file, so threads of one process exclude each other as processes do.

    Waits up to `timeout` seconds, then raises `ReviewBusyError` (nothing was written). Within a context that
    holds the folder's lock already (`review_lock_async` around a thread that decides, or an outer
    `review_lock`), it is taken again at once: the holder's own work never waits for itself."""
    root = Path(folder)
    key = _lock_key(root)
    if key in _HELD.get():
        yield
        return
    fd = _open_lock(root)
    try:
        for _ in _failed_tries(root, fd, timeout):
            time.sleep(POLL_S)
        with _holding(key):
            yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.asynccontextmanager
async def review_lock_async(folder: str | os.PathLike[str], *, timeout: float = DECISION_WAIT_S) -> AsyncIterator[None]:
    """`review_lock` for a server: the wait happens in the event loop, never in a worker thread, so any number of
    decisions waiting on a folder someone else holds (a running `unveil generate`, `unveil review`, a script)
    take no thread from the pages, which read without the lock (whole lines of `samples.jsonl`, the atomically
    replaced views). Waits up to `timeout` (default `DECISION_WAIT_S`: a reviewer gets an answer promptly), then
    raises `ReviewBusyError`. Work done inside it, in this task or in threads it starts with `asyncio.to_thread`
    (which carry its context), takes the folder's `review_lock` at once."""
    root = Path(folder)
    key = _lock_key(root)
    if key in _HELD.get():
        yield
        return
    fd = _open_lock(root)
    try:
        for _ in _failed_tries(root, fd, timeout):
            await _pause()
        with _holding(key):
            yield
    finally:
        os.close(fd)


async def _pause() -> None:
    """One poll interval of `review_lock_async` (a seam the tests hold a waiter in)."""
    await asyncio.sleep(POLL_S)


def _failed_tries(root: Path, fd: int, timeout: float) -> Iterator[None]:
    """Try the folder's lock until it is taken, yielding after each failed try so that the caller waits one poll
    interval its own way (`review_lock` sleeps, `review_lock_async` awaits); `ReviewBusyError` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            raise _busy(root, timeout)
        yield


@contextlib.contextmanager
def _holding(key: str) -> Iterator[None]:
    """Mark the folder's lock as held by this context (and the threads it starts), so the holder's own work takes
    it again at once."""
    token = _HELD.set(_HELD.get() | {key})
    try:
        yield
    finally:
        _HELD.reset(token)


def _lock_key(root: Path) -> str:
    """The folder's identity for the held-locks context (one folder named two ways is one lock)."""
    return os.path.realpath(root)


def _open_lock(root: Path) -> int:
    """The folder's lock file, open (made with its folder when missing). A link planted at `.lock` is refused
    (`UnsafePathError`), never followed; a folder that cannot be written (a full disk, no permission) is a
    `ReviewWriteError` saying nothing was saved."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        return open_in(root, LOCK, os.O_RDWR | os.O_CREAT)
    except UnveilError:
        raise
    except OSError as exc:
        raise ReviewWriteError(
            f"{root / LOCK}: the folder lock cannot be opened ({exc.strerror or exc}); nothing was saved"
        ) from exc


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _busy(root: Path, waited: float) -> ReviewBusyError:
    return ReviewBusyError(
        f"{root}: the dataset folder is locked by another reviewer or writer (unveil generate, unveil review) "
        f"and stayed locked for {waited:g} s: nothing was saved; try again"
    )


def read_records(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Every sample record of a folder, by id (the last record of an id wins; a torn tail is ignored)."""
    return done_records(Path(folder) / SAMPLES)


def append_records(
    folder: str | os.PathLike[str], records: Sequence[dict[str, Any]], decisions: Sequence[dict[str, Any]] = ()
) -> None:
    """Append the decision lines to `decisions.jsonl`, then the updated sample records to `samples.jsonl` (the
    caller holds `review_lock`).

    A record whose line would be over the line cap (`MAX_LINE_BYTES`) is refused before anything is written: the
    readers would skip it and go on with its earlier copy. The log goes first: a decision is never applied without
    its line (before, a full disk let the record change while its log line was lost). A write that fails raises
    `ReviewWriteError` saying what was saved: nothing (the log could not be written), or the log lines without the
    records (the decisions are logged, the samples keep their state; deciding again applies them)."""
    root = Path(folder)
    for rec in records:
        size = len(_lines([rec]))
        if size > MAX_LINE_BYTES:  # every reader skips such a line and would read the record's earlier copy
            raise ReviewWriteError(
                f"{root / SAMPLES}: the updated record of {str(rec.get('id'))!r} would be {size:,} bytes, over the "
                f"{MAX_LINE_BYTES:,}-byte line cap every reader uses; nothing was saved"
            )
    if decisions:
        try:
            append_lines(root / DECISIONS, _lines(decisions))
        except OSError as exc:
            raise ReviewWriteError(
                f"{root / DECISIONS}: could not be written ({exc.strerror or exc}); nothing was saved"
            ) from exc
    if records:
        try:
            append_lines(root / SAMPLES, _lines(records))
        except OSError as exc:
            logged = f"the {len(decisions)} decision line(s) are in {DECISIONS} but " if decisions else ""
            raise ReviewWriteError(
                f"{root / SAMPLES}: could not be written ({exc.strerror or exc}); {logged}no sample record "
                "changed: decide again once the folder can be written"
            ) from exc


def _lines(records: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records).encode("ascii")
