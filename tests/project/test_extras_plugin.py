"""The test suite's own rule: a test that needs a missing optional extra is skipped, naming the extra.

Each case runs pytest on a folder of its own through pytest's `pytester`, in this process (the plugin is what is
tested, not a new interpreter: `extras_plugin` is importable from here as it is in a child with `tests/` on its
path), which keeps each run to a fraction of a second instead of a new interpreter's start."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"  # as pyproject.toml sets it, so no warning
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


def test_missing_extras_skip_with_their_name_and_other_errors_still_fail(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=TESTS, test_module_level=MODULE_NEEDS_EXTRA)
    out = pytester.runpytest_inprocess("-rfs", "-p", "no:cacheprovider", str(pytester.path)).stdout.str()
    assert "1 failed, 1 passed, 3 skipped" in out, out
    assert "needs the 't2i' extra" in out and "needs the 'scores' extra" in out, out
    assert "./scripts/setup.sh --with scores" in out
    assert "test_a_real_failure" in out.split("short test summary")[-1]


def test_a_test_that_needs_an_extra_is_marked_with_it(pytester: pytest.Pytester) -> None:
    """`needs_<extra>` comes from an `extra` mark or the extra's modules the file imports (so `-m "not needs_ray"`
    leaves the Ray tests out), whether or not the extra is installed."""
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_marks=(
            "import pytest\n\n"
            "@pytest.mark.extra('search')\ndef test_declared():\n    pass\n\n"
            "def test_imports():\n    pytest.importorskip('ray')\n    import fastapi  # noqa: F401\n"
        ),
        test_plain="def test_plain():\n    pass\n",
    )

    def selected(expression: str) -> str:
        run = pytester.runpytest_inprocess("-q", "--collect-only", "-p", "no:cacheprovider", "-m", expression)
        return run.stdout.str()

    # a file's imports mark every test in it; a mark, only its test
    assert "test_imports" in selected("needs_ray and needs_ui") and "test_declared" in selected("needs_ray")
    assert "test_declared" in selected("needs_search") and "test_imports" not in selected("needs_search")
    assert "test_plain" not in selected("needs_ray or needs_ui or needs_search")


def test_every_extra_has_its_needs_marker_registered(pytestconfig: pytest.Config) -> None:
    # An unregistered `needs_<extra>` is a PytestUnknownMarkWarning in every run (needs_studio was) and a typo in
    # `-m "not needs_x"` would select nothing silently.
    from tools.extras import EXTRA_MODULES

    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    assert {f"needs_{extra}" for extra in EXTRA_MODULES} <= registered
