"""Tests that need an optional extra skip, naming the extra and its install command, where it is not installed.

`@pytest.mark.extra("t2i")` declares the need up front. Tests that do not declare it are still caught: a test (or a
test module's imports) that raises `MissingExtraError`, or `ModuleNotFoundError` for a module of an extra
(`tools.extras.EXTRA_MODULES`), is reported as skipped with the extra's name, not as a failure. Any other error
stays a failure. Hooks are imported by tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
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
