"""The argparse types of the commands' flags: every numeric option is declared with one of these (a bound on each
side, refused with the bound), and a file to create with `new_file_path`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

# Upper bounds keep a typo (an extra few zeros) from allocating gigabytes before the first sample; they sit far
# above anything the papers or a real run use.
MAX_SCENES = 100_000  # scenes or samples named on the command line (`--n`, `--limit`)
MAX_CONCURRENCY = 1024
MAX_IMAGES = 64  # images per generation or prompt
MAX_SEED = 2**32 - 1
MAX_DEPTH = 16  # TAG layers (l_max)
MAX_STEPS = 1000  # refinements (t_max), diffusion steps
MAX_PIXELS = 4096  # image width or height


def bounded_int(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [lo, hi] (hi None: no upper bound), refused with the bound otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be at most {hi}, got {value}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its own messages
    return parse


def bounded_float(lo: float, hi: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] (`above`: strictly over lo); NaN and infinities are refused."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < lo or (above and value == lo):
            raise argparse.ArgumentTypeError(f"must be {'over' if above else 'at least'} {lo:g}, got {value:g}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"must be at most {hi:g}, got {value:g}")
        return value

    parse.__name__ = "number"
    return parse


def int_list(lo: int, hi: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated whole numbers, each in [lo, hi]."""
    one = bounded_int(lo, hi)

    def parse(text: str) -> list[int]:
        return [one(v.strip()) for v in text.split(",") if v.strip()]

    parse.__name__ = "list of whole numbers"
    return parse


positive_int = bounded_int(1, MAX_CONCURRENCY)  # --concurrency and other small counts
seed_int = bounded_int(0, MAX_SEED)
port_int = bounded_int(1, 65535)


def new_file_path(text: str) -> str:
    """An argparse type: a file to create in a folder that exists (no folders are made for it)."""
    from pathlib import Path

    folder = Path(text).expanduser().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the folder {str(folder)!r} does not exist")
    return text
