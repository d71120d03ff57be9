"""`unveil refine` killed with SIGKILL at random points (several seeds) and rerun: the final output equals an
uninterrupted run's (same ids, same content hashes), with no partial record, orphan image or temp file
(see `tests/runner/test_kill_support.py` for the precise meaning)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.runner.test_kill_support import (
    ROOT,
    hashes_by_id,
    kill_at_random_points,
    read_records,
    referenced_ids,
    store_ids,
    temp_files,
)

N = 8


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


def _setup(tmp_path: Path, sd: str) -> tuple[Path, list[str]]:
    # Rules (never used up) so answers do not depend on which sample asks first; every third prompt is refined
    # once, so samples make one or two images.
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "refiner.0": [
                    {"when": "grenade", "then": "<answer>a toy water pistol</answer>"},
                    {"when": "", "then": "keep"},
                ],
                "refiner": [{"when": "", "then": "keep"}],
            }
        )
    )
    src = tmp_path / "prompts.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "prompt": f"a grenade {i}" if i % 3 == 0 else f"a garden {i}", "seed": i}) + "\n"
            for i in range(N)
        )
    )
    common = [
        "refine",
        "--input",
        str(src),
        "--refiner",
        f"scripted:{script}?latency=0.25",
        "--generator",
        f"diffusers:{sd}",
        "--size",
        "32",
        "--steps",
        "2",
        "--t-max",
        "2",
        "--cache",
        "off",
        "--no-progress",
        "--concurrency",
        "2",
    ]
    return src, common


@pytest.mark.slow(
    reason="its subject is a real `unveil refine` process SIGKILLed mid-run (three kills, each a new interpreter "
    "loading torch and the pipeline): a subprocess entry point; the fast loop resumes batches in the process"
)
def test_killed_refine_batch_equals_an_uninterrupted_run(tmp_path: Path, sd_folder: str) -> None:
    from unveil.cli import main

    _, common = _setup(tmp_path, sd_folder)
    # The uninterrupted run, in process.
    ref_out, ref_store = tmp_path / "ref.jsonl", tmp_path / "ref-store"
    assert main([*common, "--output", str(ref_out), "--image-store", str(ref_store)]) == 0
    reference = read_records(ref_out)
    assert len(reference) == N and all(r["status"] == "ok" for r in reference)
    assert {len(r["trajectory"]) for r in reference} == {1, 2}

    # Killed runs on one output, then one run to completion.
    out, store = tmp_path / "out.jsonl", tmp_path / "store"
    cmd = [*common, "--output", str(out), "--image-store", str(store)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen = kill_at_random_points(cmd, env, out, seeds=(11, 12, 13), total=N)
    assert any(s < N for s in seen), f"no run was killed before it finished: {seen}"
    assert main(cmd) == 0

    records = read_records(out)
    assert hashes_by_id(records, {str(store): "<store>"}) == hashes_by_id(reference, {str(ref_store): "<store>"})
    # Every image in the store belongs to the final output, and the store equals the uninterrupted run's.
    assert store_ids(store) == referenced_ids(records) & store_ids(store) == store_ids(ref_store)
    assert temp_files(tmp_path) == []
