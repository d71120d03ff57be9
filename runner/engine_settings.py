"""The engine setting of a run (`--engine`, `--ray-address`) on its own, so the Ray engine can name the setting in its
errors without importing the module that imports it (`runner.engine` loads `runner.ray` lazily)."""

from __future__ import annotations

from dataclasses import dataclass

from tools.env import SettingError, env_str

ENGINES: tuple[str, ...] = ("local", "ray")
ADDRESS_ENV = "UNVEIL_RAY_ADDRESS"


@dataclass(frozen=True)
class EngineSettings:
    """Which engine runs a command, and for Ray which cluster (None: `$UNVEIL_RAY_ADDRESS`, else local)."""

    engine: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise SettingError(f"engine {self.engine!r}: use {' or '.join(ENGINES)}")

    def address(self) -> str | None:
        """The Ray address to connect to (the setting, else `$UNVEIL_RAY_ADDRESS`, else None)."""
        return self.ray_address or env_str(ADDRESS_ENV)
