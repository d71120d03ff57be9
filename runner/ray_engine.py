"""The Ray engine: GPU work in Ray actor pools, model API limits in one named actor, the driver unchanged.

The driver process keeps running the LangGraph graphs in its one asyncio loop (model API calls are I/O bound, so
one loop holds thousands in flight) and keeps the one fsynced writer, the response cache and the image store: every
guarantee of the local engine holds as it is. What moves out is the GPU work and the cluster-wide limits:

- a render pool per text-to-image spec: async actors (`num_gpus` each, one per GPU by default) that each wrap the
  ordinary batched generator of `tools.t2i`, so concurrent requests still meet in one GPU batch inside an actor.
  `RayGenerator` sends each request to the least-loaded member, gets PNG bytes back and stores them exactly as
  rendered (`ImageStore.put_png`), so an image has the same content hash wherever it was rendered;
- a scorer pool for the one scoring entry point (`tools.scorers.score`): the driver sends the PNG bytes, a member
  stores them in its own scratch store (same ids) and runs `score_here`;
- one detached named actor per cluster (`unveil-limits` in namespace `unveil`) holding a semaphore and a token
  bucket per model backend; every driver's `BackendLimits` holds a slot there too, so all jobs on a cluster
  together stay under `UNVEIL_MAX_CONCURRENCY` / `UNVEIL_RPM`.

A member that dies (killed, node lost) is restarted by Ray (`max_restarts`), and the request it held is sent again,
to whichever member is least loaded (`RETRIES` times): rendering is deterministic and the store content-addressed,
so a repeated render changes nothing. Settings of the pools come from the environment (see `PoolSettings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ray
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from ray.exceptions import RayActorError, RayTaskError

from agents.limits import set_shared_limiter
from agents.providers.local_base import LocalChatModel
from agents.providers.registry import set_remote_chat_models
from agents.spec import redact_spec
from runner.engine_settings import ADDRESS_ENV
from tools.env import SettingError, env_str
from tools.errors import UnveilError
from tools.image_store import ImageStore, get_image_store, pid_alive
from tools.scorers.score import ScoringSettings, score_here, set_remote_scoring
from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.registry import build_local_generator, set_remote_generators

log = logging.getLogger(__name__)

NAMESPACE = "unveil"
LIMITER_NAME = "unveil-limits"
RETRIES = 3  # sends of one request after its member died (each to the least-loaded member)
MAX_RESTARTS = 3  # Ray restarts of a dead member; creation errors (a bad model) are not restarted
ACTOR_CONCURRENCY = 1000  # requests an async member can hold at once (they meet in its batcher)
INFLIGHT = 64  # requests the driver sends one member at once by default: two GPU batches, one rendering, one forming
LEASE_S = 900.0  # a cluster-wide slot not released by then (its driver was killed) is taken back
START_TIMEOUT_S = 600.0  # a pool with no member placed and loaded by then fails its requests (clear error)
REQUEST_TIMEOUT_S = 3600.0  # a request its member did not answer by then fails (clear error)
CONNECT_TIMEOUT_S = 60.0  # connecting to a cluster that does not answer by then fails (clear error)
WAIT_NOTICE_S = 30.0  # a wait for a cluster-wide slot says what it waits for after this long, then every minute


def _env_json(name: str) -> dict[str, float]:
    raw = env_str(name) or ""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingError(f"{name}: expected a JSON object of resource -> amount, got {raw!r}") from exc
    if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
        raise SettingError(f"{name}: expected a JSON object of resource -> amount, got {raw!r}")
    return {str(k): float(v) for k, v in value.items()}


def _env_number(name: str) -> float | None:
    raw = env_str(name) or ""
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name}: expected a number, got {raw!r}") from None


def _env_seconds(name: str, default: float) -> float:
    value = _env_number(name)
    if value is None:
        return default
    if not value > 0 or value != value:
        raise SettingError(f"{name}: expected a number of seconds above 0, got {env_str(name)!r}")
    return value


class PoolStalledError(UnveilError, RuntimeError):
    """A pool request that waited past its deadline: no member could start, or its member did not answer."""


@dataclass(frozen=True)
class PoolSettings:
    """How one actor pool is placed (environment `UNVEIL_RAY_<POOL>_ACTORS`, `_GPUS`, `_CPUS`, `_RESOURCES`,
    `_INFLIGHT`).

    `actors` None: one member per GPU of the cluster (one member when it has none). `gpus` None: `default_gpus`
    per member when the cluster has GPUs, else 0. `resources`: custom Ray resources each member needs, e.g.
    `{"render": 1}` to keep rendering on the nodes started with `--resources '{"render": 4}'`. `inflight`: requests
    the driver sends one member at once (0: no bound); the others wait in the driver for the first member with
    room, so a member that starts late, or renders slower, still gets its share.
    """

    pool: str
    actors: int | None = None
    gpus: float | None = None
    cpus: float = 1.0
    resources: dict[str, float] = field(default_factory=dict)
    default_gpus: float = 1.0
    inflight: int = INFLIGHT
    start_timeout_s: float = START_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S

    @classmethod
    def from_env(cls, pool: str, *, default_gpus: float, default_cpus: float) -> PoolSettings:
        """The settings of pool `pool` ("render" or "scorer") from the environment; the deadlines
        (`UNVEIL_RAY_START_TIMEOUT`, `UNVEIL_RAY_REQUEST_TIMEOUT`, seconds) are shared by every pool."""
        prefix = f"UNVEIL_RAY_{pool.upper()}"
        actors = _env_number(f"{prefix}_ACTORS")
        cpus = _env_number(f"{prefix}_CPUS")
        inflight = _env_number(f"{prefix}_INFLIGHT")
        if inflight is not None and (inflight < 0 or inflight != int(inflight)):
            raise SettingError(f"{prefix}_INFLIGHT: expected a whole number >= 0 (0: no bound), got {inflight:g}")
        return cls(
            pool=pool,
            actors=int(actors) if actors is not None else None,
            gpus=_env_number(f"{prefix}_GPUS"),
            cpus=default_cpus if cpus is None else cpus,
            resources=_env_json(f"{prefix}_RESOURCES"),
            default_gpus=default_gpus,
            inflight=INFLIGHT if inflight is None else int(inflight),
            start_timeout_s=_env_seconds("UNVEIL_RAY_START_TIMEOUT", START_TIMEOUT_S),
            request_timeout_s=_env_seconds("UNVEIL_RAY_REQUEST_TIMEOUT", REQUEST_TIMEOUT_S),
        )

    def plan(self, cluster_gpus: float) -> tuple[int, float]:
        """(members, GPUs per member) on a cluster with `cluster_gpus` GPUs in all."""
        gpus = self.gpus if self.gpus is not None else (self.default_gpus if cluster_gpus else 0.0)
        actors = self.actors if self.actors is not None else max(1, int(cluster_gpus))
        return max(1, actors), gpus


def render_settings() -> PoolSettings:
    """The render pool's settings: by default 0.75 of a GPU each, so one scorer member (0.25) fits beside it."""
    return PoolSettings.from_env("render", default_gpus=0.75, default_cpus=1.0)


