"""Resumable, concurrent JSONL batches shared by every `unveil` batch command: the runner.

Each result is appended to the output as one complete line with a single `write` and an `fsync`
(`tools.jsonl_files.JsonlAppender`), so a run killed with SIGKILL leaves at most one torn last line; the next run
cuts that torn tail off, skips every id already written and runs only the rest. Nothing is lost or written twice.
`--retry-failed` rewrites the output atomically without the failed records and runs them again.

The runner's parts, one job each:
- `runner.batch_input`: the input read into samples (bad lines and repeated ids become failed records named by
  line; generated ids never collide with the input's);
- `runner.output_identity`: what an output is (a result file of this command, never the input itself) and the
  settings recorded beside it (a rerun with other settings is refused before anything runs, unless it asks to
  mix them);
- `tools.atomic_files`: whole writes (a short write, such as a full disk, is cut back to the last whole record
  and raised as `BatchWriteError`), atomic rewrites, and the locks: one process writes an output at a time (a
  second run on the same file under any name is refused, `OutputBusyError`), and readers that rewrite a file
  (review decisions) wait for the writer's short per-record lock;
- `tools.jsonl_files`: the lines themselves (split on `\n` only, a line over the size cap skipped without being
  read whole), appends and the records already written.

docs/reliability.md lists the tests that hold each promise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agents.limits import SpendingCapReached
from runner.batch_input import BatchItem
from runner.output_identity import (
    OutputIdentity,
    check_identity,
    check_output,
    record_identity,
    refuse_input_as_output,
)
from runner.spending import Spending, held_to_caps
from tools.atomic_files import atomic_write_text, exclusive_output, write_lock
from tools.errors import ConfigurationError
from tools.jsonl_files import (
    MAX_LINE_BYTES,
    JsonlAppender,
    done_records,
    iter_lines,
    order_lines,
    parse_json_line,
    record_line,
    repair_tail,
)
from tools.safe_files import StorageError

Worker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class BatchSummary:
    """What a batch run did. `failed_earlier` counts the skipped samples whose record in the output is a failure
    of an earlier run: they are still failures of the output (`failures` lists them too). `not_run` are the
    samples a `stop` (a spending cap) kept from starting, and `stopped` says why: they have no record and are not
    failures, but the output is incomplete until a rerun runs them."""

    total: int = 0
    skipped: int = 0
    completed: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    failed_earlier: int = 0
    not_run: list[str] = field(default_factory=list)
    stopped: str = ""

    @property
    def failed_in_output(self) -> int:
        """Failed records of this batch's samples in the output: this run's and earlier runs'."""
        return self.failed + self.failed_earlier


@dataclass(frozen=True)
class BatchRun:
    """How one batch runs: what `run_batch` takes, and what it hands its steps.

    `output` is the JSONL file the records are appended to (a path given as a string is taken as one); `concurrency`
    samples run at once; `id_field` names each record's id; `retry_failed` drops the output's failed records and
    runs them again; `desc` and `progress` are the progress bar's. `stop`, if given, is asked before each sample; a
    non-empty answer (e.g. a spending cap reached) stops new samples from starting: the summary lists them as
    `not_run` (not failures) with the answer as `stopped`. `kind` names the command: an existing output must be a
    result file of the same kind (records carry it), and `inputs` may not be the output. `identity` (what makes the
    output) is checked against the one recorded beside an existing output and written beside a new one
    (`check_identity`); every refusal comes before anything is written or run. `spending` (the command's caps,
    `runner.spending`) counts the output's earlier records and each new one, and stops new samples from starting
    once a cap is reached, as `stop` does. `keep_input` names the input fields a failed record keeps (null where the
    sample had none), so a failure still shows what was run. `input_order` puts the output's records in the input's
    order once the run ends (`tools.jsonl_files.order_lines`: concurrent samples are appended as they finish)."""

    output: Path
    concurrency: int = 4
    id_field: str = "id"
    retry_failed: bool = False
    desc: str = "samples"
    progress: bool = True
    stop: Callable[[], str | None] | None = None
    kind: str | None = None
    inputs: tuple[str | os.PathLike[str], ...] = ()
    identity: OutputIdentity | None = None
    keep_input: tuple[str, ...] = ()
    spending: Spending | None = None
    input_order: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", Path(self.output))  # frozen: set once, here

    def stop_reason(self) -> str | None:
        """Why no new sample may start: `stop`'s answer, else a spending cap reached, else None."""
        return (self.stop() if self.stop else None) or (self.spending.stop() if self.spending else None)

    @property
    def output_kind(self) -> str | None:
        """The command whose result file the output must be: `kind`, else the identity's."""
        return self.kind or (self.identity.kind if self.identity else None)


