"""One gateway call as a record: what it asks (role, spec, parameters), its cache key, the tokens and retries it
has spent, and the usage and details booked for it; and the result a call returns (`CallResult`).

The gateway (`agents.gateway`) makes the calls; this module is what it keeps and books about each one."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from agents.cache import cache_key
from agents.call_log import call_details
from agents.spec import ModelSpec
from agents.usage import RunUsage, cost_of, single_call_usage

T = TypeVar("T")


@dataclass
class CallResult(Generic[T]):
    """A validated answer, the raw text it came from, and the call's usage."""

    value: T
    raw: str
    usage: RunUsage
    cache_hit: bool = False


@functools.lru_cache(maxsize=512)
def json_schema(schema: type[BaseModel]) -> dict[str, object]:
    """`schema`'s JSON schema, built once per class: pydantic builds it anew on every call (1 to 2 ms, on every
    structured call, for its cache key). Shared: read it, never change it."""
    return schema.model_json_schema()


def _message_key(messages: list[BaseMessage]) -> list[dict[str, object]]:
    return [{"type": m.type, "content": m.content} for m in messages]


@dataclass
class GatewayCall:
    """One gateway call in progress: what it is, its cache key, and the tokens and retries it has spent so far."""

    role: str
    usage_role: str
    spec: ModelSpec
    params: dict[str, object]
    key: str | None = None
    fingerprint: str = ""
    in_tok: int = 0
    out_tok: int = 0
    retries: int = 0
    started: float = 0.0  # time.monotonic() when the call began: its latency in the call details

    def count_tokens(self, msg: object) -> None:
        """Add an answer's token usage (every attempt is paid for, repaired or not)."""
        meta = getattr(msg, "usage_metadata", None) or {}
        self.in_tok += int(meta.get("input_tokens", 0))
        self.out_tok += int(meta.get("output_tokens", 0))

    def set_key(
        self, messages: list[BaseMessage], output: dict[str, object], *, per_role: bool, seed: int | None
    ) -> None:
        """Key the call for the response cache: the model by its content fingerprint (scripts, GGUF, adapters), the
        messages, the answer's schema, the parameters; the role only where answers are per role (scripted), and the
        sample seed (in the key only, never sent as a model parameter, which some backends refuse)."""
        self.key = cache_key(
            spec=f"{self.spec}#{self.fingerprint}",
            messages=_message_key(messages),
            schema=output,
            params={
                **self.params,
                "role": self.role if per_role else "",
                **({"sample_seed": seed} if seed is not None else {}),
            },
        )

    def hit_usage(self) -> RunUsage:
        """The usage of the call answered from the cache: nothing spent."""
        return single_call_usage(
            self.usage_role, input_tokens=0, output_tokens=0, cost_usd=0.0, cache_hit=True, retries=0, key=self.key
        )

    def spent_usage(self, repairs: int = 0) -> RunUsage:
        """The call's tokens, cost and retries (transport retries plus `repairs`), booked on its role."""
        return single_call_usage(
            self.usage_role,
            input_tokens=self.in_tok,
            output_tokens=self.out_tok,
            cost_usd=cost_of(self.spec.provider, self.spec.model, self.in_tok, self.out_tok),
            cache_hit=False,
            retries=self.retries + repairs,
            key=self.key,
        )

    def details(self, messages: list[BaseMessage], usage: RunUsage) -> dict[str, Any]:
        """The call's details kept in its cache entry, for `unveil calls` (`agents.call_log`)."""
        return call_details(
            role=self.role,
            spec=self.spec,
            messages=messages,
            params=self.params,
            usage=dict(usage),
            started=self.started,
        )
