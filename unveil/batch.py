"""Resumable, concurrent JSONL batches shared by every `unveil` batch command.

Input lines are read one by one; a line that is not a JSON object, lacks an id or repeats one becomes a failed
record naming the line and field, and the others go on. Each result is appended to the output as one complete
line with a single `write` and an `fsync`, so a run killed with SIGKILL leaves at most one torn last line; the
next run cuts that torn tail off, skips every id already written and runs only the rest. Nothing is lost or
written twice. `--retry-failed` rewrites the output atomically without the failed records and runs them again.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from tqdm import tqdm

MAX_LINE_BYTES = 4 * 1024 * 1024


@dataclass
class BatchItem:
    """One input sample (or the error that stopped it from being one)."""

    id: str
    record: dict[str, Any] | None
    error: str | None = None


@dataclass
class BatchSummary:
    """What a batch run did."""

    total: int = 0
    skipped: int = 0
    completed: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)


def read_jsonl(path: str | os.PathLike[str], *, id_field: str = "id") -> Iterator[BatchItem]:
    """Samples of a JSONL file; bad lines and duplicate ids become error items named by line."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input {str(path)!r}: file not found")
    seen: set[str] = set()
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            fallback = f"line-{lineno}"
            if len(raw) > MAX_LINE_BYTES:
                yield BatchItem(fallback, None, f"{p.name} line {lineno}: line is over {MAX_LINE_BYTES} bytes")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield BatchItem(fallback, None, f"{p.name} line {lineno}: not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                yield BatchItem(fallback, None, f"{p.name} line {lineno}: not valid JSON ({exc.msg})")
                continue
            if not isinstance(record, dict):
                yield BatchItem(fallback, None, f"{p.name} line {lineno}: expected a JSON object, got {type(record).__name__}")
                continue
            rid = record.get(id_field, fallback)
            if isinstance(rid, bool) or not isinstance(rid, (str, int)):
                yield BatchItem(fallback, None, f"{p.name} line {lineno}: field {id_field!r} must be a string or integer")
                continue
            rid = str(rid)
            if rid in seen:
                yield BatchItem(f"{rid}#dup-line-{lineno}", None, f"{p.name} line {lineno}: duplicate {id_field} {rid!r}")
                continue
            seen.add(rid)
            yield BatchItem(rid, record)


def repair_tail(path: Path) -> None:
    """Cut a torn last line (left by a killed writer) so appends start on a clean line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def done_records(path: Path, *, id_field: str = "id") -> dict[str, dict[str, Any]]:
    """Records already in an output file, by id (a torn tail is ignored)."""
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and id_field in rec:
                out[str(rec[id_field])] = rec
    return out


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole file atomically (temp file + fsync + rename)."""
    from tools.image_store import remove_dead_temp_files

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temp_files(p.parent)  # left by a writer killed mid-write
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{os.getpid()}.{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def drop_failed(path: Path, *, id_field: str = "id") -> int:
    """Rewrite the output without failed records (atomically); returns how many were dropped."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for rec in done_records(path, id_field=id_field).values():
        if rec.get("status") == "failed":
            dropped += 1
        else:
            kept.append(json.dumps(rec, ensure_ascii=False) + "\n")
    atomic_write_text(path, "".join(kept))
    return dropped


class JsonlAppender:
    """Appends whole records, one `write` + `fsync` each, under an asyncio lock."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = asyncio.Lock()

    async def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line."""
        try:
            line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (undecodable input bytes): escape them rather than lose the record
            line = (json.dumps(record, ensure_ascii=True, default=str) + "\n").encode("ascii")
        async with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


Worker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed sample, with any credential in it redacted (the record is kept on disk)."""
    from tools.redact import redact_secrets

    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact_secrets(f"{type(exc).__name__}: {msg}")[:1000] if msg else type(exc).__name__


async def run_batch(
    items: list[BatchItem],
    worker: Worker,
    output: str | os.PathLike[str],
    *,
    concurrency: int = 4,
    id_field: str = "id",
    retry_failed: bool = False,
    desc: str = "samples",
    progress: bool = True,
    stop: Callable[[], str | None] | None = None,
) -> BatchSummary:
    """Run `worker(id, record)` over the items not yet in `output`, appending each result or failure.

    `stop`, if given, is asked before each sample; a non-empty answer (e.g. a spending cap reached) stops new
    samples from starting and is reported in the summary's failures as not run.
    """
    out = Path(output)
    if retry_failed:
        drop_failed(out, id_field=id_field)
    repair_tail(out)
    done = done_records(out, id_field=id_field)
    todo = [it for it in items if it.id not in done]
    summary = BatchSummary(total=len(items), skipped=len(items) - len(todo))
    appender = JsonlAppender(out)
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(total=len(todo), desc=desc, disable=not progress, file=sys.stderr, dynamic_ncols=True)
    stopped: list[str] = []

    async def one(item: BatchItem) -> None:
        async with sem:
            reason = stop() if stop else None
            if reason:
                stopped.append(item.id)
                return
            if item.error is not None:
                rec = {id_field: item.id, "status": "failed", "error": item.error}
            else:
                try:
                    result = await worker(item.id, item.record or {})
                    rec = {id_field: item.id, "status": "ok", **result}
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one bad sample must not stop the batch
                    rec = {id_field: item.id, "status": "failed", "error": describe_error(exc)}
                    raw = getattr(exc, "raw", None)
                    if raw:
                        from tools.redact import redact_secrets

                        rec["raw_answer"] = redact_secrets(str(raw)[:4000])
            await appender.append(rec)
            if rec["status"] == "failed":
                summary.failed += 1
                summary.failures.append({id_field: item.id, "error": rec["error"]})
            else:
                summary.completed += 1
            bar.update(1)

    try:
        await asyncio.gather(*(one(it) for it in todo))
    finally:
        bar.close()
        appender.close()
    if stopped:
        summary.failures.append({id_field: "*", "error": f"stopped before {len(stopped)} samples: {stop() if stop else ''}"})
    return summary
