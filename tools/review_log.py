"""A review folder's files and lock, shared by every reviewer: the web app, `unveil review`, and the CTD graph's
human-review node under `langgraph dev` (Studio).

A review folder is a CTD dataset folder (see `runner.ctd_dataset`); reviewers touch three of its files:

- `samples.jsonl`: one record per sample; a decision appends the updated record (the last record of an id wins);
- `decisions.jsonl`: every decision taken, one line each (`id`, `decision`, `note`, `reviewer`, `time`, and
  `undoes` for an undo), never rewritten;
- `.lock`: the folder lock (`review_lock`), held while a reviewer reads a record, decides and appends both lines,
  so two reviewers (two processes or two threads) never interleave their read-modify-write.

Appends go through `tools.jsonl_files.append_lines` (the per-file write lock shared with a running batch), and
the lock file is opened with `tools.safe_files.open_in`: a link planted in the folder is refused, never followed.

Which folder the Studio graph uses is the server's own setting, `UNVEIL_REVIEW_DIR` (the environment, or
langgraph.json's `env`), never a run's context or input: a run cannot make the server write elsewhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tools.env import env_str
from tools.errors import UnveilError
from tools.jsonl_files import append_lines, done_records
from tools.safe_files import open_in

SAMPLES = "samples.jsonl"
DECISIONS = "decisions.jsonl"
LOCK = ".lock"
LOCK_TIMEOUT_S = 30.0
REVIEW_DIR_ENV = "UNVEIL_REVIEW_DIR"


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
    review. flock locks belong to the open file, so threads of one process exclude each other as processes do."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    fd = open_in(root, LOCK, os.O_RDWR | os.O_CREAT)  # a link planted at `.lock` is refused, never followed
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ReviewBusyError(
                        f"{root}: the dataset folder is locked by another reviewer or writer "
                        f"for over {timeout:.0f} s; try again"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_records(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Every sample record of a folder, by id (the last record of an id wins; a torn tail is ignored)."""
    return done_records(Path(folder) / SAMPLES)


def append_records(
    folder: str | os.PathLike[str], records: Sequence[dict[str, Any]], decisions: Sequence[dict[str, Any]] = ()
) -> None:
    """Append the decision lines to `decisions.jsonl`, then the updated sample records to `samples.jsonl` (the
    caller holds `review_lock`).

    The log goes first: a decision is never applied without its line (before, a full disk let the record change
    while its log line was lost). A write that fails raises `ReviewWriteError` saying what was saved: nothing (the
    log could not be written), or the log lines without the records (the decisions are logged, the samples keep
    their state; deciding again applies them)."""
    root = Path(folder)
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
