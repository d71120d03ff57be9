"""Code the Ray tests run on Ray workers (importable there as `tests.ray_helpers`); this module holds no tests."""

from __future__ import annotations

import asyncio
import time


def hammer(n: int, rpm: float, concurrency: int, shared: bool, backend: str = "scripted") -> list[tuple[float, float]]:
    """A worker process's model calls: `n` concurrent requests to `backend` through its own `BackendLimits`."""
    from agents.limits import BackendLimits, set_shared_limiter

    set_shared_limiter(None)  # Ray reuses worker processes: start from no shared limiter
    if shared:
        from runner.ray_engine import RayLimiter, limiter_actor

        set_shared_limiter(RayLimiter(limiter_actor()))
    limits = BackendLimits(max_concurrency=concurrency, rpm=rpm)

    async def one() -> tuple[float, float]:
        async with limits.slot(backend):
            start = time.time()
            await asyncio.sleep(0.5)  # the backend's answer
            return start, time.time()

    async def every() -> list[tuple[float, float]]:
        return list(await asyncio.gather(*(one() for _ in range(n))))

    return asyncio.run(every())