def scorer_settings() -> PoolSettings:
    """The scorer pool's settings: by default 0.1 of a GPU each and no CPU reservation."""
    return PoolSettings.from_env("scorer", default_gpus=0.1, default_cpus=0.0)


def vlm_settings() -> PoolSettings:
    """The pool of in-process chat models (`hf:` VLMs such as the IPR refiner): 0.15 of a GPU each, so a render
    (0.75), a scorer (0.1) and a VLM member (0.15) share every GPU; their memory, not these shares, is the limit."""
    return PoolSettings.from_env("vlm", default_gpus=0.15, default_cpus=1.0)


# -- actors ---------------------------------------------------------------------------------------------------


class _Scratch:
    """A per-member scratch image store: images live there only until their bytes went back to the driver."""

    def __init__(self, kind: str):
        base = os.path.join(tempfile.gettempdir(), "unveil-ray")
        os.makedirs(base, exist_ok=True)
        for name in os.listdir(base):  # scratch of members killed before they could clean up
            pid = name.rsplit("-", 1)[-1]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        self.root = os.path.join(base, f"{kind}-{os.getpid()}")
        shutil.rmtree(self.root, ignore_errors=True)
        self.store = ImageStore(self.root)
        self.users: dict[str, int] = {}

    def hold(self, ids: list[str]) -> None:
        for i in ids:
            self.users[i] = self.users.get(i, 0) + 1

    def release(self, ids: list[str]) -> None:
        # Two concurrent requests may make the same image (same prompt and seed): it is removed after the last.
        for i in ids:
            self.users[i] -= 1
            if not self.users[i]:
                del self.users[i]
                self.store.path_for(i).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _Member:
    """What every pool member shares: where it runs, and its scratch store (if any) removed when it goes."""

    def ready(self) -> dict[str, Any]:
        """Where this member runs."""
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def __del__(self) -> None:
        scratch = getattr(self, "scratch", None)  # Ray's actor-class wrapper is an instance without one
        if scratch is not None:
            scratch.close()


