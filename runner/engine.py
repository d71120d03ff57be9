"""Engine selection for a run: `local` (this process does everything) or `ray` (GPU work on a Ray cluster).

The run layer owns the choice; commands only pass `EngineSettings` (from `--engine` / `--ray-address`) to
`engine_session`, and everything inside the `with` block (graph runs, the batch runner, evaluation) opens its
generators and scorers and takes its model-API slots as usual: the engine installs itself behind those seams
(`tools.t2i.registry.set_remote_generators`, `tools.scorers.score.set_remote_scoring`,
`agents.limits.set_shared_limiter`). With the local engine nothing is installed and Ray is never imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from runner.engine_settings import ADDRESS_ENV, ENGINES, EngineSettings
from tools.env import env_str

__all__ = ["ADDRESS_ENV", "ENGINES", "EngineSettings", "cluster_info", "engine_session"]


@contextlib.contextmanager
def engine_session(settings: EngineSettings | None = None) -> Iterator[None]:
    """Run the body on the chosen engine (see the module docstring); the engine is removed again afterwards."""
    settings = settings or EngineSettings()
    if settings.engine == "local":
        yield
        return
    from tools.extras import require_extra

    require_extra("ray", "--engine ray")
    from runner import ray as ray_engine  # only here: the local engine never imports Ray

    with ray_engine.session(settings.address()):
        yield


def cluster_info(address: str | None = None) -> dict[str, Any]:
    """What a Ray cluster offers: nodes with CPUs, GPUs and custom resources, and the pools a run would place."""
    from tools.extras import require_extra

    require_extra("ray", "unveil cluster")
    from runner import ray as ray_engine

    started = ray_engine.connect(address or env_str(ADDRESS_ENV))
    try:
        return ray_engine.describe_cluster()
    finally:
        if started:
            import ray

            ray.shutdown()
