"""The gateway's settings (`GatewaySettings`), declared once with their environment variables and bounds."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.cache import default_cache_path
from agents.limits import check_limits
from agents.providers.profiles import METHOD_ORDER
from tools.env import SettingError, check_minimum, env_float, env_int, env_str


@dataclass
class GatewaySettings:
    """Knobs of the gateway; defaults come from the environment (a bad value is an error naming its variable)."""

    cache_path: str | None = field(default_factory=lambda: str(p) if (p := default_cache_path()) else None)
    max_repairs: int = field(default_factory=lambda: env_int("UNVEIL_MAX_REPAIRS", 2, minimum=0) or 0)
    max_retries: int = field(default_factory=lambda: env_int("UNVEIL_MAX_RETRIES", 4, minimum=0) or 0)
    backoff_base: float = field(default_factory=lambda: env_float("UNVEIL_BACKOFF_BASE", 1.0, minimum=0) or 0.0)
    backoff_max: float = 30.0
    max_concurrency: int | None = None
    rpm: float | None = None
    structured_method: str | None = field(default_factory=lambda: env_str("UNVEIL_STRUCTURED_METHOD"))

    def __post_init__(self) -> None:
        check_minimum("max_repairs", self.max_repairs, 0)
        check_minimum("max_retries", self.max_retries, 0)
        check_minimum("backoff_base", self.backoff_base, 0)
        check_limits(self.max_concurrency, self.rpm)
        if self.structured_method is not None and self.structured_method not in METHOD_ORDER:
            raise SettingError(
                f"UNVEIL_STRUCTURED_METHOD={self.structured_method!r}: expected one of {', '.join(METHOD_ORDER)}"
            )
