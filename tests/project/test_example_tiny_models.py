"""`examples/studio/make_tiny_generator.py` writes the tiny CLIP and BLIP that offline scoring needs (issue 45:
only `tests/tiny.py` built them), and the flags it prints score a refinement offline with them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from unveil.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow(reason="builds three tiny models with the example's script and renders with them")


def test_the_example_script_writes_the_scorers_models_and_their_flags_score_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = ROOT / "examples" / "studio" / "make_tiny_generator.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "tiny-sd")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    generator = lines[-1]  # the generator spec stays the last line (the Studio examples' test reads it there)
    assert generator == f"diffusers:{tmp_path / 'tiny-sd'}"
    assert (tmp_path / "tiny-clip" / "open_clip_config.json").is_file()
    assert (tmp_path / "tiny-blip" / "config.json").is_file()
    flags = re.search(r"unveil refine flags: (.+)", proc.stdout)
    env = re.search(r"unveil refine environment: (\w+)=(\S+)", proc.stdout)
    assert flags is not None and env is not None
    assert f"--blip-model {tmp_path / 'tiny-blip'}" in proc.stdout  # evaluate ipr's flags

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may come from the hub
    monkeypatch.setenv(env.group(1), env.group(2))
    argv = ["refine", "a gory battlefield", "--refiner", f"scripted:{ROOT / 'examples/studio/ipr-answers.json'}"]
    argv += ["--generator", generator, "--size", "32", "--steps", "2", "--t-max", "2", "--cache", "off"]
    argv += ["--image-store", str(tmp_path / "store"), "--json", *flags.group(1).split()]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for step in out["trajectory"]:
        (row,) = step["scores"]
        assert {"q16", "clip", "blip"} <= set(row)
