"""`unveil generate` on a full disk (issue 32 item 7: it exited 134, an abort, after its own clear disk-full
error): at each place it writes (the samples line, the settings sidecar, the image store, the scenes'
checkpoints, the dataset views) a full disk is one error naming the file, exit 1, every line written stays whole,
and a rerun once there is room again completes with every id once.

The abort came from the render worker: a daemon thread still inside torch while the interpreter shut down (the
run had stopped on the full image store while the next scene rendered). Every worker now finishes its batch and
stops at exit (`tools.t2i.batching.Batcher.close`)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.graphs import test_ctd as ctd
from tools import safe_files
from tools.t2i.batching import Batcher, Job
from tools.t2i.registry import register_generator, unregister_generator

ROOT = Path(__file__).resolve().parents[2]
N = 2


def test_a_closed_batcher_finishes_its_batch_and_cancels_the_waiting_jobs() -> None:
    started, go = threading.Event(), threading.Event()

    def runner(jobs: list[Job]) -> list[str]:
        started.set()
        go.wait()
        return [f"done {j.payload}" for j in jobs]

    b = Batcher("closing")
    (first,) = b.submit([Job("a", 1, runner)])
    assert started.wait(60)
    (waiting,) = b.submit([Job("b", 2, runner)])  # another key: the next batch, never started
    closer = threading.Thread(target=b.close)
    closer.start()
    go.set()
    closer.join(60)
    assert not closer.is_alive()
    assert first.result(0) == "done 1" and waiting.cancelled()


PROBE = """
import sys, threading, torch
from tools.t2i.batching import Batcher, Job
started = threading.Event()
def runner(jobs):
    started.set()
    x, w = torch.randn(1, 8, 64, 64), torch.randn(8, 8, 3, 3)
    for _ in range(500):
        x = torch.nn.functional.conv2d(x, w, padding=1).tanh()
    return [1 for _ in jobs]
Batcher("probe").submit([Job("k", 0, runner)])
started.wait()
sys.exit(1)
"""


def test_a_process_that_exits_during_a_render_exits_with_its_own_code() -> None:
    """A process that ends (here with exit 1, as a run stopped by an error) while its render worker is inside
    torch exits with its own code: before, the daemon thread was still in torch at shutdown and the process
    aborted ("terminate called without an active exception", exit 134)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1 and "terminate called" not in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def sd_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def full_for_writes(monkeypatch: pytest.MonkeyPatch, part: str) -> None:
    """Every `os.write` to a file whose path holds `part` fails as on a full disk (appends, atomic rewrites)."""
    real = os.write

    def write(fd: int, data: Any) -> int:
        if part in _fd_path(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


class _FullFile:
    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)


