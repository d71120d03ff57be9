"""Dynamic batching: image jobs from many concurrent coroutines become few large GPU batches.

An IPR evaluation or a GRPO step runs dozens of refinement graphs at once, each asking for one image at a
time. Rendering those one by one leaves the GPU mostly idle (a batch of 1 with CFG is a UNet batch of 2), so
every job goes to one worker thread per device. The worker takes the oldest waiting job, gathers the jobs with
the same compatibility key (same pipeline, size, steps, guidance, safety settings) that arrive within a bounded
wait, up to a maximum batch, renders them in one call and routes each result back to its caller's future.
While the GPU is busy new jobs pile up, so under load batches fill without waiting at all.

A compiled UNet renders only its bucket sizes (`tools/t2i/fast.py: FastPath.padded_batch`): a batch of 20 with
buckets 8 and 32 costs 32 rows. A job may therefore carry the `sizes` its runner renders without padding; the
worker then takes the largest of them that the waiting jobs fill (20 waiting: a batch of 8, the other 12 wait for
the next batch, which the jobs arriving meanwhile fill further), and pads only below the smallest. Jobs rarely wait
longer for it: the GPU is busy with the batch taken, and the rest go first in the next one.

The worker is a plain thread fed by a `queue.Queue`, so it serves any number of event loops (tests, CLI runs,
training loops each with their own `asyncio.run`). Only one batch runs per device at a time, which also keeps
pipeline objects (schedulers hold per-call state) away from concurrent use.

At exit every worker is stopped (`Batcher.close`): the batch it is rendering finishes and the jobs still waiting
are cancelled. A run that ends on an error while a batch renders (a full disk refusing the previous image) left the
daemon thread inside torch as the interpreter shut down, and the process aborted (exit 134) after its own clear
error.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_WAIT_S = 0.02
CLOSE_AT_EXIT_S = 600.0  # how long exit waits for a batch still rendering (a hung device must not hang the exit)


@dataclass
class Job:
    """One unit of work (one image); `runner` renders a list of compatible jobs, one result per job."""

    key: Hashable
    payload: Any
    runner: Callable[[list[Job]], Sequence[Any]]
    max_batch: int = DEFAULT_MAX_BATCH
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    sizes: tuple[int, ...] = ()
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    enqueued: float = field(default_factory=time.monotonic)


@dataclass
class BatchStats:
    """Counters for benchmarks and logs: how many batches ran and how large they were."""

    batches: int = 0
    jobs: int = 0
    sizes: list[int] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        """Average jobs per batch (0 when nothing ran)."""
        return self.jobs / self.batches if self.batches else 0.0


class Batcher:
    """A worker thread that renders compatible jobs together (see the module docstring)."""

    def __init__(self, name: str = "default"):
        self.name = name
        self.stats = BatchStats()
        self._queue: queue.Queue[Job | None] = queue.Queue()  # None: stop (see `close`)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, jobs: Sequence[Job]) -> list[concurrent.futures.Future[Any]]:
        """Queue jobs and return their futures (thread-safe; no event loop needed)."""
        self._ensure_thread()
        for job in jobs:
            self._queue.put(job)
        return [job.future for job in jobs]

    async def run(
        self,
        key: Hashable,
        payloads: Sequence[Any],
        runner: Callable[[list[Job]], Sequence[Any]],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        sizes: tuple[int, ...] = (),
    ) -> list[Any]:
        """Render `payloads` (possibly batched with other callers' jobs) and return results in order; `sizes`, when
        given, are the batch sizes the runner renders without padding (see the module docstring)."""
        jobs = [Job(key, p, runner, max_batch=max_batch, max_wait_s=max_wait_s, sizes=sizes) for p in payloads]
        futures = self.submit(jobs)
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    # -- worker side -------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker thread and wait for it: the batch it is rendering finishes, the jobs still waiting are
        cancelled (their callers see `CancelledError`). Called for every batcher at exit, so no thread is inside
        torch while the interpreter shuts down (that aborted the process); meant for the end of a process or a
        test, when nothing submits any more. `timeout` bounds the wait for the batch (None: no bound)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None or not thread.is_alive():
                return
            self._queue.put(None)
        thread.join(timeout)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=f"t2i-batcher-{self.name}", daemon=True)
                self._thread.start()
                _RUNNING.add(self)

    def _loop(self) -> None:
        pending: deque[Job] = deque()
        while True:
            if not pending:
                first = self._queue.get()
                if first is None:
                    return
                pending.append(first)
            head = pending[0]
            deadline = head.enqueued + head.max_wait_s
            while True:
                if sum(1 for j in pending if j.key == head.key) >= head.max_batch:
                    break
                timeout = deadline - time.monotonic()
                try:
                    # Past the deadline, still take whatever is already queued (non-blocking).
                    job = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:  # closing: what waits is cancelled, never started
                    for waiting in pending:
                        waiting.future.cancel()
                    return
                pending.append(job)
            take = batch_take(sum(1 for j in pending if j.key == head.key), head.max_batch, head.sizes)
            batch: list[Job] = []
            rest: deque[Job] = deque()
            for job in pending:
                if job.key == head.key and len(batch) < take:
                    batch.append(job)
                else:
                    rest.append(job)
            pending = rest
            # Jobs whose caller was cancelled are dropped here rather than rendered.
            batch = [j for j in batch if j.future.set_running_or_notify_cancel()]
            if batch:
                self._run_batch(batch)

    def _run_batch(self, batch: list[Job]) -> None:
        try:
            results = list(batch[0].runner(batch))
            if len(results) != len(batch):
                raise RuntimeError(f"batch runner returned {len(results)} results for {len(batch)} jobs")
        except BaseException as exc:  # noqa: BLE001 - every caller must hear about the failure
            for job in batch:
                job.future.set_exception(exc)
            return
        self.stats.batches += 1
        self.stats.jobs += len(batch)
        self.stats.sizes.append(len(batch))
        for job, result in zip(batch, results, strict=False):
            job.future.set_result(result)


def batch_take(waiting: int, max_batch: int, sizes: tuple[int, ...] = ()) -> int:
    """How many of `waiting` compatible jobs the next batch takes: up to `max_batch`; with `sizes` (the batch
    sizes rendered without padding), the largest of them that the jobs fill, or all of them (padded) when they
    fill none."""
    n = min(waiting, max_batch)
    return max((s for s in sizes if s <= n), default=n)


_RUNNING: weakref.WeakSet[Batcher] = weakref.WeakSet()  # batchers whose thread was started


@atexit.register
def _close_all() -> None:
    """Stop every worker before the interpreter shuts down (see the module docstring)."""
    for batcher in list(_RUNNING):
        batcher.close(timeout=CLOSE_AT_EXIT_S)


_BATCHERS: dict[str, Batcher] = {}
_BATCHERS_LOCK = threading.Lock()


def get_batcher(device: str) -> Batcher:
    """The process-wide batcher of one device (e.g. `cuda:0`, `cpu`), created on first use."""
    with _BATCHERS_LOCK:
        if device not in _BATCHERS:
            _BATCHERS[device] = Batcher(device)
        return _BATCHERS[device]
