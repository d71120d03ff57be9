"""Fail fast, with the reason, when a Hugging Face model id can be neither read from the cache nor downloaded.

Without this check, loading an uncached model on a machine without network spends most of a minute in the hub
client's retry warnings before failing. `hub_access(repo_id, filename)` answers at once: the file is cached
(`"cached"`), the hub is reachable (`"online"`), or it raises `HubUnavailableError` naming why (the
`HF_HUB_OFFLINE` setting, or the connection error to the hub's host).
"""

from __future__ import annotations

import concurrent.futures
import functools
import socket
from typing import Literal

from tools.addresses import split_url
from tools.env import env_bool, env_str
from tools.errors import UnveilError

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0


class HubUnavailableError(UnveilError, OSError):
    """A hub model is not in the local cache and cannot be downloaded now."""


def hub_offline() -> bool:
    """Whether the user switched the hub off (`HF_HUB_OFFLINE`, or transformers' `TRANSFORMERS_OFFLINE`)."""
    return env_bool("HF_HUB_OFFLINE") or env_bool("TRANSFORMERS_OFFLINE")


@functools.lru_cache(maxsize=8)
def _probe(host: str, port: int) -> str | None:
    """None when a TCP connection to the hub opens, else the reason (cached per process: asked once). The name
    lookup is bounded too: without network a resolver can wait most of a minute, which `create_connection`'s timeout
    does not cover."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        addresses = pool.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM).result(PROBE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        return f"TimeoutError: the name {host} did not resolve within {PROBE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        pool.shutdown(wait=False)  # a resolver still waiting is left to finish on its own
    reason = f"OSError: no address for {host}"
    for family, kind, proto, _name, address in addresses:
        try:
            with socket.socket(family, kind, proto) as conn:
                conn.settimeout(PROBE_TIMEOUT_S)
                conn.connect(address)
                return None
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc}"
    return reason


def hub_access(repo_id: str, filename: str, *, what: str = "model") -> Literal["cached", "online"]:
    """How `repo_id` can be loaded now; raises `HubUnavailableError` at once when it cannot (and a `BadURLError`
    naming `HF_ENDPOINT` when that is not a usable http(s) URL)."""
    # Checked before the hub client is imported: it parses HF_ENDPOINT on import and fails with a bare ValueError.
    endpoint, host, port = split_url(env_str("HF_ENDPOINT") or DEFAULT_ENDPOINT, what="HF_ENDPOINT")
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id, filename)
    except Exception:  # noqa: BLE001 - a malformed id is the hub client's to report, with its own message
        cached = None
    if isinstance(cached, str):
        return "cached"
    if hub_offline():
        raise HubUnavailableError(
            f"{what} {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: download it on "
            "a machine with network access (the cache folder can be copied), or give a local folder"
        )
    port = port or (443 if endpoint.scheme == "https" else 80)
    reason = _probe(host, port)
    if reason is not None:
        raise HubUnavailableError(
            f"{what} {repo_id!r} is not in the local Hugging Face cache and the hub ({host}) cannot be reached "
            f"({reason}): download it where there is network access, or give a local folder"
        )
    return "online"