class RenderWorker(_Member):
    """One render pool member: the ordinary batched generator of `spec`, rendering into a scratch store."""

    def __init__(self, spec: str, long_prompts: str, options: dict[str, Any]):
        self.scratch = _Scratch("render")
        self.generator = build_local_generator(spec, store=self.scratch.store, long_prompts=long_prompts, **options)

    def ready(self) -> dict[str, Any]:
        """Where this member runs; loads the pipeline first, so a bad model fails here, once."""
        if isinstance(getattr(type(self.generator), "pipeline", None), property):
            _ = self.generator.pipeline  # type: ignore[attr-defined]  # the diffusers generator loads it lazily
        return super().ready()

    async def render(self, request: GenerationRequest) -> list[bytes]:
        """Render one request (batched with the others this member holds) and return its PNG bytes."""
        ids = await self.generator.generate(request)
        self.scratch.hold(ids)
        try:
            return [self.scratch.store.read_bytes(i) for i in ids]
        finally:
            self.scratch.release(ids)


class VLMWorker(_Member):
    """One member of an in-process chat model's pool (`hf:` specs): the model loaded once, answering requests."""

    def __init__(self, spec: str):
        from agents.providers.registry import build_local_chat_model
        from agents.spec import ModelSpec

        self.model = build_local_chat_model(ModelSpec.parse(spec), "", {})

    async def generate(self, messages: list[Any], options: dict[str, Any]) -> Any:
        """The model's `ChatResult` for `messages` (images travel inside them as data URLs)."""
        return await self.model._agenerate(messages, **options)


class ScorerWorker(_Member):
    """One scorer pool member: the one scoring entry point (`score_here`) on images sent as PNG bytes."""

    def __init__(self) -> None:
        self.scratch = _Scratch("scorer")

    async def score(
        self, images: list[bytes], prompt: str, names: list[str], settings: ScoringSettings
    ) -> list[dict[str, Any]]:
        """Rows of `score_images` for the images (stored here under the ids they have on the driver)."""
        stored = [
            await asyncio.to_thread(self.scratch.store.put_png, png, name=f"image {k}") for k, png in enumerate(images)
        ]
        ids = [s.id for s in stored]
        self.scratch.hold(ids)
        try:
            return await score_here(ids, prompt, names, settings, store=self.scratch.store)
        finally:
            self.scratch.release(ids)


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


_RENDER_ACTOR = ray.remote(RenderWorker)
_SCORER_ACTOR = ray.remote(ScorerWorker)
_VLM_ACTOR = ray.remote(VLMWorker)
_LIMITER_ACTOR = ray.remote(LimiterActor)


# -- the driver side ------------------------------------------------------------------------------------------


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
            free = {k: v for k, v in ray.available_resources().items() if k in ("GPU", "CPU", *self.settings.resources)}
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
                return await asyncio.wait_for(_awaited(ref), self.settings.request_timeout_s)
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


async def _awaited(ref: Any) -> Any:
    return await ref


def _actor_options(settings: PoolSettings, gpus: float) -> dict[str, Any]:
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


def cluster_gpus() -> float:
    """GPUs of the connected cluster."""
    return float(ray.cluster_resources().get("GPU", 0.0))


class RayGenerator:
    """An `ImageGenerator` rendering on a render pool; images land in the driver's store with their own ids."""

    def __init__(self, spec: str, pool: ActorPool, store: ImageStore):
        self.name = spec
        self.pool = pool
        self.store = store

    @property
    def pipeline(self) -> list[dict[str, Any]]:
        """Waits until every member loaded its pipeline (a preflight: a missing model is one clear error)."""
        return self.pool.ready()

    async def generate(self, request: GenerationRequest) -> list[str]:
        """Render `request` on the least-loaded member and store the images here."""
        pngs: list[bytes] = await self.pool.call("render", request)
        stored = [await asyncio.to_thread(self.store.put_png, png, name=f"{self.name} render") for png in pngs]
        return [s.id for s in stored]