def drop_failed(path: Path, *, id_field: str = "id") -> int:
    """Rewrite the output without failed records (atomically); returns how many were dropped."""
    if not path.exists():
        return 0
    with write_lock(path):
        kept, dropped = [], 0
        for rec in done_records(path, id_field=id_field).values():
            if rec.get("status") == "failed":
                dropped += 1
            else:
                kept.append(json.dumps(rec, ensure_ascii=True) + "\n")
        if dropped:  # no rewrite when nothing failed: a rewrite races with anyone appending to the file
            atomic_write_text(path, "".join(kept))
    return dropped


CONFIGURATION_FAILURE = "configuration"  # a failed record's `error_kind` when its settings could not work


def forget_configuration_failures(path: Path, *, id_field: str = "id", kind: str | None = None) -> int:
    """Empty an output whose records all failed on a configuration error (`tools.errors.ConfigurationError`):
    they hold no result, and keeping them would pin the output to the settings that could not work, so the rerun
    with the fix would be refused as a settings change and would skip every sample. Returns how many were
    dropped; an output with any other record (or any line that is not such a record) is left alone."""
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with write_lock(path):
        count = 0
        # Line by line with the readers' cap (a 3 GiB line read whole was a MemoryError): a line over it is no
        # such record, and ends the look like any other.
        for _lineno, line in iter_lines(path):
            if line is None:
                return 0
            try:
                rec = parse_json_line(line)
            except ValueError:
                return 0
            if not _configuration_failure(rec, id_field, kind):
                return 0  # the first other record ends the look: an output of results keeps its settings
            count += 1
        atomic_write_text(path, "")
    return count


