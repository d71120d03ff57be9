"""The driver's side of an actor pool: which started member takes a request, its deadlines, and resending."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from runner.ray.settings import ACTOR_CONCURRENCY, MAX_RESTARTS, RETRIES, PoolSettings, PoolStalledError

log = logging.getLogger(__name__)


def _cause(exc: RayTaskError) -> BaseException:
    # A worker's own error (a PromptError, an unreadable image) is raised as itself, so records say what the
    # local engine says.
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc


class ActorPool:
    """Members of one pool; each call goes to the least-loaded started member and is sent again if its member died.

    Every member is asked `ready()` when the pool is made; calls go only to members that answered (a member still
    waiting to be placed, or loading its model, holds no request), at most `settings.inflight` to one member at
    once: a burst at the start does not all land on the member that started first. A call that finds no member
    started within `settings.start_timeout_s`, or whose member does not answer within `settings.request_timeout_s`,
    raises `PoolStalledError` naming the pool and what it waited for, so a pool that cannot run never hangs a run.
    """

    def __init__(
        self,
        make: Callable[[int], Any],
        size: int,
        *,
        name: str = "pool",
        settings: PoolSettings | None = None,
        gpus: float = 0.0,
        retries: int = RETRIES,
    ):
        self.name = name
        self.settings = settings or PoolSettings(pool=name)
        self.gpus = gpus
        self.members = [make(k) for k in range(size)]
        self.load = [0] * size
        self.retries = retries
        self._turn = itertools.count()
        self.created = time.monotonic()
        self.started = [False] * size
        self._warned = False
        # Kept: Ray may cancel a task whose result nobody holds any more, and the member would never count as
        # started.
        self._ready_refs = [member.ready.remote() for member in self.members]
        for k, ref in enumerate(self._ready_refs):
            # Resolved on Ray's own thread: a flag per member, read by the event loops of the callers.
            ref.future().add_done_callback(lambda _f, k=k: self._set_started(k))

    def _set_started(self, k: int) -> None:
        self.started[k] = True

    def needs(self) -> str:
        """What one member asks of the cluster, e.g. `GPU 0.75, CPU 1`."""
        parts = {"GPU": self.gpus, "CPU": self.settings.cpus, **self.settings.resources}
        return ", ".join(f"{k} {v:g}" for k, v in parts.items() if v)

    def _waiting(self) -> str:
        waiting = [k for k in range(len(self.members)) if not self.started[k]]
        try:
            # ray.available_resources is unannotated (a dict of resource name to amount).
            available: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
            free = {k: v for k, v in available.items() if k in ("GPU", "CPU", *self.settings.resources)}
        except Exception:  # noqa: BLE001 - only for the message
            free = {}
        shown = ", ".join(f"{k} {v:g}" for k, v in sorted(free.items())) or "none"
        return (
            f"member(s) {', '.join(map(str, waiting))} of {len(self.members)} not started: each needs "
            f"{self.needs() or 'nothing'} and the cluster has {shown} free; a member is started once Ray placed "
            "it and it loaded its model"
        )

    def _room(self, up: list[int]) -> list[int]:
        """The started members that hold fewer than `settings.inflight` requests (all of them without a bound)."""
        cap = self.settings.inflight
        return [k for k in up if not cap or self.load[k] < cap]

    async def _member(self) -> int:
        """The least-loaded started member with room (ties in turn), waiting for one to start until the start
        deadline, and for room (without a deadline: the members are working) once one has."""
        deadline = self.created + self.settings.start_timeout_s
        while True:
            up = [k for k in range(len(self.members)) if self.started[k]]
            if up:
                if len(up) < len(self.members) and time.monotonic() > deadline and not self._warned:
                    self._warned = True
                    log.warning(
                        "%s: running on %d of %d members; %s", self.name, len(up), len(self.members), self._waiting()
                    )
                room = self._room(up)
                if room:
                    turn = next(self._turn)
                    return min(room, key=lambda k: (self.load[k], (k - turn) % len(self.members)))
            elif time.monotonic() > deadline:
                raise PoolStalledError(
                    f"{self.name}: no member started within {self.settings.start_timeout_s:g} s "
                    f"(UNVEIL_RAY_START_TIMEOUT); {self._waiting()}"
                )
            await asyncio.sleep(0.05)

    async def call(self, method: str, *args: Any) -> Any:
        """`member.method(*args)` on the least-loaded started member."""
        attempt = 0
        while True:
            k = await self._member()
            self.load[k] += 1
            ref = getattr(self.members[k], method).remote(*args)
            try:
                return await asyncio.wait_for(awaited(ref), self.settings.request_timeout_s)
            except TimeoutError:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
                raise PoolStalledError(
                    f"{self.name}: member {k} did not answer a {method!r} request within "
                    f"{self.settings.request_timeout_s:g} s (UNVEIL_RAY_REQUEST_TIMEOUT); it holds {self.load[k]} "
                    "request(s) now"
                ) from None
            except RayTaskError as exc:
                raise _cause(exc) from None
            except RayActorError:
                # The member died (killed, out of memory, node lost): Ray restarts it; send the request again.
                attempt += 1
                if attempt > self.retries:
                    raise
                await asyncio.sleep(min(2.0, 0.25 * attempt))
            finally:
                self.load[k] -= 1

    def ready(self) -> list[dict[str, Any]]:
        """Wait until every member is up; where each runs (a member that cannot start raises its error, one
        not started within the start deadline raises `PoolStalledError`)."""
        refs = self._ready_refs
        left = max(1.0, self.created + self.settings.start_timeout_s - time.monotonic())
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
        if len(done) < len(refs):
            raise PoolStalledError(
                f"{self.name}: not every member started within "
                f"{self.settings.start_timeout_s:g} s (UNVEIL_RAY_START_TIMEOUT); {self._waiting()}"
            )
        try:
            return list(ray.get(refs))
        except RayTaskError as exc:
            raise _cause(exc) from None

    def kill(self) -> None:
        """End every member."""
        for member in self.members:
            with contextlib.suppress(Exception):
                ray.kill(member, no_restart=True)


async def awaited(ref: Any) -> Any:
    """The result of a Ray object ref, awaited on the caller's event loop."""
    return await ref


def actor_options(settings: PoolSettings, gpus: float) -> dict[str, Any]:
    """Ray actor options of a member of a pool with `settings` and `gpus` GPUs each."""
    options: dict[str, Any] = {
        "num_gpus": gpus,
        "num_cpus": settings.cpus,
        "max_restarts": MAX_RESTARTS,
        "max_task_retries": 0,
        "max_concurrency": ACTOR_CONCURRENCY,
    }
    if settings.resources:
        options["resources"] = dict(settings.resources)
    return options


def cluster_totals() -> dict[str, float]:
    """Every resource of the connected cluster (CPU, GPU, memory, custom ones) and its total amount."""
    # ray.cluster_resources is unannotated; it returns this dict.
    totals: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return totals


def cluster_gpus() -> float:
    """GPUs of the connected cluster."""
    return float(cluster_totals().get("GPU", 0.0))
