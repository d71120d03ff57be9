"""A persistent response cache for structured model calls.

The key is a SHA-256 over the model spec (provider, model, base URL — never an API key), the messages, the
output schema and the call parameters, so a rerun of a finished run costs nothing and can be replayed offline
exactly. Entries are written in one SQLite transaction each (WAL mode), so a killed run leaves no torn entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any


def default_cache_path() -> Path | None:
    """`$UNVEIL_CACHE` (a file path, or `off`), else `~/.cache/unveil/responses.sqlite`."""
    env = os.environ.get("UNVEIL_CACHE")
    if env and env.lower() in ("off", "0", "none", "false"):
        return None
    return Path(env) if env else Path.home() / ".cache" / "unveil" / "responses.sqlite"


def cache_key(*, spec: str, messages: list[dict[str, Any]], schema: dict[str, Any], params: dict[str, Any]) -> str:
    """A stable key for a call."""
    blob = json.dumps(
        {"spec": spec, "messages": messages, "schema": schema, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """A key -> JSON value table in SQLite, safe to share between threads of one process."""

    def __init__(self, path: str | os.PathLike[str]):
        # Opening creates a folder and a database file: that is blocking I/O, which an ASGI server such as
        # `langgraph dev` refuses on its event loop. The gateway is built inside graph nodes, so the database
        # is opened lazily on first use, and `get`/`put` are called through `asyncio.to_thread`.
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        # Called with the lock held.
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._conn = conn
        return self._conn

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached value, or None."""
        with self._lock:
            row = self._db().execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store a value (last write wins)."""
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock:
            self._db().execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, blob))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the database (if it was opened)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