def _configuration_failure(rec: object, id_field: str, kind: str | None) -> bool:
    return (
        isinstance(rec, dict)
        and id_field in rec
        and rec.get("status") == "failed"
        and rec.get("error_kind") == CONFIGURATION_FAILURE
        and (kind is None or rec.get("kind", kind) == kind)
    )


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed sample, with any credential in it redacted (the record is kept on disk)."""
    from tools.redact import redact_secrets

    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact_secrets(f"{type(exc).__name__}: {msg}")[:1000] if msg else type(exc).__name__


async def run_batch(items: list[BatchItem], worker: Worker, run: BatchRun) -> BatchSummary:
    """Run `worker(id, record)` over the items not yet in `run.output`, appending each result or failure, as `run`
    says (`BatchRun` documents each setting). The output is locked for the run: a second process on it gets
    `OutputBusyError`."""
    refuse_input_as_output(run.output, run.inputs)
    with exclusive_output(run.output):
        return await _run_locked(items, worker, run)


async def _run_locked(items: list[BatchItem], worker: Worker, run: BatchRun) -> BatchSummary:
    """The run, with the output's run lock held: check and prepare the output, count what earlier runs did, run
    the rest, and report the samples a `stop` kept from starting."""
    done = _prepare_output(run)
    if run.spending is not None:
        run.spending.add_earlier(str(run.output), done.items())
    todo = [it for it in items if it.id not in done]
    summary = _earlier_results(items, len(todo), done, run.id_field)
    with held_to_caps(run.spending):
        stopped = await _run_samples(todo, worker, run, summary)
    if run.input_order and len(todo) > len(stopped):  # something was written: in the input's order, as it was read
        order_lines(run.output, [it.id for it in items], id_field=run.id_field)
    # Failures are listed in the input's order, not in the order concurrent samples happened to finish.
    order = {it.id: i for i, it in enumerate(items)}
    summary.failures.sort(key=lambda f: order.get(str(f.get(run.id_field)), len(order)))
    if stopped:
        summary.not_run = sorted(stopped, key=lambda sid: order.get(sid, len(order)))
        summary.stopped = run.stop_reason() or "stopped"
    return summary


def _prepare_output(run: BatchRun) -> dict[str, dict[str, Any]]:
    """Refuse an output this run may not add to (other settings, another command's file, the input), record the
    settings beside it, drop failed records when retrying them, cut a torn tail; returns the records by id."""
    out, id_field = run.output, run.id_field
    forget_configuration_failures(out, id_field=id_field, kind=run.output_kind)
    pending = check_identity(out, run.identity) if run.identity is not None else None
    check_output(out, id_field=id_field, kind=run.output_kind, inputs=run.inputs)
    if pending is not None:
        record_identity(out, pending)
    if run.retry_failed:
        drop_failed(out, id_field=id_field)
    repair_tail(out)
    return done_records(out, id_field=id_field)


def _earlier_results(items: list[BatchItem], todo: int, done: dict[str, dict[str, Any]], id_field: str) -> BatchSummary:
    """The summary before anything runs: the samples skipped, and those of them whose record is a failure."""
    summary = BatchSummary(total=len(items), skipped=len(items) - todo)
    for it in items:
        rec = done.get(it.id)
        if rec is not None and rec.get("status") == "failed":
            # still a failure of this output: the exit code and the summary must say so on every rerun
            summary.failed_earlier += 1
            summary.failures.append({id_field: it.id, "error": f"(an earlier run) {rec.get('error', '')}"})
    return summary


async def _run_samples(todo: list[BatchItem], worker: Worker, run: BatchRun, summary: BatchSummary) -> list[str]:
    """Run the samples `run.concurrency` at a time, appending each record as it comes and counting it in
    `summary`; returns the ids of the samples a `stop` kept from starting."""
    appender = JsonlAppender(run.output)
    sem = asyncio.Semaphore(max(1, run.concurrency))
    bar = tqdm(total=len(todo), desc=run.desc, disable=not run.progress, file=sys.stderr, dynamic_ncols=True)
    stopped: list[str] = []

    async def one(item: BatchItem) -> None:
        async with sem:
            reason = run.stop_reason()
            if reason:
                stopped.append(item.id)
                return
            result = await _result_record(item, worker, run)
            if result is None:  # a spending cap stopped one of its calls: no record, like a sample not started
                stopped.append(item.id)
                return
            rec = _within_the_cap(result, run)
            await appender.append(rec)
            if run.spending is not None:
                run.spending.add(rec, output=str(run.output), sample_id=item.id)
            if rec["status"] == "failed":
                summary.failed += 1
                summary.failures.append({run.id_field: item.id, "error": rec["error"]})
            else:
                summary.completed += 1
            bar.update(1)

    tasks = [asyncio.ensure_future(one(it)) for it in todo]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # A record that cannot be written (disk full) ends the run loudly; samples still running are cancelled so
        # nothing is paid for that could not be kept. Everything written before stays, whole.
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        bar.close()
        appender.close()
    return stopped


def _within_the_cap(rec: dict[str, Any], run: BatchRun) -> dict[str, Any]:
    """`rec`, or a failed record in its place when its line would be over `MAX_LINE_BYTES`: every reader (a resume,
    `unveil review`, the web app) skips such a line and would read an earlier record of the id, so readers would
    disagree and a reviewer would decide on a stale copy; one cap, applied where records are written."""
    size = len(record_line(rec))
    if size <= MAX_LINE_BYTES:
        return rec
    tag = {"kind": run.kind} if run.kind else {}
    return {
        run.id_field: rec[run.id_field],
        "status": "failed",
        **tag,
        "error": f"its record is {size:,} bytes, over the {MAX_LINE_BYTES:,}-byte line cap every reader uses; "
        "not written",
    }


async def _result_record(item: BatchItem, worker: Worker, run: BatchRun) -> dict[str, Any] | None:
    """The record one sample gets: `{ID_FIELD, status: "ok", kind?, **result}`, or `{ID_FIELD, status: "failed",
    kind?, error, raw_answer?}` for a bad input line or a sample whose worker raised; None when a spending cap
    refused one of its model calls (the sample is not run, not failed)."""
    id_field = run.id_field
    tag = {"kind": run.kind} if run.kind else {}
    kept = {k: (item.record or {}).get(k) for k in run.keep_input}
    if item.error is not None:
        return {id_field: item.id, "status": "failed", **tag, **kept, "error": item.error}
    try:
        result = await worker(item.id, item.record or {})
        return {id_field: item.id, "status": "ok", **tag, **result}
    except (asyncio.CancelledError, StorageError):
        raise  # a run's store that cannot be written fails every later sample too: stop, naming it
    except SpendingCapReached:
        return None
    except Exception as exc:  # noqa: BLE001 - one bad sample must not stop the batch
        rec = {id_field: item.id, "status": "failed", **tag, **kept, "error": describe_error(exc)}
        if isinstance(exc, ConfigurationError):
            rec["error_kind"] = CONFIGURATION_FAILURE
        raw = getattr(exc, "raw", None)
        if raw:
            from tools.redact import redact_secrets

            rec["raw_answer"] = redact_secrets(str(raw)[:4000])
        return rec
