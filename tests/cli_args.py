"""Argument lists for the `unveil` commands the tests run, written once.

Each builder takes the response cache setting as an argument: `cache=None` leaves the flag out, so the run uses the
default cache a user gets; `cache="off"` is for tests that must see every model call happen.
"""

from __future__ import annotations

import sys
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


def refusal(argv: list[str], capsys: object) -> str:
    """What `unveil ARGV` says when it refuses to run: the one error line the CLI prints (exit 1, no traceback).

    A command that still ends with `SystemExit(message)` (before it reports through `unveil.cli.report_error`) is
    accepted as well, its message returned, so the assertion is about the words either way."""
    import pytest

    from unveil.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        assert isinstance(exc.code, str), exc.code
        return exc.code
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert code == 1 and "Traceback" not in err and "internal error" not in err, (code, err[-2000:])
    return err if err else pytest.fail("no error printed")


def run_cli(argv: list[str]) -> int:
    """Run the `unveil` CLI as the console script does: a `SystemExit` with a message is exit 1, the message on
    stderr."""
    from unveil.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return int(exc.code or 0)
