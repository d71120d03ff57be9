"""A persistent response cache for structured model calls.

The key is a SHA-256 over the model spec (provider, model, base URL — never an API key), the messages, the
output schema, the call parameters and, for a role sampled more than once from the same messages, the sample's seed
(so every scene, blind judge, round or IPR step is its own entry), so a rerun of a finished run costs nothing and can
be replayed offline exactly. Entries are written in one SQLite transaction each (WAL mode), so a killed run leaves no
torn entry.

The cache is an optimisation, never a reason to fail: when it cannot be opened, read or written (a locked
database, a corrupt entry, a file that is not a database, an unwritable folder) it warns once, naming the file, and
the call goes on without it; an answer that was paid for is returned even if it cannot be stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from tools.env import env_str

log = logging.getLogger("unveil.cache")
# How long a call waits for another process's lock; after the first such wait the cache is off for the rest of the
# run (each later call would wait as long again, one after the other: the lock serialises them).
LOCK_TIMEOUT_S = 2.0


def cache_off(value: str) -> bool:
    """Whether a cache setting (`$UNVEIL_CACHE`, `--cache`) that is otherwise a file path turns the cache off."""
    return value.strip().lower() in ("off", "0", "none", "false")


def default_cache_path() -> Path | None:
    """`$UNVEIL_CACHE` (a file path, or `off`), else `~/.cache/unveil/responses.sqlite`."""
    env = env_str("UNVEIL_CACHE")
    if env and cache_off(env):
        return None
    return Path(env) if env else Path.home() / ".cache" / "unveil" / "responses.sqlite"


def cache_key(
    *, spec: str, messages: list[dict[str, object]], schema: dict[str, object], params: dict[str, object]
) -> str:
    """A stable key for a call."""
    blob = json.dumps(
        {"spec": spec, "messages": messages, "schema": schema, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def sample_seed(*parts: object) -> int:
    """A 31-bit seed derived from `parts` (a scene's seed and a judge's id, ...), the same on every machine and
    rerun: it tells apart samples of one role that would otherwise send the same request (see `Gateway.structured`)."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class ResponseCache:
    """A key -> JSON value table in SQLite, safe to share between threads of one process; never raises on I/O."""

    def __init__(self, path: str | os.PathLike[str]):
        # Opening creates a folder and a database file: that is blocking I/O, which an ASGI server such as
        # `langgraph dev` refuses on its event loop. The gateway is built inside graph nodes, so the database
        # is opened lazily on first use, and `get`/`put` are called through `asyncio.to_thread`.
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.disabled = False  # set once the database cannot be opened: later calls skip it silently
        self._warned: set[str] = set()

    def _warn(self, what: str, exc: BaseException) -> None:
        # Once per kind of trouble, so a batch of thousands does not print thousands of lines.
        if what not in self._warned:
            self._warned.add(what)
            log.warning(
                "response cache %s (UNVEIL_CACHE / --cache): %s (%s: %s); going on without it",
                self.path,
                what,
                type(exc).__name__,
                exc,
            )

    def _locked(self, exc: BaseException, what: str) -> bool:
        """Whether `exc` is a lock timeout; if so the cache is off for the rest of the run, with one warning."""
        if not (isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()):
            return False
        self.disabled = True
        self._warn(
            f"cannot be {what}: locked by another process for over {LOCK_TIMEOUT_S:g} s, so it is skipped "
            "for the rest of this run",
            exc,
        )
        return True

    def _db(self) -> sqlite3.Connection | None:
        # Called with the lock held.
        if self.disabled:
            return None
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=LOCK_TIMEOUT_S)
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                except sqlite3.Error:
                    conn.close()
                    raise
            except (sqlite3.Error, OSError) as exc:
                if not self._locked(exc, "opened"):
                    self.disabled = True
                    self._warn("cannot be opened", exc)
                return None
            self._conn = conn
        return self._conn

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached value, or None (also when the cache cannot be read or the entry is corrupt)."""
        with self._lock:
            db = self._db()
            if db is None:
                return None
            try:
                row = db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                if not self._locked(exc, "read"):
                    self._warn("cannot be read", exc)
                return None
        if not row:
            return None
        try:
            value = json.loads(row[0])
            if not isinstance(value, dict):
                raise ValueError(f"entry is a {type(value).__name__}, not an object")
        except (ValueError, TypeError, RecursionError) as exc:
            # A corrupt entry is a miss: the fresh answer overwrites it.
            self._warn("holds a corrupt entry", exc)
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> bool:
        """Store a value (last write wins); False when the cache cannot be written (warned once)."""
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock:
            db = self._db()
            if db is None:
                return False
            try:
                db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, blob))
            except sqlite3.Error as exc:
                if not self._locked(exc, "written"):
                    self._warn("cannot be written", exc)
                return False
        return True

    def __len__(self) -> int:
        with self._lock:
            db = self._db()
            return int(db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]) if db is not None else 0

    def close(self) -> None:
        """Close the database (if it was opened)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
