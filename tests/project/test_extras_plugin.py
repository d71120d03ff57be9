"""The test suite's own rule: a test that needs a missing optional extra is skipped, naming the extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = "from extras_plugin import *  # noqa: F403\n"
TESTS = """
import pytest
from tools.extras import MissingExtraError


def test_raises_missing_extra():
    raise MissingExtraError("t2i", "unveil refine", "diffusers")


def test_imports_a_module_of_an_extra():
    raise ModuleNotFoundError("No module named 'nudenet'", name="nudenet")


def test_a_real_failure():
    raise ModuleNotFoundError("No module named 'nonexistent_pkg'", name="nonexistent_pkg")


@pytest.mark.extra("ui")
def test_declared_and_installed():
    pass
"""
MODULE_NEEDS_EXTRA = "raise ModuleNotFoundError(\"No module named 'open_clip'\", name='open_clip')\n"


def test_missing_extras_skip_with_their_name_and_other_errors_still_fail(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cases.py").write_text(TESTS)
    (tmp_path / "test_module_level.py").write_text(MODULE_NEEDS_EXTRA)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-rfs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout
    assert "1 failed, 1 passed, 3 skipped" in out, out
    assert "needs the 't2i' extra" in out and "needs the 'scores' extra" in out, out
    assert "./scripts/setup.sh --with scores" in out
    assert "test_a_real_failure" in out.split("short test summary")[-1]


def test_a_test_that_needs_an_extra_is_marked_with_it(tmp_path: Path) -> None:
    """`needs_<extra>` comes from an `extra` mark or the extra's modules the file imports (so `-m "not needs_ray"`
    leaves the Ray tests out), whether or not the extra is installed."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_marks.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.extra('search')\ndef test_declared():\n    pass\n\n"
        "def test_imports():\n    pytest.importorskip('ray')\n    import fastapi  # noqa: F401\n"
    )
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}

    def selected(expression: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-m", expression],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return run.stdout

    # a file's imports mark every test in it; a mark, only its test
    assert "test_imports" in selected("needs_ray and needs_ui") and "test_declared" in selected("needs_ray")
    assert "test_declared" in selected("needs_search") and "test_imports" not in selected("needs_search")
    assert "test_plain" not in selected("needs_ray or needs_ui or needs_search")
