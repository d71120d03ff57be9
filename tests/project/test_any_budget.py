"""`Any` in the signatures of product code stays within a budget that only goes down (issue 35: 80; now 74).

Counted as the issue counts it: a parameter (not `*args`/`**kwargs`) or a return annotated with `Any` itself, in
the product packages. `dict[str, Any]` and `list[Any]` are not counted: they say what the container is. A new
`Any` needs a reason a narrower type (a class, a Protocol of the members used, `object`, a TypeVar) cannot give;
when the count drops, lower `BUDGET` to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("agents", "graphs", "tools", "runner", "evaluation", "training", "unveil")
BUDGET = 74  # issue 35's target was 80; issue 46 lowered it to what it reached


def _is_any(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):  # typing.Any
        return annotation.attr == "Any" and isinstance(annotation.value, ast.Name) and annotation.value.id == "typing"
    return isinstance(annotation, ast.Constant) and annotation.value in ("Any", "typing.Any")


def any_in_signatures(root: Path = ROOT) -> list[str]:
    """`path:line name(param)` or `path:line name -> Any` for every `Any` parameter or return of product code."""
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                found += [f"{rel}:{node.lineno} {node.name}({a.arg})" for a in params if _is_any(a.annotation)]
                if _is_any(node.returns):
                    found.append(f"{rel}:{node.lineno} {node.name} -> Any")
    return found


def test_the_counter_counts_what_the_issue_counts(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "m.py").write_text(
        "import typing\nfrom typing import Any\n"
        "def a(x: Any, y: dict[str, Any], *args: Any, **kw: Any) -> Any: ...\n"
        "def b(x: 'Any', y: object) -> typing.Any: ...\n"
        "async def c(self, x: int) -> list[Any]: ...\n"
    )
    assert len(any_in_signatures(tmp_path)) == 4  # a(x), a -> Any, b(x), b -> typing.Any


def test_any_in_signatures_stays_within_the_budget() -> None:
    found = any_in_signatures()
    listing = "\n".join(found)
    assert len(found) <= BUDGET, f"{len(found)} `Any` in signatures, over the budget of {BUDGET}:\n{listing}"
