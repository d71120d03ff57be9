"""Every error Unveil raises on purpose has one root, `tools.errors.UnveilError`.

The CLI prints an `UnveilError` as one line (a user's mistake) and anything else with its traceback (a bug), so an
exception class defined in product code outside that root would turn a user's mistake into a traceback.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tools.errors import UnveilError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "graphs", "tools", "runner", "training", "evaluation", "unveil")


def _exception_classes() -> list[tuple[str, str]]:
    """(module, class) for every class in product code whose name says it is an error."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                    found.append((module, node.name))
    return found


def test_the_scan_finds_the_projects_errors() -> None:
    names = {name for _, name in _exception_classes()}
    # A scan that finds nothing would pass the test below vacuously.
    assert {"ContextError", "ModelCallError", "MissingExtraError", "BatchWriteError"} <= names


@pytest.mark.parametrize(("module", "name"), _exception_classes())
def test_every_product_error_is_an_unveil_error(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, UnveilError), f"{module}.{name} must inherit tools.errors.UnveilError"


# The one place a process may end itself: the console script's `sys.exit(main())`.
EXIT_ALLOWED = {"unveil/cli.py"}


def process_exits(text: str) -> list[int]:
    """Lines of a module that end the process past the CLI's error report: `raise SystemExit`, `sys.exit(...)`,
    `exit(...)`, `quit(...)` and `os._exit(...)` (argparse's own `parser.error` while parsing is the parser's)."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "SystemExit":
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("exit", "quit"):
                lines.append(node.lineno)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if (func.value.id, func.attr) in (("sys", "exit"), ("os", "_exit")):
                    lines.append(node.lineno)
    return sorted(lines)


def _exits_by_module() -> dict[str, list[int]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = process_exits(path.read_text(encoding="utf-8"))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_no_command_or_module_ends_the_process_itself() -> None:
    # A `SystemExit(message)` skips `unveil.cli.report_error`: its message is printed unredacted, with no command
    # name, and a `unveil run` job's exit is not reported as the others are. Raise an `UnveilError` subclass.
    stray = {m: lines for m, lines in _exits_by_module().items() if m not in EXIT_ALLOWED}
    assert not stray, f"raise a tools.errors.UnveilError subclass (CommandLineError, ...) instead: {stray}"


def test_the_exit_scan_sees_each_spelling() -> None:
    text = (
        "import os, sys\n"
        "def f(x):\n"
        "    if x == 1:\n        raise SystemExit('no')\n"
        "    if x == 2:\n        raise SystemExit\n"
        "    if x == 3:\n        sys.exit(2)\n"
        "    if x == 4:\n        os._exit(1)\n"
        "    try:\n        exit()\n    except SystemExit:\n        pass\n"
    )
    assert process_exits(text) == [4, 6, 8, 10, 12]
