"""Build each tiny model once per test run and give every caller its own copy.

A tiny model takes seconds to build (the CLIP vocabulary alone is 49,408 tokens) and dozens of tests build the same
one. With `TINY_MODEL_CACHE` set to a folder (tests/conftest.py sets it to a fresh temporary folder for each pytest
run, shared by the pytest-xdist workers), a builder decorated with `built_once` builds its model there the first
time and afterwards copies that folder to the path it is asked for: the caller still gets a folder of its own that
it may change, with the very files a build would have written (the builders are seeded, so a build is the same every
time). Without the variable (a bench script, a manual call) the builder builds as before.

Two workers asking at once both build; the first to rename its finished folder into place wins and the other's
copy is dropped, so no half-built folder is ever copied. The torch random state a build leaves behind is kept too
and restored after each copy, so code after a builder sees the same global random numbers either way.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "TINY_MODEL_CACHE"  # not UNVEIL_*: tests/conftest.py clears those for every test


def built_once(build: Callable[[str | os.PathLike[str]], str]) -> Callable[[str | os.PathLike[str]], str]:
    """Wrap a builder `build(path) -> str(path)` so it builds once per `TINY_MODEL_CACHE` and copies after."""

    @functools.wraps(build)
    def copy_of_the_one_build(path: str | os.PathLike[str]) -> str:
        root = os.environ.get(CACHE_ENV)
        if not root:
            return build(path)
        import torch

        master = Path(root) / build.__name__
        if not (master / "done").is_file():
            Path(root).mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{build.__name__}-", dir=root))
            build(staging / "model")
            torch.save(torch.get_rng_state(), staging / "rng.pt")
            (staging / "done").write_text("built\n", encoding="utf-8")
            try:
                staging.rename(master)
            except OSError:  # another worker's build got there first; both are the same seeded build
                shutil.rmtree(staging, ignore_errors=True)
        folder = Path(path)
        shutil.copytree(master / "model", folder, dirs_exist_ok=True)
        torch.set_rng_state(torch.load(master / "rng.pt"))
        return str(folder)

    return copy_of_the_one_build
