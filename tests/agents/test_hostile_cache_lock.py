"""A response cache locked by another process costs one lock wait per run, not one per call: after the first
timeout the cache is skipped for the rest of the run, with one warning naming the file (the cache is ON, as users
get it by default)."""

from __future__ import annotations

import logging
import sqlite3
import time

import pytest
from pydantic import BaseModel

import agents.cache
from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings

WAIT_S = 0.4


class Verdict(BaseModel):
    toxic: bool
    reason: str = ""


async def _ask(gw: Gateway, spec: str, text: str) -> Verdict:
    result = await gw.structured(
        role="judge", spec=spec, schema=Verdict, messages=build_messages("You judge pairs.", {"text": text})
    )
    return result.value


@pytest.mark.parametrize("lock", ["EXCLUSIVE", "IMMEDIATE"])
async def test_a_locked_cache_is_waited_for_once_per_run(
    tmp_path, write_script, caplog, monkeypatch, lock: str
) -> None:
    monkeypatch.setattr(agents.cache, "LOCK_TIMEOUT_S", WAIT_S)
    path = tmp_path / "responses.sqlite"
    n = 6
    spec = write_script({"judge": [{"toxic": True, "reason": f"r{i}"} for i in range(n + 1)]})
    gw = Gateway(GatewaySettings(cache_path=str(path)))
    await _ask(gw, spec, "warm up")  # the database exists and is open
    other = sqlite3.connect(path, isolation_level=None)
    other.execute(f"BEGIN {lock}")  # another process holds the lock for the whole run
    try:
        with caplog.at_level(logging.WARNING, logger="unveil.cache"):
            start = time.monotonic()
            answers = [await _ask(gw, spec, f"call {i}") for i in range(n)]
            elapsed = time.monotonic() - start
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [a.reason for a in answers] == [f"r{i}" for i in range(1, n + 1)]  # every answer kept
    # One wait (read or write), not one per call: n calls would take n * WAIT_S before.
    assert elapsed < 2.5 * WAIT_S, elapsed
    warnings = [r.getMessage() for r in caplog.records if r.name == "unveil.cache"]
    assert len(warnings) == 1 and str(path) in warnings[0] and "rest of this run" in warnings[0], warnings
