"""`unveil cluster info`: what a Ray cluster offers (nodes, CPUs, GPUs) and the actors `--engine ray` would place."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `cluster` subcommand."""
    p = sub.add_parser(
        "cluster",
        help="inspect the Ray cluster that --engine ray runs on",
        description="See docs/scale.md for starting a cluster and submitting jobs.",
    )
    csub = p.add_subparsers(dest="cluster_command", required=True)
    info = csub.add_parser("info", help="nodes, GPUs/CPUs, and the actor pools Unveil would place")
    info.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="auto or ray://host:10001 (default $UNVEIL_RAY_ADDRESS, else a new local cluster)",
    )
    info.add_argument("--json", action="store_true", help="print the description as JSON")
    info.set_defaults(func=run_info)


def format_info(info: dict[str, Any]) -> str:
    """The cluster description as a few readable lines."""
    lines = [f"cluster: {len(info['nodes'])} node(s), {info['cpus']:g} CPUs, {info['gpus']:g} GPUs"]
    for node in info["nodes"]:
        extra = ", ".join(f"{k}={v:g}" for k, v in sorted(node["resources"].items()))
        lines.append(
            f"  node {str(node['node_id'])[:12]} at {node['address']}: {node['cpus']:g} CPUs, "
            f"{node['gpus']:g} GPUs" + (f", {extra}" if extra else "")
        )
    for name, pool in info["pools"].items():
        res = ", ".join(f"{k}={v:g}" for k, v in sorted(pool["resources_each"].items()))
        lines.append(
            f"{name} pool: {pool['actors']} actor(s), {pool['gpus_each']:g} GPU and {pool['cpus_each']:g} "
            f"CPU each" + (f", needs {res}" if res else "") + " (one pool per text-to-image spec)" * (name == "render")
        )
    lines.append(
        "limiter: one named actor 'unveil-limits' (namespace unveil) holds UNVEIL_MAX_CONCURRENCY / "
        "UNVEIL_RPM per model backend for every driver"
    )
    if info["named_actors"]:
        lines.append("running now: " + ", ".join(info["named_actors"]))
    return "\n".join(lines)


def run_info(args: argparse.Namespace) -> int:
    """Run `unveil cluster info`."""
    from runner.engine import cluster_info

    info = cluster_info(args.ray_address)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0
