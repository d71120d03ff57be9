"""The raw calls of a sample: what each model call sent and got back, kept in its response-cache entry.

The gateway stores, beside a call's answer, the call's details (`call_details`): its role, the model spec (its
credentials redacted), the messages exactly as sent (an image as its SHA-256 and size, not its bytes), the
parameters, tokens, cost, latency and retries. A sample's record lists the cache keys of its calls in order
(`usage.calls`, see `agents.usage.CallRef`), so `sample_calls` finds every call of a sample again, for
`unveil calls` and the web app. Everything read back passes through `tools.redact.redact_secrets`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from agents.cache import ResponseCache
from agents.spec import ModelSpec
from tools.redact import redact_secrets

DETAILS = "call"  # the key of a cache entry's call details


def _block(block: Any) -> Any:
    """A content block as stored: an inline image becomes its SHA-256 and size (the bytes are in the image store)."""
    if not isinstance(block, dict) or block.get("type") != "image_url":
        return block
    url = str((block.get("image_url") or {}).get("url", ""))
    head, _, data = url.partition(",")
    if not head.startswith("data:"):
        return {"type": "image", "url": redact_secrets(url)}
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        raw = data.encode("utf-8")
    return {"type": "image", "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw), "media": head[5:]}


def stored_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The messages of a call as stored: role and content, images by hash."""
    out = []
    for m in messages:
        content = [_block(b) for b in m.content] if isinstance(m.content, list) else m.content
        out.append({"role": m.type, "content": content})
    return out


def call_details(
    *,
    role: str,
    spec: ModelSpec,
    messages: Sequence[BaseMessage],
    params: dict[str, Any],
    usage: dict[str, Any],
    started: float,
) -> dict[str, Any]:
    """What a cache entry keeps about the call that paid for it (see the module docstring)."""
    total = usage["total"]
    return {
        "role": role,
        "model": str(spec),  # the display form: a base URL's credentials are redacted
        "messages": stored_messages(messages),
        "params": params,
        "input_tokens": total["input_tokens"],
        "output_tokens": total["output_tokens"],
        "cost_usd": total["cost_usd"],
        "retries": total["retries"],
        "latency_s": round(time.monotonic() - started, 3),
        "at": round(time.time(), 3),
    }


def sample_calls(usage: Any, cache: ResponseCache | None) -> list[dict[str, Any]]:
    """Every call a record's `usage` lists, in order, with its details and raw answer from `cache` (a call whose
    entry is gone says so), each redacted. Empty for a record without calls (made with the cache off)."""
    refs = usage.get("calls") if isinstance(usage, dict) else None
    out: list[dict[str, Any]] = []
    for n, ref in enumerate(refs if isinstance(refs, list) else [], 1):
        if not isinstance(ref, dict) or not isinstance(ref.get("key"), str):
            continue
        entry = cache.get(ref["key"]) if cache is not None else None
        call: dict[str, Any] = {"n": n, "key": ref["key"], "cache_hit": bool(ref.get("cache_hit"))}
        if entry is None:
            call["missing"] = "not in this response cache (another cache file, or cleared)"
        else:
            details = entry.get(DETAILS)
            call.update(details if isinstance(details, dict) else {"missing": "stored before calls were recorded"})
            call["raw"] = entry.get("raw", "")
            if "parsed" in entry:
                call["parsed"] = entry["parsed"]
        out.append(_redacted(call))
    return out


def _redacted(value: Any) -> Any:
    """`value` with every string passed through `redact_secrets` (keys and tokens never leave the cache)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    return value
