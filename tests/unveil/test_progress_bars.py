"""`--no-progress` silences the libraries' weight-loading bars too (issue 45): diffusers' "Loading pipeline
components" bar kept printing, since diffusers reads no variable and was imported after the switch was set. By
default the bars stay: they are the only sign of life while a large model loads.

A real `unveil refine` process renders with the tiny pipeline and scores with a tiny CLIP (transformers' "Loading
weights"), once with the flag and once without.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow(reason="two unveil refine processes that load a diffusers pipeline and a CLIP")
BARS = ("Loading pipeline components", "Loading weights")


def refine(tmp_path: Path, sd: str, clip: str, *extra: str) -> str:
    """The stderr of one `unveil refine --score` run on the tiny models."""
    argv = [sys.executable, "-m", "unveil.cli", "refine", "a gory battlefield", "--generator", f"diffusers:{sd}"]
    argv += ["--refiner", f"scripted:{ROOT / 'examples/studio/ipr-answers.json'}", "--size", "32", "--steps", "2"]
    argv += ["--t-max", "1", "--cache", "off", "--score", "--scorers", "q16", "--q16-clip-model", clip, *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "UNVEIL_IMAGE_STORE": str(tmp_path / "s")}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_no_progress_silences_the_loading_bars_and_the_default_shows_them(tmp_path: Path) -> None:
    from tests.tiny import build_tiny_clip, build_tiny_sd

    sd, clip = build_tiny_sd(tmp_path / "sd"), build_tiny_clip(tmp_path / "clip")
    quiet = refine(tmp_path, sd, clip, "--no-progress")
    assert not [bar for bar in BARS if bar in quiet], quiet[-3000:]
    shown = refine(tmp_path, sd, clip)
    assert all(bar in shown for bar in BARS), shown[-3000:]
