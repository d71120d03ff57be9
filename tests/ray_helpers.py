"""Code the Ray tests run on Ray workers (importable there as `tests.ray_helpers`); this module holds no tests."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any


def hammer(n: int, rpm: float, concurrency: int, shared: bool, backend: str = "scripted") -> list[tuple[float, float]]:
    """A worker process's model calls: `n` concurrent requests to `backend` through its own `BackendLimits`."""
    from agents.limits import BackendLimits, set_shared_limiter

    set_shared_limiter(None)  # Ray reuses worker processes: start from no shared limiter
    if shared:
        from runner.ray.limiter import RayLimiter, limiter_actor

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


class SlowStarter:
    """A pool member that starts after `delay_s` and takes 0.3 s a request (an async actor, as the render one)."""

    def __init__(self, index: int, delay_s: float):
        self.index = index
        self.delay_s = delay_s

    def ready(self) -> dict[str, Any]:
        """Where this member runs, once its start delay has passed."""
        time.sleep(self.delay_s)
        return {"pid": os.getpid()}

    async def work(self) -> int:
        """This member's index, after 0.3 s."""
        await asyncio.sleep(0.3)
        return self.index
