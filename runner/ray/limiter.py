"""The cluster-wide model API limits: one named limiter actor, and the driver's handle that keeps slots briefly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import ray

from runner.ray.pool import awaited
from runner.ray.settings import LEASE_S, LIMITER_NAME, NAMESPACE, WAIT_NOTICE_S

log = logging.getLogger(__name__)


@dataclass
class _Backend:
    in_use: int = 0
    leases: dict[str, tuple[float, str]] = field(default_factory=dict)  # lease id -> (monotonic expiry, job id)
    tokens: float = 1.0
    updated: float = field(default_factory=time.monotonic)


class LimiterActor:
    """The cluster-wide semaphore and token bucket per model backend (one detached named actor per cluster).

    Each request passes its own process's limits: with the same `UNVEIL_MAX_CONCURRENCY` / `UNVEIL_RPM` on every
    driver (the normal case) the cluster as a whole holds them. A slot is a lease held by a Ray job: the slots of
    a job that ended (its driver was killed before releasing them) come back as soon as a request waits for one,
    and any slot comes back after `lease_s`.
    """

    JOB_CHECK_S = 1.0  # how often a waiting request asks Ray which jobs ended

    def __init__(self, lease_s: float = LEASE_S):
        self.lease_s = lease_s
        self.backends: dict[str, _Backend] = {}
        self.changed = asyncio.Condition()
        self.rate_lock = asyncio.Lock()
        self.jobs_checked = 0.0

    def _expire(self, state: _Backend, ended: frozenset[str] = frozenset()) -> None:
        now = time.monotonic()
        for lease, (until, job) in list(state.leases.items()):
            if until < now or job in ended:
                del state.leases[lease]
                state.in_use -= 1

    async def _ended_jobs(self) -> frozenset[str]:
        """Jobs that ended (their drivers exited or were killed), asked of Ray at most every `JOB_CHECK_S`."""
        now = time.monotonic()
        if now - self.jobs_checked < self.JOB_CHECK_S:
            return frozenset()
        self.jobs_checked = now
        from ray._private.state import jobs

        try:
            table = await asyncio.to_thread(jobs)
        except Exception:  # noqa: BLE001 - the leases' own term still applies
            return frozenset()
        return frozenset(str(j.get("JobID")) for j in table if j.get("IsDead"))

    async def token(self, backend: str, rpm: float) -> None:
        """Wait for a rate token of `backend` (for a request that already holds a slot)."""
        await self._token(self.backends.setdefault(backend, _Backend()), rpm)

    async def acquire(self, backend: str, max_concurrency: int, rpm: float | None, job: str = "") -> str:
        """Wait for a rate token (when `rpm`) and a free slot for Ray job `job`; returns the lease id to release."""
        state = self.backends.setdefault(backend, _Backend())
        await self._token(state, rpm)
        return await self._slot(state, max_concurrency, job)

    async def _token(self, state: _Backend, rpm: float | None) -> None:
        if rpm:
            rate = rpm / 60.0
            async with self.rate_lock:  # first come, first served: tokens go out in arrival order
                while True:
                    now = time.monotonic()
                    state.tokens = min(1.0, state.tokens + (now - state.updated) * rate)
                    state.updated = now
                    if state.tokens >= 1:
                        state.tokens -= 1
                        break
                    await asyncio.sleep((1 - state.tokens) / rate)

    async def _slot(self, state: _Backend, max_concurrency: int, job: str) -> str:
        async with self.changed:
            while True:
                self._expire(state)
                if state.in_use < max(1, max_concurrency):
                    break
                self._expire(state, await self._ended_jobs())
                if state.in_use < max(1, max_concurrency):
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), timeout=1.0)  # wakes to expire stale leases
            state.in_use += 1
            lease = uuid.uuid4().hex
            state.leases[lease] = (time.monotonic() + self.lease_s, job)
        return lease

    async def release(self, backend: str, lease: str) -> None:
        """Give a slot back (a lease already expired is ignored)."""
        state = self.backends.get(backend)
        async with self.changed:
            if state is not None and state.leases.pop(lease, None) is not None:
                state.in_use -= 1
            self.changed.notify_all()

    def in_use(self) -> dict[str, int]:
        """Slots held now, per backend."""
        return {name: state.in_use for name, state in self.backends.items()}

    def holders(self, backend: str) -> dict[str, int]:
        """Slots of `backend` held now, per Ray job."""
        state = self.backends.get(backend) or _Backend()
        held: dict[str, int] = {}
        for _until, job in state.leases.values():
            held[job or "?"] = held.get(job or "?", 0) + 1
        return held


LIMITER_ACTOR = ray.remote(LimiterActor)


def limiter_actor(lease_s: float = LEASE_S) -> Any:
    """The cluster's limiter (created by the first driver that asks, then found by name)."""
    return LIMITER_ACTOR.options(
        name=LIMITER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=100_000,
        max_restarts=-1,
    ).remote(lease_s)


