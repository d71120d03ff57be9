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

A member that dies (killed, node lost) is restarted by Ray (`max_restarts`); its requests wait until it answers
`ready()` again (or another member is started), within `UNVEIL_RAY_RESTART_TIMEOUT`, and are sent again (a request
its members died under more than `RETRIES` times fails): rendering is deterministic and the store content-addressed,
so a repeated render changes nothing. Settings of the pools come from the environment (see `PoolSettings`).

Modules: `settings` (pool settings and deadlines from the environment), `members` (what runs in the actors),
`pool` (which member takes a request), `remote` (the driver-side stand-ins installed into the registries),
`limiter` (the cluster-wide limits), `cluster` (connecting, the session, `unveil cluster info`).
"""

from runner.ray.cluster import connect, describe_cluster, probe_address, session
from runner.ray.pool import ActorPool, cluster_gpus
from runner.ray.settings import INFLIGHT, PoolSettings, PoolStalledError, render_settings, scorer_settings, vlm_settings

__all__ = [
    "INFLIGHT",
    "ActorPool",
    "PoolSettings",
    "PoolStalledError",
    "cluster_gpus",
    "connect",
    "describe_cluster",
    "probe_address",
    "render_settings",
    "scorer_settings",
    "session",
    "vlm_settings",
]
