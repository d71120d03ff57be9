"""Tests that need an optional extra skip, naming the extra and its install command, where it is not installed.

`@pytest.mark.extra("t2i")` declares the need up front. Tests that do not declare it are still caught: a test (or a
test module's imports) that raises `MissingExtraError`, or `ModuleNotFoundError` for a module of an extra
(`tools.extras.EXTRA_MODULES`), is reported as skipped with the extra's name, not as a failure. Any other error
stays a failure. Hooks are imported by tests/conftest.py.

Every test that needs an extra also carries the marker `needs_<extra>` (registered in pyproject.toml), set here from
its `extra` marks and from the modules of an extra its test file imports or `importorskip`s, so a run can leave a
stack out by name: `pytest -m "not needs_ray and not needs_train"`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.extras import EXTRA_MODULES, MissingExtraError, has_extra, install_hint

_MODULE_EXTRA = {module: extra for extra, modules in EXTRA_MODULES.items() for module in modules}


def missing_extra_reason(exc: BaseException) -> str | None:
    """A skip reason when `exc` says an optional extra is missing, else None."""
    if isinstance(exc, MissingExtraError):
        return f"needs the '{exc.extra}' extra: {install_hint(exc.extra)}"
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        extra = _MODULE_EXTRA.get(exc.name.split(".")[0])
        if extra:
            return f"needs the '{extra}' extra ({exc.name} is not installed): {install_hint(extra)}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Declare the `extra` marker."""
    config.addinivalue_line("markers", "extra(name): the test needs the optional extra NAME (skipped without it)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose declared extra is missing."""
    for mark in item.iter_markers("extra"):
        for extra in mark.args:
            if not has_extra(extra):
                pytest.skip(f"needs the '{extra}' extra: {install_hint(extra)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """A test that failed because an extra is missing is reported as skipped, with the extra named."""
    outcome = yield
    report = outcome.get_result()
    reason = missing_extra_reason(call.excinfo.value) if call.excinfo is not None and report.failed else None
    if reason:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A test module whose imports need a missing extra is skipped whole, with the extra named."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and isinstance(collector, pytest.Module):
        try:
            collector.obj  # noqa: B018 - re-import to get the exception object, not its text
        except Exception as exc:  # noqa: BLE001 - only a missing extra changes the report
            # pytest wraps an import failure in a CollectError raised from the original exception.
            reason = missing_extra_reason(exc) or missing_extra_reason(exc.__cause__ or exc)
            if reason:
                report.outcome = "skipped"
                report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")


@functools.cache
def imported_extras(path: Path) -> frozenset[str]:
    """The extras whose modules a test file imports (anywhere in it) or passes to `pytest.importorskip`."""
    try:
        text = path.read_text(encoding="utf-8")
        if not any(module in text for module in _MODULE_EXTRA):  # most files name none: no need to parse them
            return frozenset()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    tops = {name.split(".")[0] for name in names}
    return frozenset(extra for extra, modules in EXTRA_MODULES.items() if tops & set(modules))


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test `needs_<extra>` for the extras it declares (`extra` marks) or its file imports."""
    for item in items:
        extras = {str(extra) for mark in item.iter_markers("extra") for extra in mark.args}
        extras |= imported_extras(Path(item.path))
        for extra in sorted(extras):
            item.add_marker(getattr(pytest.mark, f"needs_{extra}"))