class RayLimiter:
    """The driver's handle on the cluster-wide limiter (installed into `agents.limits`).

    A slot given back is kept for `KEEP_S` before it goes back to the actor: a request of this driver that starts
    meanwhile (under load, the next call of some graph run) takes it without a round trip, up to `REUSES` times
    and while the lease is young, so other drivers still get their turn and a lease never outlives its term in
    use. The driver never holds more slots than the actor granted, so the cluster-wide limit holds.
    """

    KEEP_S = 0.05
    REUSES = 32

    def __init__(self, actor: Any, lease_s: float = LEASE_S):
        self.actor = actor
        self.job = ray.get_runtime_context().get_job_id()
        self.max_age = lease_s / 4
        # backend -> kept slots (lease, uses, granted at, kept since); a thread returns the unused ones, so a slot
        # goes back even when the event loop that kept it has ended (commands run several `asyncio.run`s).
        self.free: dict[str, list[tuple[str, int, float, float]]] = {}
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.flusher = threading.Thread(target=self._flush, name="unveil-limits-flush", daemon=True)
        self.flusher.start()

    def _flush(self) -> None:
        while not self.closed.wait(self.KEEP_S):
            now = time.monotonic()
            with self.lock:
                for backend, kept in self.free.items():
                    stale = [e for e in kept if now - e[3] >= self.KEEP_S]
                    for entry in stale:
                        kept.remove(entry)
                        self.actor.release.remote(backend, entry[0])

    async def _take(self, backend: str, max_concurrency: int, rpm: float | None) -> tuple[str, int, float]:
        while True:
            with self.lock:
                kept = self.free.get(backend)
                entry = kept.pop() if kept else None
            if entry is None:
                break
            lease, uses, granted, _ = entry
            if time.monotonic() - granted < self.max_age:
                if rpm:
                    await self.actor.token.remote(backend, rpm)
                return lease, uses, granted
            self.actor.release.remote(backend, lease)
        lease = await self._acquire(backend, max_concurrency, rpm)
        return lease, 0, time.monotonic()

    async def _acquire(self, backend: str, max_concurrency: int, rpm: float | None) -> str:
        """A new lease from the actor; a long wait says what it waits for (after `WAIT_NOTICE_S`, then each minute)."""
        waiting = asyncio.ensure_future(awaited(self.actor.acquire.remote(backend, max_concurrency, rpm, self.job)))
        started, notice = time.monotonic(), WAIT_NOTICE_S
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=notice)
                if done:
                    return str(waiting.result())
                held = await self.actor.holders.remote(backend)
                jobs = ", ".join(f"job {j}: {n}" for j, n in sorted(held.items())) or "none"
                log.warning(
                    "waiting %.0f s for a cluster-wide slot of model backend %r: %d of %d in use (%s; this "
                    "driver is job %s); UNVEIL_MAX_CONCURRENCY sets the limit, and the slots of an ended job "
                    "come back",
                    time.monotonic() - started,
                    backend,
                    sum(held.values()),
                    max(1, max_concurrency),
                    jobs,
                    self.job,
                )
                notice = 60.0
        finally:
            waiting.cancel()

    def _give_back(self, backend: str, held: tuple[str, int, float]) -> None:
        lease, uses, granted = held
        now = time.monotonic()
        if uses + 1 >= self.REUSES or now - granted >= self.max_age or self.closed.is_set():
            self.actor.release.remote(backend, lease)  # fire and forget: the caller need not wait for it
            return
        with self.lock:
            self.free.setdefault(backend, []).append((lease, uses + 1, granted, now))

    @contextlib.asynccontextmanager
    async def slot(self, backend: str, max_concurrency: int, rpm: float | None) -> AsyncIterator[None]:
        """Hold a cluster-wide slot of `backend` for the duration of a request."""
        held = await self._take(backend, max_concurrency, rpm)
        try:
            yield
        finally:
            self._give_back(backend, held)

    def close(self) -> None:
        """Give every kept slot back to the cluster and stop the flusher."""
        self.closed.set()
        self.flusher.join()
        with self.lock:
            for backend, kept in self.free.items():
                for entry in kept:
                    self.actor.release.remote(backend, entry[0])
                kept.clear()
