"""The suite's tiny-model cache (`tests/tiny_cache.py`): one build a run, a copy of its own for each caller, and the
torch random state a build leaves behind, so a test sees what a fresh build would have given it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.tiny_cache import CACHE_ENV, built_once


def test_a_tiny_model_is_built_once_a_run_and_each_caller_gets_a_copy_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    builds: list[str] = []

    @built_once
    def build_fake(path: str | Path) -> str:
        builds.append(str(path))
        folder = Path(path)
        (folder / "sub").mkdir(parents=True)
        torch.manual_seed(3)
        (folder / "sub" / "weights.txt").write_text(repr(torch.rand(2).tolist()), encoding="utf-8")
        return str(folder)

    a = build_fake(tmp_path / "a")
    after_the_build = torch.rand(3)
    b = build_fake(tmp_path / "b")
    after_a_copy = torch.rand(3)
    assert (a, b) == (str(tmp_path / "a"), str(tmp_path / "b")) and len(builds) == 1
    weights = (Path(a) / "sub" / "weights.txt").read_text(encoding="utf-8")
    assert (Path(b) / "sub" / "weights.txt").read_text(encoding="utf-8") == weights
    assert torch.equal(after_the_build, after_a_copy)  # the random state a build leaves, after a copy too
    (Path(a) / "sub" / "weights.txt").write_text("changed", encoding="utf-8")  # a test may change its copy ...
    assert (Path(build_fake(tmp_path / "c")) / "sub" / "weights.txt").read_text(encoding="utf-8") == weights
    assert len(builds) == 1  # ... and the next caller still gets the build's files
    monkeypatch.delenv(CACHE_ENV)
    build_fake(tmp_path / "d")  # outside a run (a bench script): built where asked, as before
    assert builds[1:] == [str(tmp_path / "d")]


def test_the_run_has_a_cache_folder_its_workers_share() -> None:
    import os

    folder = os.environ.get(CACHE_ENV)
    assert folder and Path(folder).is_dir()


def test_each_xdist_worker_gets_its_share_of_the_cpus_for_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    from types import SimpleNamespace

    from tests.conftest import _share_the_cores

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: sized.append(n))
    sized: list[int] = []
    _share_the_cores(SimpleNamespace(workerinput={"workercount": 4}))  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == "2" and sized == [2]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the caller's own setting stays
    _share_the_cores(SimpleNamespace(workerinput={"workercount": 4}))  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == "3" and sized == [2]
    monkeypatch.delenv("OMP_NUM_THREADS")
    _share_the_cores(SimpleNamespace())  # type: ignore[arg-type]  # not a worker: torch's default
    assert "OMP_NUM_THREADS" not in os.environ


def test_the_run_writes_bytecode_caches_where_the_environment_turns_them_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker and each process a test starts writes `__pycache__/` even under `PYTHONDONTWRITEBYTECODE=1`
    (else every worker rewrites and compiles every test file again on every run)."""
    import os
    import subprocess
    import sys

    from tests.conftest import _write_bytecode_caches

    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], capture_output=True)
    assert not sys.dont_write_bytecode and child.stdout.strip() == b"False", child
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    _write_bytecode_caches()
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ and not sys.dont_write_bytecode


@pytest.fixture(scope="module")
def built_for_the_module() -> str:
    """A fixture wider than one test, as a tiny model built once a module is."""
    return "built"


def test_a_test_with_a_module_fixture_runs_in_its_modules_xdist_group(
    built_for_the_module: str, request: pytest.FixtureRequest
) -> None:
    """The conftest's group is set before pytest-xdist reads the groups into the test ids (`@group`, which
    `--dist loadgroup` schedules by): set after it, as it once was, every group was silently ignored and a module's
    fixture was built on both workers."""
    module = "tests/project/test_tiny_cache.py"
    assert [mark.args[0] for mark in request.node.iter_markers("xdist_group")] == [module]
    if getattr(request.config.option, "loadgroup", False):  # a pytest-xdist worker under --dist loadgroup
        assert request.node.nodeid.endswith(f"@{module}"), request.node.nodeid
