"""Settings of the Ray engine's pools and deadlines, read from the environment once, with their errors."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from tools.env import SettingError, env_str
from tools.errors import UnveilError

NAMESPACE = "unveil"
LIMITER_NAME = "unveil-limits"
RETRIES = 3  # members one request may see die under it (a request that kills them fails then); restarts are awaited
MAX_RESTARTS = 3  # Ray restarts of a dead member; creation errors (a bad model) are not restarted
ACTOR_CONCURRENCY = 1000  # requests an async member can hold at once (they meet in its batcher)
INFLIGHT = 64  # requests the driver sends one member at once by default: two GPU batches, one rendering, one forming
LEASE_S = 900.0  # a cluster-wide slot not released by then (its driver was killed) is taken back
START_TIMEOUT_S = 600.0  # a pool with no member placed and loaded by then fails its requests (clear error)
REQUEST_TIMEOUT_S = 3600.0  # a request its member did not answer by then fails (clear error)
RESTART_TIMEOUT_S = 600.0  # a member that died (Ray restarts it) and is not back by then ends (clear error)
PROBE_INTERVAL_S = 0.5  # a restarting member is asked `ready()` again this often while it does not answer
MAX_SECONDS = 7 * 24 * 3600.0  # the longest deadline a setting may give (a week)
MAX_ACTORS = 1024  # members of one pool
MAX_AMOUNT = 1e6  # CPUs, GPUs or a custom resource one member may ask for
CONNECT_TIMEOUT_S = 60.0  # connecting to a cluster that does not answer by then fails (clear error)
WAIT_NOTICE_S = 30.0  # a wait for a cluster-wide slot says what it waits for after this long, then every minute


def env_json(name: str) -> dict[str, float]:
    """A JSON object of resource -> amount (each from 0 to `MAX_AMOUNT`) from variable `name` ({} when unset)."""
    raw = env_str(name) or ""
    if not raw:
        return {}
    expected = f"{name}: expected a JSON object of resource -> amount (0 to {MAX_AMOUNT:g}), got {raw[:200]!r}"
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SettingError(expected) from exc
    if not isinstance(value, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_AMOUNT for v in value.values()
    ):
        raise SettingError(expected)
    return {str(k): float(v) for k, v in value.items()}


def env_number(name: str, low: float, high: float, *, whole: bool = False) -> float | None:
    """A number from `low` to `high` (a whole one if `whole`) from environment variable `name` (None when unset);
    anything else, NaN and infinities included, is a `SettingError` naming the variable and the bounds."""
    raw = env_str(name) or ""
    if not raw:
        return None
    kind = "a whole number" if whole else "a number"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not low <= value <= high or (whole and value != int(value)):
        raise SettingError(f"{name}: expected {kind} from {low:g} to {high:g}, got {raw[:200]!r}")
    return value


def env_seconds(name: str, default: float) -> float:
    """Seconds above 0 (at most `MAX_SECONDS`) from environment variable `name` (`default` when unset)."""
    try:
        value = env_number(name, 0.0, MAX_SECONDS)
    except SettingError:
        value = 0.0
    if value is None:
        return default
    if not value > 0:
        raise SettingError(
            f"{name}: expected a number of seconds above 0 (at most {MAX_SECONDS:g}), got {env_str(name)!r}"
        )
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
    room, so a member that starts late, or renders slower, still gets its share. `restart_timeout_s`: how long a
    member that died (Ray restarts it) is waited for before the requests waiting on it fail.
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
    restart_timeout_s: float = RESTART_TIMEOUT_S

    @classmethod
    def from_env(cls, pool: str, *, default_gpus: float, default_cpus: float) -> PoolSettings:
        """The settings of pool `pool` ("render" or "scorer") from the environment, each within its bounds
        (members 1 to `MAX_ACTORS`, CPUs, GPUs and resources 0 to `MAX_AMOUNT`, in-flight 0 to
        `ACTOR_CONCURRENCY`); the deadlines (`UNVEIL_RAY_START_TIMEOUT`, `UNVEIL_RAY_REQUEST_TIMEOUT`,
        `UNVEIL_RAY_RESTART_TIMEOUT`, seconds above 0, at most `MAX_SECONDS`) are shared by every pool."""
        prefix = f"UNVEIL_RAY_{pool.upper()}"
        actors = env_number(f"{prefix}_ACTORS", 1, MAX_ACTORS, whole=True)
        cpus = env_number(f"{prefix}_CPUS", 0, MAX_AMOUNT)
        inflight = env_number(f"{prefix}_INFLIGHT", 0, ACTOR_CONCURRENCY, whole=True)
        return cls(
            pool=pool,
            actors=int(actors) if actors is not None else None,
            gpus=env_number(f"{prefix}_GPUS", 0, MAX_AMOUNT),
            cpus=default_cpus if cpus is None else cpus,
            resources=env_json(f"{prefix}_RESOURCES"),
            default_gpus=default_gpus,
            inflight=INFLIGHT if inflight is None else int(inflight),
            start_timeout_s=env_seconds("UNVEIL_RAY_START_TIMEOUT", START_TIMEOUT_S),
            request_timeout_s=env_seconds("UNVEIL_RAY_REQUEST_TIMEOUT", REQUEST_TIMEOUT_S),
            restart_timeout_s=env_seconds("UNVEIL_RAY_RESTART_TIMEOUT", RESTART_TIMEOUT_S),
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
