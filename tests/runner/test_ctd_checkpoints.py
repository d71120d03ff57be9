"""The scenes' checkpoint database as `unveil generate` opens it (`runner.ctd.scene_checkpoints`): a write that
finds the file locked by another connection waits for it (SQLite's busy timeout) instead of failing at once.
What happens when a run stops under a write is tested end to end in tests/graphs/test_ctd_disk_full.py."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

from runner.ctd import CHECKPOINT_BUSY_TIMEOUT_S, scene_checkpoints

CONFIG = {"configurable": {"thread_id": "ctd:drugs-00000", "checkpoint_ns": "", "checkpoint_id": "1"}}


async def test_a_write_waits_for_another_connections_lock_and_then_lands(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.sqlite"
    started = threading.Event()

    def trace(sql: str) -> None:  # on the connection's thread: the write's INSERT begins
        if sql.startswith("INSERT") and " INTO writes " in sql:
            started.set()

    async with scene_checkpoints(db) as saver:
        await saver.setup()
        async with saver.conn.execute("PRAGMA busy_timeout") as cur:
            assert await cur.fetchone() == (CHECKPOINT_BUSY_TIMEOUT_S * 1000,)
        await saver.conn.set_trace_callback(trace)
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process writing: the file's write lock is taken
            write = asyncio.ensure_future(saver.aput_writes(CONFIG, [("note", "kept")], "task-1"))
            await asyncio.to_thread(started.wait)
            other.execute("COMMIT")  # the lock is let go while the write waits for it
        await write
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT channel FROM writes").fetchall() == [("note",)]