class RayGenerators:
    """The render pools of a run, one per spec and setting (installed into `tools.t2i.registry`)."""

    def __init__(self) -> None:
        self.pools: dict[tuple[Any, ...], ActorPool] = {}
        self.settings = render_settings()
        # Graph runs open their generator in worker threads, many at once: without the lock each thread that
        # found no pool made one, and members of several pools then held the GPUs that the others waited for.
        self.lock = threading.Lock()

    def _pool(self, spec: str, long_prompts: str, options: dict[str, Any]) -> ActorPool:
        key = (spec, long_prompts, tuple(sorted((k, repr(v)) for k, v in options.items())))
        with self.lock:
            if key not in self.pools:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = _RENDER_ACTOR.options(**_actor_options(self.settings, gpus))
                self.pools[key] = ActorPool(
                    lambda _k: actor.remote(spec, long_prompts, options),
                    size,
                    name=f"render pool {redact_spec(spec)!r}",
                    settings=self.settings,
                    gpus=gpus,
                )
            return self.pools[key]

    def open(self, spec: str, *, store: ImageStore, long_prompts: str, options: dict[str, Any]) -> ImageGenerator:
        """The generator of `spec` on its render pool, storing into `store`."""
        options = {k: v for k, v in options.items() if k != "store"}
        return RayGenerator(spec, self._pool(spec, long_prompts, options), store)

    def close(self) -> None:
        """End every render member."""
        for pool in self.pools.values():
            pool.kill()
        self.pools.clear()


class RemoteChatModel(LocalChatModel):
    """A chat model whose weights live in a Ray pool: the gateway binds tools and calls it like the local one."""

    spec: str
    pool: Any

    @property
    def _llm_type(self) -> str:
        return "unveil-ray-remote"

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        raise NotImplementedError(f"{self.spec}: a model on the Ray engine answers asynchronous calls only")

    async def _arespond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        # The member's model reads the bound tools and token limits; nothing else of the call travels.
        sent = {k: options[k] for k in ("tools", "max_new_tokens", "max_tokens") if k in options}
        result: ChatResult = await self.pool.call("generate", list(messages), sent)
        return result


class RayChatModels:
    """The pools of in-process chat models (installed into `agents.providers.registry`), one per spec."""

    def __init__(self) -> None:
        self.pools: dict[str, ActorPool] = {}
        self.settings = vlm_settings()
        self.lock = threading.Lock()  # one pool per spec, however many threads ask at once

    def __call__(self, spec: Any, role: str) -> BaseChatModel:
        key = str(spec)  # in-process providers take no base URL, so the display form is the whole spec
        with self.lock:
            if key not in self.pools:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = _VLM_ACTOR.options(**_actor_options(self.settings, gpus))
                self.pools[key] = ActorPool(
                    lambda _k: actor.remote(key),
                    size,
                    name=f"vlm pool {redact_spec(key)!r}",
                    settings=self.settings,
                    gpus=gpus,
                )
            return RemoteChatModel(spec=key, pool=self.pools[key])

    def close(self) -> None:
        """End every member."""
        for pool in self.pools.values():
            pool.kill()
        self.pools.clear()


class RayScoring:
    """Scoring on the scorer pool (installed into `tools.scorers.score`)."""

    def __init__(self) -> None:
        self.settings = scorer_settings()
        self.pool: ActorPool | None = None
        self.lock = threading.Lock()  # one pool, however many threads ask at once

    def _get_pool(self) -> ActorPool:
        with self.lock:
            if self.pool is None:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = _SCORER_ACTOR.options(**_actor_options(self.settings, gpus))
                self.pool = ActorPool(
                    lambda _k: actor.remote(), size, name="scorer pool", settings=self.settings, gpus=gpus
                )
            return self.pool

    async def score(
        self, image_ids: list[str], prompt: str, names: list[str], settings: ScoringSettings, store: ImageStore | None
    ) -> list[dict[str, Any]]:
        """The rows of `score_images`, computed by the least-loaded scorer member."""
        source = store or get_image_store()
        images = [await asyncio.to_thread(source.read_bytes, i) for i in image_ids]
        rows: list[dict[str, Any]] = await self._get_pool().call("score", images, prompt, names, settings)
        return rows

    def close(self) -> None:
        """End every scorer member."""
        if self.pool is not None:
            self.pool.kill()
            self.pool = None


