"""Helpers of the SIGKILL tests (`test_kill_*.py`); this module holds no tests.

What the kill tests check, and the words they use:

- equal output: after any number of SIGKILLs and one final rerun, the output has the same ids as an
  uninterrupted run, each exactly once, and each record has the same content hash once the fields that
  legitimately differ between runs are removed (`VOLATILE`: usage and cost, which count the calls a resumed
  run made again or served from checkpoints, and anything timing-related);
- no partial record: every output line is a complete JSON object ending in a newline;
- no orphan image: every PNG in the image store is referenced by the final output (by its content hash, the
  file name) -- an image made by a sample that was in flight when the run was killed is not an orphan if the
  rerun produced the very same image, because the store is content-addressed and the rerun reuses the file;
  a store file that no record references (a half-written image under a valid name, an image of a sample
  whose final result differs) is an orphan;
- no temp file: nothing named `*.tmp` (the image store's and `atomic_write_text`'s temp files) remains
  anywhere under the run's folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VOLATILE = ("usage", "cost_usd")
VOLATILE_PARTS = ("time", "elapsed", "duration", "wall", "latency")


def strip_volatile(value: Any) -> Any:
    """A record without the fields that may differ between an interrupted and an uninterrupted run."""
    if isinstance(value, dict):
        return {
            k: strip_volatile(v)
            for k, v in value.items()
            if k not in VOLATILE and not any(p in k.lower() for p in VOLATILE_PARTS)
        }
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    return value


def content_hash(record: dict[str, Any], roots: dict[str, str] | None = None) -> str:
    """SHA-256 of a record's comparable content; `roots` maps run-specific folders (an image store's root) to a
    placeholder, so paths of the same content-addressed image compare equal across two runs."""
    text = json.dumps(strip_volatile(record), sort_keys=True)
    for root, name in (roots or {}).items():
        text = text.replace(root, name)
    return hashlib.sha256(text.encode()).hexdigest()


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL output, checking that each is one complete JSON object (no partial record)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: torn last line"
    records = []
    for n, line in enumerate(data.splitlines(), 1):
        rec = json.loads(line)
        assert isinstance(rec, dict) and "id" in rec, f"{path} line {n}: not a record"
        records.append(rec)
    return records


def hashes_by_id(records: list[dict[str, Any]], roots: dict[str, str] | None = None) -> dict[str, str]:
    """id -> content hash, asserting each id appears once."""
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), f"duplicated ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    return {r["id"]: content_hash(r, roots) for r in records}


def temp_files(*roots: Path) -> list[Path]:
    """Temp files left under the given folders."""
    return [p for root in roots if root.exists() for p in root.rglob("*.tmp")]


def store_ids(store: Path) -> set[str]:
    """Content hashes of the PNG files in an image store."""
    return {p.stem for p in store.rglob("*.png")} if store.exists() else set()


def referenced_ids(records: Iterable[dict[str, Any]]) -> set[str]:
    """Every 64-hex string in the records (image ids appear under several field names)."""
    import re

    pattern = re.compile(r"\b[0-9a-f]{64}\b")
    return {m for r in records for m in pattern.findall(json.dumps(r))}


def line_count(path: Path) -> int:
    """Complete lines of a file (0 while it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_for_lines(proc: subprocess.Popen[Any], output: Path, count: int, timeout: float, poll: float = 0.01) -> int:
    """Poll until `output` holds `count` complete lines, `proc` has ended or `timeout` seconds have passed (the
    moment a kill test kills at); the lines written by then."""
    deadline = time.monotonic() + timeout
    while (lines := line_count(output)) < count and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(poll)
    return lines


def kill_at_random_points(
    cmd: list[str], env: dict[str, str], output: Path, seeds: Iterable[int], *, total: int, timeout: float = 90.0
) -> list[int]:
    """Run `cmd` once per seed and SIGKILL it at a random point: after a random number of output records
    (0 .. total-3) plus a random extra delay (0-0.25 s), or a random time after start. Returns the records seen at
    each kill."""
    seen = []
    for seed in seeds:
        rng = random.Random(seed)
        target = rng.randrange(0, max(1, total - 2))
        extra = rng.uniform(0.0, 0.25)
        proc = subprocess.Popen(
            [sys.executable, "-m", "unveil.cli", *cmd],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_lines(proc, output, target, timeout)
            time.sleep(extra)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        seen.append(line_count(output))
    return seen
