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


def start_refine(tmp_path: Path, sd: str, clip: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Start one `unveil refine --score` run on the tiny models, with its own image store under `tmp_path`; the
    process and the file its stderr goes to (a file, not a pipe, so neither run can block on a full pipe)."""
    argv = [sys.executable, "-m", "unveil.cli", "refine", "a gory battlefield", "--generator", f"diffusers:{sd}"]
    argv += ["--refiner", f"scripted:{ROOT / 'examples/studio/ipr-answers.json'}", "--size", "32", "--steps", "2"]
    argv += ["--t-max", "1", "--cache", "off", "--score", "--scorers", "q16", "--q16-clip-model", clip, *extra]
    name = "run" + "".join(extra)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "UNVEIL_IMAGE_STORE": str(tmp_path / name)}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    log = tmp_path / f"{name}.stderr.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp_path)
    return proc, log


def stderr_of(run: tuple[subprocess.Popen[bytes], Path]) -> str:
    """The stderr of a run `start_refine` started, once it ended with exit 0 (killed after 300 s)."""
    proc, log = run
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    return err


def test_no_progress_silences_the_loading_bars_and_the_default_shows_them(tmp_path: Path) -> None:
    from tests.tiny import build_tiny_clip, build_tiny_sd

    sd, clip = build_tiny_sd(tmp_path / "sd"), build_tiny_clip(tmp_path / "clip")
    # Both processes at once: each is mostly its imports (torch, diffusers, transformers), and neither reads
    # what the other writes (each has its own image store; the response cache is off).
    quiet_run, shown_run = start_refine(tmp_path, sd, clip, "--no-progress"), start_refine(tmp_path, sd, clip)
    try:
        quiet = stderr_of(quiet_run)
    finally:
        shown = stderr_of(shown_run)  # waited for even when the first run failed
    assert not [bar for bar in BARS if bar in quiet], quiet[-3000:]
    assert all(bar in shown for bar in BARS), shown[-3000:]