def limiter_actor(lease_s: float = LEASE_S) -> Any:
    """The cluster's limiter (created by the first driver that asks, then found by name)."""
    return _LIMITER_ACTOR.options(
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
        waiting = asyncio.ensure_future(_awaited(self.actor.acquire.remote(backend, max_concurrency, rpm, self.job)))
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


# -- connecting -----------------------------------------------------------------------------------------------


def connect(address: str | None) -> bool:
    """Connect this process to a Ray cluster; returns whether this call did (False: it was connected already).

    `address` None or "": the cluster named by `RAY_ADDRESS`, else one `ray start` runs on this machine, else a new
    local one (token authentication on, Ray's default). "auto": an existing cluster; `ray://host:10001`: Ray
    Client. The project's folder travels to the workers of a remote cluster with `ray job submit --working-dir`.
    A cluster that cannot be reached, or does not answer within `UNVEIL_RAY_CONNECT_TIMEOUT` seconds (default 60),
    is one `ConnectionError` naming the address (Ray itself retries for many minutes).
    """
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "logging_level": logging.WARNING}
    if not address:
        kwargs["include_dashboard"] = False
        ray.init(**kwargs)
        return True
    timeout = _env_seconds("UNVEIL_RAY_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)
    probe_address(address, timeout)
    kwargs["address"] = address
    failed: list[BaseException] = []
    done = threading.Event()

    def init() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    # In a thread, so that the caller can stop waiting: Ray gives no deadline of its own for the first contact.
    threading.Thread(target=init, name="unveil-ray-connect", daemon=True).start()
    if not done.wait(timeout):
        raise ConnectionError(
            f"Ray cluster at {address!r} (--ray-address / {ADDRESS_ENV}) did not answer within "
            f"{timeout:g} s (UNVEIL_RAY_CONNECT_TIMEOUT): is it a Ray head node's GCS port "
            "(6379 by default), or ray://HOST:10001 for Ray Client?"
        )
    if failed:
        raise ConnectionError(f"could not connect to the Ray cluster at {address!r}: {failed[0]}") from failed[0]
    return True


def probe_address(address: str, timeout: float) -> None:
    """Refuse a `HOST:PORT` or `ray://HOST:PORT` address that is malformed or where nothing accepts a connection,
    naming it (`auto` and other URL schemes are left to Ray)."""
    target = address.strip()
    if target.startswith("ray://"):
        target = target.removeprefix("ray://")
    elif target == "auto" or "://" in target:
        return
    host, sep, port = target.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=min(timeout, 10.0)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConnectionError(
            f"cannot reach the Ray cluster at {address!r} (--ray-address / {ADDRESS_ENV}): {reason}"
        ) from None


@contextlib.contextmanager
def session(address: str | None) -> Iterator[None]:
    """Connect, route rendering, scoring and model API limits through the cluster, and undo all of it after."""
    started = connect(address)
    generators, scoring, chat_models = RayGenerators(), RayScoring(), RayChatModels()
    set_remote_generators(generators)
    set_remote_scoring(scoring)
    set_remote_chat_models(chat_models)
    limiter = RayLimiter(limiter_actor())
    set_shared_limiter(limiter)
    try:
        yield
    finally:
        set_remote_generators(None)
        set_remote_scoring(None)
        set_remote_chat_models(None)
        set_shared_limiter(None)
        limiter.close()
        generators.close()
        scoring.close()
        chat_models.close()
        if started:
            ray.shutdown()


def describe_cluster() -> dict[str, Any]:
    """Nodes (CPUs, GPUs, custom resources), totals, Unveil's named actors, and the pools a run would place."""
    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = dict(node.get("Resources") or {})
        custom = {
            k: v
            for k, v in res.items()
            if k not in ("CPU", "GPU", "memory", "object_store_memory")
            and not k.startswith("node:")
            and not k.startswith("accelerator_type")
        }
        nodes.append(
            {
                "node_id": node.get("NodeID"),
                "address": node.get("NodeManagerAddress"),
                "cpus": res.get("CPU", 0.0),
                "gpus": res.get("GPU", 0.0),
                "resources": custom,
            }
        )
    gpus = cluster_gpus()
    pools = {}
    for settings in (render_settings(), scorer_settings(), vlm_settings()):
        size, per = settings.plan(gpus)
        pools[settings.pool] = {
            "actors": size,
            "gpus_each": per,
            "cpus_each": settings.cpus,
            "resources_each": settings.resources,
        }
    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]
    totals = ray.cluster_resources()
    return {
        "nodes": nodes,
        "cpus": totals.get("CPU", 0.0),
        "gpus": gpus,
        "pools": pools,
        "named_actors": sorted(a["name"] for a in named),
    }
