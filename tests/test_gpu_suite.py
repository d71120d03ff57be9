"""`bench/gpu_suite.py --tiny`: the GPU suite's own code on CPU (tiny models): every part runs, one table is printed
last, and one JSON names the commit, the machine and the versions of the packages the numbers depend on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_tiny_suite_runs_every_part_and_writes_one_json(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "suite.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    cmd = [sys.executable, "bench/gpu_suite.py", "--tiny", "--budget-s", "840", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["versions"]) == {"torch", "diffusers", "transformers", "trl", "ray"}
    assert report["commit"] and report["machine"].startswith("CPU") and report["tiny"] is True
    assert {name: part["status"] for name, part in report["parts"].items()} == {"t2i": "ok", "grpo": "ok",
                                                                                "scale": "ok"}
    whats = [row["what"] for row in report["rows"]]
    assert "batched eager" in whats and "GRPO step, 1 GPU" in whats
    scale = [row for row in report["rows"] if row["part"] == "scale"]
    assert [row["what"].split(",")[0] for row in scale] == ["local engine", "ray engine"]
    assert "records equal" in scale[1]["result"]
    # The table is the last thing printed.
    lines = proc.stdout.strip().splitlines()
    assert lines[-len(report["rows"]) - 2].split() == ["part", "what", "result", "target"]


def test_unknown_parts_are_refused() -> None:
    proc = subprocess.run([sys.executable, "bench/gpu_suite.py", "--parts", "t2i,fly"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown part(s) fly" in proc.stderr
