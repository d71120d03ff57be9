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
