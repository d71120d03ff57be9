"""Concurrency limits and rate limiting per backend (one per provider and base URL).

A backend gets a semaphore (its provider profile's `max_concurrency`: 1 for in-process weights; else
`$UNVEIL_MAX_CONCURRENCY`, default 8) and, when
`$UNVEIL_RPM` or a per-backend setting asks for one, a token-bucket limit on requests per minute. Both are
created per event loop, since asyncio primitives belong to the loop that made them.

With a distributed engine on (`--engine ray`), `set_shared_limiter` installs a cluster-wide limiter (the run
layer's named Ray actor): every slot is then also held there, so all drivers and workers of a cluster together
stay under the same per-backend concurrency and requests per minute; the per-process semaphore still bounds this
process, and the rate is kept by the shared bucket alone.

A `CallBudget` holds a batch's spending caps at the door of every request (see its docstring).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from agents.providers.profiles import provider_profile
from tools.env import SettingError, check_minimum, env_float, env_int
from tools.errors import UnveilError


def check_limits(max_concurrency: int | None = None, rpm: float | None = None) -> None:
    """The one rule of the model-API limits, wherever they are given (gateway settings, `BackendLimits`, a
    `RateLimiter`): a concurrency of at least 1 (0 would never start a request) and a finite requests-per-minute
    above 0 (0 would wait forever, a negative rate busy-spin). None means "not given"."""
    if max_concurrency is not None:
        check_minimum("max_concurrency", max_concurrency, 1)
    if rpm is not None:
        if rpm != rpm or rpm in (float("inf"), float("-inf")):
            raise SettingError(f"rpm={rpm!r}: expected a finite number")
        check_minimum("rpm", rpm, 0, strict=True)


class RateLimiter:
    """A token bucket: at most `rpm` requests a minute, bursting up to `burst`."""

    def __init__(self, rpm: float, burst: int = 1):
        check_limits(rpm=rpm)  # whoever builds the limiter
        self.rate = rpm / 60.0
        self.capacity = float(max(1, burst))
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait for a token."""
        async with self._lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


class SharedLimiter(Protocol):
    """A limiter shared by every process of a cluster (see the module docstring)."""

    def slot(self, backend: str, max_concurrency: int, rpm: float | None) -> AbstractAsyncContextManager[None]:
        """Hold one cluster-wide slot of `backend` (and a rate token when `rpm` is set)."""
        ...


_SHARED: list[SharedLimiter] = []  # at most one: the engine of the current run


def set_shared_limiter(limiter: SharedLimiter | None) -> None:
    """Install (or remove, with None) the cluster-wide limiter every `BackendLimits` also holds."""
    _SHARED.clear()
    if limiter is not None:
        _SHARED.append(limiter)


def shared_limiter() -> SharedLimiter | None:
    """The installed cluster-wide limiter, if any."""
    return _SHARED[0] if _SHARED else None


class BackendLimits:
    """Per-backend semaphores and rate limiters."""

    def __init__(self, max_concurrency: int | None = None, rpm: float | None = None):
        # Refused up front, naming the variable (or the setting) that asked for them.
        check_limits(max_concurrency, rpm)
        if max_concurrency is None:
            max_concurrency = env_int("UNVEIL_MAX_CONCURRENCY", 8, minimum=1) or 8
        self.max_concurrency = max_concurrency
        self.rpm = rpm if rpm is not None else env_float("UNVEIL_RPM", None, minimum=0, strict=True)
        self._semaphores: dict[tuple[int, str], asyncio.Semaphore] = {}
        self._limiters: dict[tuple[int, str], RateLimiter] = {}

    def _limit_for(self, backend: str) -> int:
        """The provider profile's own limit (in-process weights: 1), else this gateway's setting."""
        own = provider_profile(backend.split("@", 1)[0]).max_concurrency
        return self.max_concurrency if own is None else own

    @asynccontextmanager
    async def slot(self, backend: str) -> AsyncIterator[None]:
        """Hold one of the backend's concurrent slots (and a rate token) for the duration of a request."""
        key = (id(asyncio.get_running_loop()), backend)
        sem = self._semaphores.get(key)
        if sem is None:
            sem = self._semaphores[key] = asyncio.Semaphore(self._limit_for(backend))
        shared = shared_limiter()
        if shared is not None:
            async with sem, shared.slot(backend, self._limit_for(backend), self.rpm):
                yield
            return
        if self.rpm:
            limiter = self._limiters.get(key)
            if limiter is None:
                limiter = self._limiters[key] = RateLimiter(self.rpm)
            await limiter.acquire()
        async with sem:
            yield


class SpendingCapReached(UnveilError):
    """A model call not started because a spending cap (`--max-calls`, `--max-cost`) is reached."""


class CallBudget:
    """The spending caps as the gateway holds them: a model request starts only while the calls started and the
    dollars spent are under the caps (`Gateway.budget`; the run layer installs one per capped batch).

    `calls` starts at the calls spent before (earlier records), and every request the gateway starts adds one at
    once, so `max_calls` is never passed. A call's price is known only from its answer, so the dollars are `cost`
    (those spent before, less the gateway's total when the budget was made) plus the gateway's own total of the
    calls that finished: the requests already in flight when the cap is reached can pass `max_cost`, by at most
    one request's price each (the concurrency times the dearest call)."""

    def __init__(self, max_calls: int | None, max_cost: float | None, *, calls: int = 0, cost: float = 0.0) -> None:
        self.max_calls, self.max_cost = max_calls, max_cost
        self.calls, self.cost = calls, cost
        self.refused: str | None = None  # why the first request was refused; no request starts after it

    def admit(self, role: str, spent: float) -> None:
        """Count one request of `role` about to start, `spent` being the gateway's total dollars; raises
        `SpendingCapReached` (and starts nothing) when a cap is reached."""
        why = self.refused
        if why is None and self.max_calls is not None and self.calls >= self.max_calls:
            why = f"{self.calls} model calls (--max-calls {self.max_calls})"
        if why is None and self.max_cost is not None and self.cost + spent >= self.max_cost:
            why = f"${self.cost + spent:.4f} (--max-cost {self.max_cost:g})"
        if why is not None:
            self.refused = why
            raise SpendingCapReached(f"spending cap reached: {why}; the {role} call was not started")
        self.calls += 1
