"""Secrets: recognisable fake API keys (`OPENAI_API_KEY`, `UNVEIL_OPENAI_API_KEY`, `TAVILY_API_KEY`) are planted,
and `unveil detect`, `refine` and `generate` (with `--export`) run through the fault server with faults, a sample
whose every call fails, and a 401 whose message echoes the key back, with verbose logging. The key must reach
the server (so the scan means something) and must not appear in any file the runs write: outputs, the response
cache, checkpoints, the image store, datasets and their Parquet export, HOME, and the captured stdout/stderr
logs -- neither whole nor as a distinctive piece, in plain text or base64."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faultserver import FaultServer, UnveilAnswers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


def _needles(key: str) -> list[bytes]:
    """The key, its secret tail and pieces of it, and their base64 forms."""
    tail = key.split("canary-", 1)[1]
    pieces = [key, tail, tail[:12], tail[-12:]]
    out = [p.encode() for p in pieces]
    out += [base64.b64encode(key.encode()), base64.b64encode(tail.encode())[:16]]
    return out


def scan(root: Path, keys: list[str]) -> list[str]:
    """Files under root holding any piece of any key."""
    hits = []
    needles = [n for k in keys for n in _needles(k)]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path.relative_to(root)}: {n[:12]!r}" for n in needles if n in data]
    return hits


def plant_keys(run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """Fake keys of three shapes and an environment that plants them (and keeps every write under run_dir)."""
    openai_key = f"sk-unveil-canary-{secrets.token_hex(12)}"
    # a self-hosted server's token need not look like an OpenAI key, so redaction cannot rely on the "sk-" shape
    unveil_key = f"vllm-token-unveil-canary-{secrets.token_hex(12)}"
    tavily_key = f"tvly-unveil-canary-{secrets.token_hex(12)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_")}
    env.update(
        {
            "OPENAI_API_KEY": openai_key,
            "UNVEIL_OPENAI_API_KEY": unveil_key,
            "TAVILY_API_KEY": tavily_key,
            "HOME": str(run_dir / "home"),
            "UNVEIL_CACHE": str(run_dir / "cache" / "responses.sqlite"),
            "UNVEIL_IMAGE_STORE": str(run_dir / "store"),
            "UNVEIL_BACKOFF_BASE": "0.01",
            "UNVEIL_REQUEST_TIMEOUT": "2",
            "UNVEIL_MAX_RETRIES": "2",
            "PYTHONPATH": str(ROOT),
            "LANGSMITH_TRACING": "false",
        }
    )
    return [openai_key, unveil_key, tavily_key], env


def run_logged(run_dir: Path, name: str, args: list[str], env: dict[str, str]) -> None:
    """Run `unveil -v ARGS`, keeping its stdout and stderr as files of the run (they are scanned too)."""
    proc = subprocess.run(
        [sys.executable, "-m", "unveil.cli", "-v", *args], cwd=ROOT, env=env, capture_output=True, timeout=240
    )
    (run_dir / f"{name}.stdout.log").write_bytes(proc.stdout)
    (run_dir / f"{name}.stderr.log").write_bytes(proc.stderr)
    assert proc.returncode in (0, 1, 2), proc.stderr.decode(errors="replace")[-3000:]


def _jsonl(path: Path) -> dict[str, dict]:
    return {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()}


@pytest.mark.slow(
    reason="its subject is everything real `unveil detect` and `unveil refine` processes write, their captured stdout "
    "and stderr included, through the tiny pipeline and a fault server that hangs: a subprocess entry point; "
    "tests/agents/test_secrets_urls.py keeps a key scan of a real `unveil detect` in the fast loop"
)
def test_detect_and_refine_never_write_a_key(tmp_path: Path, sd_folder: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    keys, env = plant_keys(run_dir)
    pairs = run_dir / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"id": "ok1", "image_description": "a kitchen", "text": "baking day"},
                {"id": "ok2", "image_description": "a garden", "text": "sunny"},
                {"id": "fails", "image_description": "a room", "text": "x UNVEIL-POISON"},
                {"id": "rejected", "image_description": "a room", "text": "x UNVEIL-REJECT-KEY"},
            ]
        )
    )
    prompts = run_dir / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"id": "p1", "prompt": "a grenade on a table"},
                {"id": "p2", "prompt": "a garden UNVEIL-REJECT-KEY"},
                {"id": "p3", "prompt": "a cat UNVEIL-POISON"},
            ]
        )
    )
    with FaultServer(UnveilAnswers(), rate=0.3, seed=5, hang_s=0.8) as server:
        common = ["--model", server.spec(), "--no-progress"]
        run_logged(
            run_dir,
            "detect",
            [
                "detect",
                "--method",
                "tag",
                "--l-max",
                "2",
                "--input",
                str(pairs),
                "--output",
                str(run_dir / "detect.jsonl"),
                *common,
            ],
            env,
        )
        run_logged(
            run_dir,
            "refine",
            [
                "refine",
                "--input",
                str(prompts),
                "--output",
                str(run_dir / "refine.jsonl"),
                "--generator",
                f"diffusers:{sd_folder}",
                "--size",
                "32",
                "--steps",
                "2",
                "--t-max",
                "1",
                *common,
            ],
            env,
        )
    # The key really was used on the wire, and the server echoed it back in 401 answers.
    assert f"Bearer {keys[1]}" in server.auth and server.stats["fault:401"] > 0
    # Runs produced errors, including the refused-key ones, so error paths were exercised.
    detect = _jsonl(run_dir / "detect.jsonl")
    assert detect["ok1"]["status"] == "ok" and detect["fails"]["status"] == "failed"
    assert "Incorrect API key" in detect["rejected"]["error"]
    refine = _jsonl(run_dir / "refine.jsonl")
    assert refine["p2"]["status"] == "failed" and refine["p1"]["status"] == "ok"
    assert (run_dir / "cache" / "responses.sqlite").is_file() and list((run_dir / "store").rglob("*.png"))
    assert b"Incorrect API key" in (run_dir / "detect.stderr.log").read_bytes()  # the echo was logged ...
    hits = scan(run_dir, keys)
    assert hits == [], hits  # ... but never the key
