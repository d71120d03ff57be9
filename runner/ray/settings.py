"""Settings of the Ray engine's pools and deadlines, read from the environment once, with their errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tools.env import SettingError, env_str
from tools.errors import UnveilError

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


def env_json(name: str) -> dict[str, float]:
    """A JSON object of numbers from environment variable `name` ({} when unset)."""
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


def env_number(name: str) -> float | None:
    """A number from environment variable `name` (None when unset)."""
    raw = env_str(name) or ""
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name}: expected a number, got {raw!r}") from None


def env_seconds(name: str, default: float) -> float:
    """Seconds above 0 from environment variable `name` (`default` when unset)."""
    value = env_number(name)
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
        actors = env_number(f"{prefix}_ACTORS")
        cpus = env_number(f"{prefix}_CPUS")
        inflight = env_number(f"{prefix}_INFLIGHT")
        if inflight is not None and (inflight < 0 or inflight != int(inflight)):
            raise SettingError(f"{prefix}_INFLIGHT: expected a whole number >= 0 (0: no bound), got {inflight:g}")
        return cls(
            pool=pool,
            actors=int(actors) if actors is not None else None,
            gpus=env_number(f"{prefix}_GPUS"),
            cpus=default_cpus if cpus is None else cpus,
            resources=env_json(f"{prefix}_RESOURCES"),
            default_gpus=default_gpus,
            inflight=INFLIGHT if inflight is None else int(inflight),
            start_timeout_s=env_seconds("UNVEIL_RAY_START_TIMEOUT", START_TIMEOUT_S),
            request_timeout_s=env_seconds("UNVEIL_RAY_REQUEST_TIMEOUT", REQUEST_TIMEOUT_S),
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
