"""The driver's side of an actor pool: which started member takes a request, its deadlines, and resending."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeGuard

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from runner.ray.settings import (
    ACTOR_CONCURRENCY,
    MAX_RESTARTS,
    PROBE_INTERVAL_S,
    RETRIES,
    PoolSettings,
    PoolStalledError,
)

log = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _error_of(answer: Future[Any]) -> BaseException | None:
    if answer.cancelled():
        return None
    return answer.exception()


def _is_death(exc: BaseException | None) -> TypeGuard[RayActorError]:
    """Whether `exc` says the member itself went (died, restarting, unreachable), not that its code raised."""
    return isinstance(exc, RayActorError) and not isinstance(exc, RayTaskError)


def is_dead_for_good(member: Any, exc: BaseException) -> bool:
    """Whether `member` will not be restarted again: its constructor failed, or Ray's actor table says DEAD.

    Where the table cannot be read the member is awaited until the restart deadline instead."""
    if getattr(exc, "actor_init_failed", False):
        return True
    try:
        from ray._private.state import actors  # the GCS actor table; no public reader works without a dashboard

        # A dict of the actor's fields, "State" among them (ALIVE, RESTARTING, DEAD, ...).
        entry: dict[str, Any] = actors(actor_id=member._actor_id.hex())
        return str(entry.get("State", "")) == "DEAD"
    except Exception:  # noqa: BLE001 - an unreadable table only means waiting for the deadline
        return False


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
        # Where a member not started stands: since when it is awaited, for how long at most, and the error that
        # ended it for good (restarts used up, or it did not come back within the restart deadline).
        self.awaited_since = [self.created] * size
        self.awaited_for = [self.settings.start_timeout_s] * size
        self.ended: list[BaseException | None] = [None] * size
        self.restarts = [0] * size
        self._lock = threading.Lock()
        self._probe_refs: dict[int, Any] = {}  # held until answered (Ray may cancel a task nobody holds)
        self._warned = False
        # Kept: Ray may cancel a task whose result nobody holds any more, and the member would never count as
        # started.
        self._ready_refs = [member.ready.remote() for member in self.members]
        for k, ref in enumerate(self._ready_refs):
            # Resolved on Ray's own thread: a flag per member, read by the event loops of the callers.
            ref.future().add_done_callback(lambda f, k=k: self._first_answer(k, f))

    def _first_answer(self, k: int, answer: Future[Any]) -> None:
        exc = _error_of(answer)
        if _is_death(exc):
            # It died before its first answer (killed while loading): awaited as a restart, until the start
            # deadline.
            self._probe_later(k, exc, 0.0)
            return
        # Started (or its own error, a bad model, which each request then raises as itself).
        self.started[k] = True

    def restarting(self, k: int, exc: BaseException) -> None:
        """Member `k` failed a request with `exc` (a `RayActorError`): it is not sent requests until it answers
        `ready()` again (Ray restarts it), at most `settings.restart_timeout_s` from now; then it counts as ended."""
        with self._lock:
            if not self.started[k] or self.ended[k] is not None:
                return  # another request already saw it go: one wait per restart
            self.started[k] = False
            self.restarts[k] += 1
            self.awaited_since[k] = time.monotonic()
            self.awaited_for[k] = self.settings.restart_timeout_s
        log.warning("%s: member %d is restarting (%s); its requests wait for it", self.name, k, _first_line(exc))
        self._probe_later(k, exc, 0.0)

    def _probe_later(self, k: int, exc: BaseException, delay: float) -> None:
        # On a thread of its own: Ray's callbacks run on its own thread, which must not submit tasks itself, and
        # the callers' event loops must not wait on the cluster's actor table.
        timer = threading.Timer(delay, self._probe, (k, exc))
        timer.daemon = True
        timer.start()

    def _probe(self, k: int, exc: BaseException) -> None:
        """Ask member `k` `ready()` until it answers (then it is started again), it is dead for good, or the
        restart deadline passed (then it is ended with `exc`'s story)."""
        if self.ended[k] is not None:
            return
        if time.monotonic() > self.awaited_since[k] + self.awaited_for[k]:
            self.ended[k] = PoolStalledError(
                f"{self.name}: member {k} did not come back within {self.awaited_for[k]:g} s after it failed "
                f"(UNVEIL_RAY_RESTART_TIMEOUT): {_first_line(exc)}"
            )
            return
        if is_dead_for_good(self.members[k], exc):
            self.ended[k] = exc
            return
        ref = self._probe_refs[k] = self.members[k].ready.remote()

        def answered(f: Future[Any]) -> None:
            error = _error_of(f)
            if not _is_death(error):
                self.started[k] = True  # back (a member's own error is raised by its requests, as above)
                return
            # Still restarting (ActorUnavailableError), or its death not yet known everywhere: ask again soon.
            self._probe_later(k, error or exc, PROBE_INTERVAL_S)

        ref.future().add_done_callback(answered)

    def needs(self) -> str:
        """What one member asks of the cluster, e.g. `GPU 0.75, CPU 1`."""
        parts = {"GPU": self.gpus, "CPU": self.settings.cpus, **self.settings.resources}
        return ", ".join(f"{k} {v:g}" for k, v in parts.items() if v)

    def _waiting(self) -> str:
        waiting = [k for k in range(len(self.members)) if not self.started[k] and self.ended[k] is None]
        try:
            # ray.available_resources is unannotated (a dict of resource name to amount).
            available: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call, unused-ignore]
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

    def _no_member(self) -> BaseException | None:
        """Why no request can be sent now and none will be: every member ended, or every member not ended is
        past its deadline (to start, or to come back after a restart); None while one may still answer."""
        now = time.monotonic()
        live = [k for k in range(len(self.members)) if self.ended[k] is None]
        if not live:
            return self.ended[-1]
        if any(now <= self.awaited_since[k] + self.awaited_for[k] for k in live):
            return None
        if all(not self.restarts[k] for k in live):
            return PoolStalledError(
                f"{self.name}: no member started within {self.settings.start_timeout_s:g} s "
                f"(UNVEIL_RAY_START_TIMEOUT); {self._waiting()}"
            )
        return PoolStalledError(
            f"{self.name}: no member came back within {self.settings.restart_timeout_s:g} s of its restart "
            f"(UNVEIL_RAY_RESTART_TIMEOUT); {self._waiting()}"
        )

    async def _member(self) -> int:
        """The least-loaded started member with room (ties in turn), waiting for one to start (or come back from
        a restart) until its deadline, and for room (without a deadline: the members are working) once one has."""
        while True:
            up = [k for k in range(len(self.members)) if self.started[k]]
            if up:
                deadline = self.created + self.settings.start_timeout_s
                if len(up) < len(self.members) and time.monotonic() > deadline and not self._warned:
                    self._warned = True
                    log.warning(
                        "%s: running on %d of %d members; %s", self.name, len(up), len(self.members), self._waiting()
                    )
                room = self._room(up)
                if room:
                    turn = next(self._turn)
                    return min(room, key=lambda k: (self.load[k], (k - turn) % len(self.members)))
            else:
                stop = self._no_member()
                if stop is not None:
                    raise stop
            await asyncio.sleep(0.05)

    async def call(self, method: str, *args: Any) -> Any:
        """`member.method(*args)` on the least-loaded started member. A member that died or is restarting is
        waited for (another may take the request meanwhile) and the request sent again, for at most
        `settings.restart_timeout_s` from its first failure; a request its members died under `retries` times
        (one that kills them) fails."""
        deaths = 0
        first_failure: float | None = None
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
            except RayActorError as exc:
                # Killed, out of memory, node lost (ActorDiedError), or still restarting (ActorUnavailableError):
                # Ray restarts the member; the request waits for a started one and is sent again.
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                deaths += not isinstance(exc, ActorUnavailableError)
                if deaths > self.retries or now - first_failure > self.settings.restart_timeout_s:
                    raise
                self.restarting(k, exc)
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
    totals: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call, unused-ignore]
    return totals


def cluster_gpus() -> float:
    """GPUs of the connected cluster."""
    return float(cluster_totals().get("GPU", 0.0))
