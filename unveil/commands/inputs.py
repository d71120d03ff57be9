"""What commands name as their inputs, below the commands that use them (`detect`, `evaluate`) and the dry run's
estimate (`run_estimate`), so that none of them imports another: the bundled example pairs, the `--dataset` values
of `evaluate`, and the error of a run file or an input it names."""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.errors import CommandLineError, UnveilError

# The pairs `unveil detect` runs without --input (the README's first command).
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pairs.jsonl"


class RunFileError(UnveilError, ValueError):
    """A run file that cannot be read or names what no command takes."""


def _looks_like_format(prefix: str) -> bool:
    """Whether the part of a --dataset value before ':' reads as a format name (a word, not a drive letter or a
    path)."""
    return len(prefix) > 1 and prefix.replace("_", "").replace("-", "").isalnum()


def named_datasets(args: argparse.Namespace) -> dict[str, tuple[Path, str]]:
    """The datasets of `--dataset NAME=FILE` / `FMT:FILE` (with `--format`), by name: each file and its format;
    a bad value is a `CommandLineError` naming it."""
    from evaluation.datasets import FORMATS

    formats = args.format or ["auto"]
    if len(formats) not in (1, len(args.dataset)):
        raise CommandLineError(f"--format: give one value or one per --dataset ({len(args.dataset)})")
    out: dict[str, tuple[Path, str]] = {}
    for k, item in enumerate(args.dataset):
        name, sep, path = item.partition("=")
        if not sep:
            path, name = item, ""
        fmt = formats[k] if len(formats) > 1 else formats[0]
        prefix, colon, rest = path.partition(":")  # FMT:FILE, e.g. siuo:data/siuo_gen.json
        if colon and prefix in FORMATS:
            fmt, path = prefix, rest
        elif colon and _looks_like_format(prefix) and not Path(path).exists():
            # `bench:data/bench.jsonl` was read as a file of that name and reported "not found"
            raise CommandLineError(
                f"--dataset {item!r}: {prefix!r} is not a format; formats: {', '.join(FORMATS)} "
                "(or give the file alone: its format is detected)"
            )
        name = name or f"{Path(path).parent.name}/{Path(path).stem}".strip("/")
        if name in out:
            raise CommandLineError(f"--dataset: the name {name!r} is used twice; label them NAME=FILE")
        out[name] = (Path(path), fmt)
    return out