def full_for_new_files(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """Every file written whole through `tools.safe_files.atomic_writer` (store images, dataset views) whose
    name ends with `suffix` fails as on a full disk."""
    real = safe_files.atomic_writer

    @contextlib.contextmanager
    def writer(root: Any, rel: Any, **kwargs: Any) -> Iterator[Any]:
        with real(root, rel, **kwargs) as fh:
            yield _FullFile(fh) if str(rel).endswith(suffix) else fh

    monkeypatch.setattr(safe_files, "atomic_writer", writer)


def full_checkpoints(monkeypatch: pytest.MonkeyPatch, _: str) -> None:
    """The scenes' checkpoint database refuses every write as SQLite does on a full disk."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def aput(*_args: Any, **_kw: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(AsyncSqliteSaver, "aput", aput)


POINTS = {
    # name: (how the disk fills, its argument, the file the error names)
    "samples line": (full_for_writes, "/samples.jsonl", "samples.jsonl"),
    "settings sidecar": (full_for_writes, ".samples.jsonl.settings", ".samples.jsonl.settings"),
    "image store": (full_for_new_files, ".png", "images"),
    "checkpoints": (full_checkpoints, "", "checkpoints.sqlite"),
    "dataset views": (full_for_new_files, "dataset.jsonl", "dataset.jsonl"),
}


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "a torn last line"
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
def test_a_full_disk_is_one_error_naming_the_file_and_a_rerun_completes(
    tmp_path: Path, sd_spec: str, point: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from unveil.cli import main

    fill, arg, named = POINTS[point]
    spec = ctd.write_script(tmp_path, ctd.accepting_script())
    out = tmp_path / "ds"
    args = ctd.cli_args(out, spec, sd_spec, "--review", "auto", "--concurrency", "2", n=N)
    with monkeypatch.context() as full:
        fill(full, arg)
        assert main(args) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("unveil generate: ")]
    assert len(errors) == 1, errors
    assert errors[0].startswith("unveil generate: error: ") and named in errors[0], errors[0]
    assert "No space left on device" in errors[0] or "disk is full" in errors[0], errors[0]
    assert "internal error" not in errors[0]
    written = _lines(out / "samples.jsonl")  # whole lines only, each a record
    assert all(r["status"] == "accepted" for r in written)
    # Room again: the rerun completes, every id once.
    assert main(args) == 0
    records = _lines(out / "samples.jsonl")
    assert sorted(r["id"] for r in records) == [f"drugs-{i:05d}" for i in range(N)]
    assert all(r["status"] == "accepted" and (out / r["image"]).is_file() for r in records)
    assert len(_lines(out / "dataset.jsonl")) == N


def _write_lock_free(db: Path) -> bool:
    """Whether a new connection gets the database's write lock at once (no busy wait)."""
    with contextlib.closing(sqlite3.connect(db, timeout=0)) as conn:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            assert "locked" in str(exc), exc
            return False
        conn.rollback()
        return True


@pytest.fixture
def paint_spec(tmp_path: Path) -> Iterator[str]:
    """A `registered:` generator that paints small images into the dataset's store: scenes without a pipeline."""
    from tests.evaluation.test_eval_ipr import PaintGenerator

    spec = register_generator(f"paint-{tmp_path.name}", PaintGenerator(tmp_path / "ds" / "images"))
    yield spec
    unregister_generator(spec)


def test_a_run_stopped_while_a_checkpoint_write_runs_leaves_the_checkpoints_unlocked(
    tmp_path: Path, paint_spec: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interleaving behind the once-flaky rerun above ("database is locked" on both scenes after a full
    checkpoints file stopped the run, only under load): one scene stops the run while its sibling's checkpoint
    write is inside its transaction (INSERT run, COMMIT not yet). LangGraph writes checkpoints from tasks of its
    own, and a scene cancelled during such a write ends without waiting for it (langgraph 1.2: its loop's exit is
    cancelled with it), so the write outlives its scene, as the second scene's double does here. The run used to
    close the connection under that write: the closed connection kept SQLite's write lock until Python collected
    the write's cursor. Now the write finishes before the connection closes, and nothing of the run holds the
    file when its one error is reported.

    Deterministic: the write is held inside its transaction (a statement trace on the connection's thread) until
    the batch has stopped, the last moment before the checkpoints are closed."""
    import runner.batch
    import runner.ctd
    from unveil.cli import main

    in_transaction, release = threading.Event(), threading.Event()
    outliving: list[asyncio.Task[None]] = []

    def trace(sql: str) -> None:  # on the connection's thread: the write's INSERT, its transaction begun
        if sql.startswith("INSERT") and " INTO writes " in sql and not in_transaction.is_set():
            in_transaction.set()
            release.wait()

    async def run_scene(graph: Any, sample_id: str, record: dict[str, Any], ctx: Any, **_: Any) -> dict[str, Any]:
        saver = graph.checkpointer
        if sample_id.endswith("1"):
            await saver.setup()
            await saver.conn.set_trace_callback(trace)
            config = {"configurable": {"thread_id": f"ctd:{sample_id}", "checkpoint_ns": "", "checkpoint_id": "1"}}
            outliving.append(asyncio.ensure_future(saver.aput_writes(config, [("note", "kept")], "task-1")))
            await asyncio.Future()  # still running when its sibling stops the run: the batch cancels it
        await asyncio.to_thread(in_transaction.wait)
        raise sqlite3.OperationalError("database or disk is full")

    real_batch = runner.batch.run_batch

    async def run_batch(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_batch(*args, **kwargs)
        finally:
            release.set()  # the scenes have stopped: the write goes on as the run turns to its checkpoints

    spec = ctd.write_script(tmp_path, ctd.accepting_script())
    out = tmp_path / "ds"
    args = ctd.cli_args(out, spec, paint_spec, "--review", "auto", "--concurrency", "2", n=N)
    try:
        with monkeypatch.context() as stopping:
            stopping.setattr(runner.ctd, "run_scene", run_scene)
            stopping.setattr(runner.batch, "run_batch", run_batch)
            assert main(args) == 1
    finally:
        release.set()  # never leave the connection's thread waiting, whatever failed
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("unveil generate: ")]
    assert len(errors) == 1 and "checkpoints.sqlite" in errors[0] and "disk is full" in errors[0], errors
    db = out / "checkpoints.sqlite"
    assert _write_lock_free(db), "the stopped run still holds the checkpoints' write lock"
    (write,) = outliving
    assert write.done() and write.exception() is None  # the write that was running finished, kept
    with contextlib.closing(sqlite3.connect(db)) as conn:
        kept = conn.execute("SELECT count(*) FROM writes WHERE thread_id = 'ctd:drugs-00001'").fetchone()
    assert kept == (1,)
    # The same command again in this process (the real scenes now): it completes, every id once.
    assert main(args) == 0
    assert sorted(r["id"] for r in _lines(out / "samples.jsonl")) == [f"drugs-{i:05d}" for i in range(N)]
