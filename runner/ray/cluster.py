"""Connecting to a Ray cluster (with a deadline), the engine's session, and what `unveil cluster info` shows."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import ray

from agents.limits import set_shared_limiter
from agents.providers.registry import set_remote_chat_models
from runner.engine_settings import ADDRESS_ENV
from runner.ray.limiter import RayLimiter, limiter_actor
from runner.ray.pool import cluster_gpus, cluster_totals
from runner.ray.remote import RayChatModels, RayGenerators, RayScoring
from runner.ray.settings import (
    CONNECT_TIMEOUT_S,
    NAMESPACE,
    env_seconds,
    render_settings,
    scorer_settings,
    vlm_settings,
)
from tools.env import SettingError, env_str, set_default
from tools.errors import UnveilError
from tools.scorers.score import set_remote_scoring
from tools.t2i.registry import set_remote_generators


class ClusterUnreachableError(UnveilError, ConnectionError):
    """The Ray cluster a run names (`--ray-address`, `UNVEIL_RAY_ADDRESS`) cannot be reached; the message names the
    address and how to fix it."""


def connect(address: str | None) -> bool:
    """Connect this process to a Ray cluster; returns whether this call did (False: it was connected already).

    `address` None or "": the cluster named by `RAY_ADDRESS`, else one `ray start` runs on this machine, else a new
    local one (token authentication on, Ray's default). "auto": an existing cluster; `ray://host:10001`: Ray
    Client. The project's folder travels to the workers of a remote cluster with `ray job submit --working-dir`.
    A cluster that cannot be reached, or does not answer within `UNVEIL_RAY_CONNECT_TIMEOUT` seconds (default 60),
    is one `ConnectionError` naming the address (Ray itself retries for many minutes).
    """
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "logging_level": logging.WARNING}
    if not address:
        kwargs["include_dashboard"] = False
        # A cluster Unveil starts itself sends Ray no usage statistics (the user may still set the variable).
        set_default("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(**kwargs)
        return True
    timeout = env_seconds("UNVEIL_RAY_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)
    probe_address(address, timeout)
    kwargs["address"] = address
    failed: list[BaseException] = []
    done = threading.Event()

    def init() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    # In a thread, so that the caller can stop waiting: Ray gives no deadline of its own for the first contact.
    threading.Thread(target=init, name="unveil-ray-connect", daemon=True).start()
    if not done.wait(timeout):
        raise ClusterUnreachableError(
            f"Ray cluster at {address!r} (--ray-address / {ADDRESS_ENV}) did not answer within "
            f"{timeout:g} s (UNVEIL_RAY_CONNECT_TIMEOUT): is it a Ray head node's GCS port "
            "(6379 by default), or ray://HOST:10001 for Ray Client?"
        )
    if failed:
        raise ClusterUnreachableError(
            f"could not connect to the Ray cluster at {address!r} (--ray-address / {ADDRESS_ENV}): "
            f"{ray_reason(failed[0], address)}"
        ) from failed[0]
    return True


def ray_reason(exc: BaseException, address: str) -> str:
    """Ray's reason for a failed connection, in Unveil's words where Ray's name its own flags (`--address`, which
    `unveil` has not: its flag is --ray-address)."""
    text = str(exc)
    if "Could not find any running Ray instance" in text:
        where = " on this machine: start one with `ray start --head`, or give a cluster's HOST:PORT"
        return "no running Ray cluster was found" + (where if address == "auto" else "")
    kept = [part for part in re.split(r"(?<=\.)\s+", text) if "--address" not in part]
    return " ".join(kept) or text


def probe_address(address: str, timeout: float) -> None:
    """Refuse a `HOST:PORT` or `ray://HOST:PORT` address that is malformed or where nothing accepts a connection,
    naming it (`auto` and other URL schemes are left to Ray)."""
    target = address.strip()
    if target.startswith("ray://"):
        target = target.removeprefix("ray://")
    elif target == "auto" or "://" in target:
        return
    host, sep, port = target.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingError(f"Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=min(timeout, 10.0)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterUnreachableError(
            f"cannot reach the Ray cluster at {address!r} (--ray-address / {ADDRESS_ENV}): {reason}"
        ) from None


@contextlib.contextmanager
def session(address: str | None) -> Iterator[None]:
    """Connect, route rendering, scoring and model API limits through the cluster, and undo all of it after."""
    started = connect(address)
    print(f"engine ray: {joined(address)}", file=sys.stderr, flush=True)
    generators, scoring, chat_models = RayGenerators(), RayScoring(), RayChatModels()
    set_remote_generators(generators)
    set_remote_scoring(scoring)
    set_remote_chat_models(chat_models)
    limiter = RayLimiter(limiter_actor())
    set_shared_limiter(limiter)
    try:
        yield
    finally:
        set_remote_generators(None)
        set_remote_scoring(None)
        set_remote_chat_models(None)
        set_shared_limiter(None)
        limiter.close()
        generators.close()
        scoring.close()
        chat_models.close()
        if started:
            ray.shutdown()


def joined(address: str | None) -> str:
    """Which cluster this process is connected to: its address, live nodes, GPUs and CPUs, and what found it (an
    `auto` or empty address joins whatever cluster runs on the machine without naming it)."""
    try:
        where = str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - Ray Client's context has no GCS address: the address given names it
        where = address or "?"
    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call, unused-ignore]
    nodes = len([node for node in listed if node.get("Alive")])
    totals = cluster_totals()
    if address == "auto":
        found = "--ray-address auto: the cluster running on this machine"
    elif not address:
        found = "no --ray-address: " + (
            "RAY_ADDRESS's cluster" if env_str("RAY_ADDRESS") else "a cluster running on this machine, else a new one"
        )
    else:
        found = f"--ray-address {address}"
    return (
        f"Ray cluster at {where} ({found}): {nodes} node(s), {totals.get('GPU', 0.0):g} GPU(s), "
        f"{totals.get('CPU', 0.0):g} CPU(s)"
    )


def describe_cluster() -> dict[str, Any]:
    """Nodes (CPUs, GPUs, custom resources), totals, Unveil's named actors, and the pools a run would place."""
    nodes = []
    # ray.nodes is unannotated: one dict per node (Alive, NodeID, NodeManagerAddress, Resources, ...).
    found: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call, unused-ignore]
    for node in found:
        if not node.get("Alive"):
            continue
        res = dict(node.get("Resources") or {})
        custom = {
            k: v
            for k, v in res.items()
            if k not in ("CPU", "GPU", "memory", "object_store_memory")
            and not k.startswith("node:")
            and not k.startswith("accelerator_type")
        }
        nodes.append(
            {
                "node_id": node.get("NodeID"),
                "address": node.get("NodeManagerAddress"),
                "cpus": res.get("CPU", 0.0),
                "gpus": res.get("GPU", 0.0),
                "resources": custom,
            }
        )
    gpus = cluster_gpus()
    pools = {}
    for settings in (render_settings(), scorer_settings(), vlm_settings()):
        size, per = settings.plan(gpus)
        pools[settings.pool] = {
            "actors": size,
            "gpus_each": per,
            "cpus_each": settings.cpus,
            "resources_each": settings.resources,
        }
    named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]
    totals = cluster_totals()
    return {
        "nodes": nodes,
        "cpus": totals.get("CPU", 0.0),
        "gpus": gpus,
        "pools": pools,
        "named_actors": sorted(a["name"] for a in named),
    }
