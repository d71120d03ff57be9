"""Secrets through `unveil generate` (see `tests/unveil/test_secrets.py`): the CTD run with faults, web search attempted
with a planted Tavily key (it fails offline), LangGraph checkpoints, the dataset folder and its Parquet export;
then a run whose every request gets a 401 echoing the key. No file it writes holds any piece of a key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faultserver import FaultServer, UnveilAnswers
from tests.unveil.test_secrets import plant_keys, run_logged, scan


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


@pytest.mark.slow(
    reason="its subject is everything two real `unveil generate` processes write, their captured stdout and stderr "
    "included, through the tiny pipeline and a fault server that hangs: a subprocess entry point; "
    "tests/agents/test_secrets_urls.py keeps a key scan of a real `unveil detect` in the fast loop"
)
def test_generate_never_writes_a_key(tmp_path: Path, sd_folder: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    keys, env = plant_keys(run_dir)
    common = [
        "--model",
        "",
        "--no-progress",
        "--category",
        "drugs",
        "--generator",
        f"diffusers:{sd_folder}",
        "--width",
        "32",
        "--height",
        "32",
        "--steps",
        "2",
        "--max-rounds",
        "1",
    ]
    with FaultServer(UnveilAnswers(), rate=0.3, seed=5, hang_s=0.8) as server:
        common[1] = server.spec()
        run_logged(
            run_dir,
            "generate",
            [
                "generate",
                *common,
                "--n",
                "2",
                "--out",
                str(run_dir / "ds"),
                "--review",
                "auto",
                "--near-duplicate",
                "0",
                "--export",
            ],
            env,
        )
        # every request of this one carries the marker, so its scene fails on a 401 that echoes the key
        run_logged(
            run_dir,
            "generate-401",
            ["generate", *common, "--n", "1", "--out", str(run_dir / "ds-401"), "--scene", "UNVEIL-REJECT-KEY"],
            env,
        )
    assert f"Bearer {keys[1]}" in server.auth and server.stats["fault:401"] > 0
    assert (run_dir / "ds" / "checkpoints.sqlite").is_file() and (run_dir / "ds" / "dataset.jsonl").read_text()
    assert (run_dir / "ds" / "export" / "data.parquet").is_file()
    log = (run_dir / "generate.stderr.log").read_bytes()
    assert b"web search failed" in log and b"retry" in log  # the search was tried; faults were logged with -v
    assert b"Incorrect API key" in (run_dir / "ds-401" / "samples.jsonl").read_bytes()
    hits = scan(run_dir, keys)
    assert hits == [], hits
