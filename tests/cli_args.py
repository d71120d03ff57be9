"""Argument lists for the `unveil` commands the tests run, written once.

Each builder takes the response cache setting as an argument: `cache=None` leaves the flag out, so the run uses the
default cache a user gets; `cache="off"` is for tests that must see every model call happen.
"""

from __future__ import annotations

from pathlib import Path


def generate_args(out: Path, spec: str, t2i: str, *extra: str, n: int = 2, cache: str | None) -> list[str]:
    """`unveil generate` of `n` drug scenes into `out` with model `spec` and generator `t2i` at a tiny image size,
    without progress bars, web search or near-duplicate filtering; `extra` flags come last."""
    return [
        "generate",
        "--category",
        "drugs",
        "--n",
        str(n),
        "--out",
        str(out),
        "--model",
        spec,
        "--generator",
        t2i,
        "--width",
        "32",
        "--height",
        "32",
        "--steps",
        "2",
        *(["--cache", cache] if cache is not None else []),
        "--no-progress",
        "--no-web-search",
        "--near-duplicate",
        "0",
        *extra,
    ]
