"""`unveil generate` killed with SIGKILL at random points (several seeds, so kills land between scenes, inside
a scene's checkpointed steps and during image writes) and rerun: the dataset folder ends up equal to an
uninterrupted run's -- same scene ids, same record content hashes, same dataset views -- with no partial
record, orphan image or temp file (see `tests/runner/test_kill_support.py` for the precise meaning)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.graphs import test_ctd as ctd
from tests.runner.test_kill_support import (
    ROOT,
    hashes_by_id,
    kill_at_random_points,
    read_records,
    referenced_ids,
    store_ids,
    temp_files,
)

N = 6


@pytest.fixture(scope="module")
def sd_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


def _views(folder: Path) -> dict[str, list[str]]:
    """The dataset views (written atomically): each line must parse."""
    out = {}
    for name in ("dataset.jsonl", "review_queue.jsonl"):
        lines = (folder / name).read_text(encoding="utf-8").splitlines()
        out[name] = sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines)
    return out


@pytest.mark.slow(
    reason="its subject is a real `unveil generate` process SIGKILLed mid-run (three kills, each a new interpreter "
    "loading torch and the pipeline): a subprocess entry point; the fast loop resumes batches in the process"
)
def test_killed_generate_run_equals_an_uninterrupted_run(tmp_path: Path, sd_spec: str) -> None:
    from unveil.cli import main

    spec = ctd.write_script(tmp_path, ctd.accepting_script()) + "?latency=0.03"

    def args(folder: Path) -> list[str]:
        return ctd.cli_args(folder, spec, sd_spec, "--review", "auto", "--concurrency", "2", n=N)

    ref = tmp_path / "ref"
    assert main(args(ref)) == 0
    reference = read_records(ref / "samples.jsonl")
    assert len(reference) == N and {r["status"] for r in reference} == {"accepted"}

    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen = kill_at_random_points(args(out), env, out / "samples.jsonl", seeds=(21, 22, 23), total=N)
    assert any(s < N for s in seen), f"no run was killed before it finished: {seen}"
    assert main(args(out)) == 0

    records = read_records(out / "samples.jsonl")
    assert hashes_by_id(records) == hashes_by_id(reference)
    assert _views(out) == _views(ref)
    # Images: each file in the store is an image some record names, and the store equals the reference's.
    images = store_ids(out / "images")
    assert images == referenced_ids(records) & images == store_ids(ref / "images")
    assert all((out / r["image"]).is_file() for r in records)
    assert temp_files(out) == []
