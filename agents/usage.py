"""Token and cost accounting: per call, merged per role and per run.

Prices are USD per million tokens, looked up by `provider:model` then by model name: each provider profile's
`prices` (`agents.providers.profiles`), which users override or extend with a JSON file named by `$UNVEIL_PRICES`
(`{"openai:gpt-4.1": [2.0, 8.0], ...}`). A provider whose profile is `free` (local and scripted models, a local
Ollama) costs nothing.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import NotRequired  # pydantic needs these on Python < 3.12 (Studio schemas)

from typing_extensions import TypedDict

from agents.providers.profiles import PROFILES, provider_profile
from tools.env import env_str
from tools.safe_files import MAX_SMALL_FILE_BYTES, read_regular


class RoleUsage(TypedDict):
    """Counts for one role (or a whole run)."""

    calls: int
    cache_hits: int
    retries: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class CallRef(TypedDict):
    """One model call of a sample: its response-cache key (the call's details are kept in that entry, see
    `agents.gateway`) and whether the cache answered it."""

    key: str
    cache_hit: bool


class RunUsage(TypedDict):
    """Usage of a run: totals and a breakdown by role; a sample's usage also lists its calls, in order (`calls`:
    absent without a response cache, which is where their details live)."""

    total: RoleUsage
    by_role: dict[str, RoleUsage]
    calls: NotRequired[list[CallRef]]


def empty_role_usage() -> RoleUsage:
    """All-zero counts."""
    return RoleUsage(calls=0, cache_hits=0, retries=0, input_tokens=0, output_tokens=0, cost_usd=0.0)


def empty_usage() -> RunUsage:
    """An empty run usage record."""
    return RunUsage(total=empty_role_usage(), by_role={})


def _add(a: RoleUsage, b: RoleUsage) -> RoleUsage:
    return RoleUsage(
        calls=a["calls"] + b["calls"],
        cache_hits=a["cache_hits"] + b["cache_hits"],
        retries=a["retries"] + b["retries"],
        input_tokens=a["input_tokens"] + b["input_tokens"],
        output_tokens=a["output_tokens"] + b["output_tokens"],
        cost_usd=round(a["cost_usd"] + b["cost_usd"], 8),
    )


def merge_usage(left: RunUsage | None, right: RunUsage | None) -> RunUsage:
    """Add two usage records; also the LangGraph reducer for a state's `usage` channel."""
    left = left or empty_usage()
    right = right or empty_usage()
    by_role = dict(left["by_role"])
    for role, counts in right["by_role"].items():
        by_role[role] = _add(by_role.get(role, empty_role_usage()), counts)
    out = RunUsage(total=_add(left["total"], right["total"]), by_role=by_role)
    calls = [*left.get("calls", []), *right.get("calls", [])]
    if calls:
        out["calls"] = calls
    return out


def without_calls(usage: RunUsage) -> RunUsage:
    """`usage` without its list of calls: the counts a total over many samples keeps (the list would only grow)."""
    return RunUsage(total=usage["total"], by_role=usage["by_role"])


def single_call_usage(
    role: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cost_usd: float,
    cache_hit: bool,
    retries: int,
    key: str | None = None,
) -> RunUsage:
    """The usage record of one gateway call (its repairs included), naming the call by its cache `key` if any."""
    counts = RoleUsage(
        calls=0 if cache_hit else 1 + retries,
        cache_hits=1 if cache_hit else 0,
        retries=retries,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost_usd,
    )
    usage = RunUsage(total=dict(counts), by_role={role: counts})  # type: ignore[typeddict-item]
    if key:
        usage["calls"] = [CallRef(key=key, cache_hit=cache_hit)]
    return usage


@lru_cache(maxsize=1)
def price_table() -> dict[str, tuple[float, float]]:
    """The default prices updated by `$UNVEIL_PRICES`, if set."""
    table = {f"{p.name}:{model}": price for p in PROFILES.values() for model, price in p.prices.items()}
    path = env_str("UNVEIL_PRICES")
    if path:
        data = read_regular(path, MAX_SMALL_FILE_BYTES, what="UNVEIL_PRICES file")  # regular, capped
        for key, value in json.loads(data.decode("utf-8")).items():
            table[key] = (float(value[0]), float(value[1]))
    return table


def cost_of(provider: str, model: str, input_tokens: int, output_tokens: int) -> float:
    """USD cost of a call; unknown paid models cost 0 and are visible as such in the usage record."""
    if provider_profile(provider).free:
        return 0.0
    table = price_table()
    price = table.get(f"{provider}:{model}") or table.get(model)
    if price is None:
        return 0.0
    return round((input_tokens * price[0] + output_tokens * price[1]) / 1_000_000, 8)
