"""Imports point down only: tools <- agents <- graphs <- runner <- evaluation, training <- unveil (the CLI).

Walks every module of the product packages with `ast` (imports inside functions included) and fails on an import
of a higher layer, or of a sibling at the same level that is not the module's own package (evaluation and
training do not import each other). `bench/` and `tests/` sit above everything and are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS: dict[str, int] = {
    "tools": 0,
    "agents": 1,
    "graphs": 2,
    "runner": 3,
    "evaluation": 4,
    "training": 4,
    "unveil": 5,
}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import that points up (or sideways to another package of the same layer)."""
    bad: list[str] = []
    for package, level in LAYERS.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, target in imported_packages(path):
                if target in LAYERS and target != package and LAYERS[target] >= level:
                    bad.append(
                        f"{path.relative_to(root)}:{line} ({package}, layer {level}) imports {target} "
                        f"(layer {LAYERS[target]})"
                    )
    return bad


def test_imports_point_down_only() -> None:
    assert upward_imports() == []


def test_the_walker_sees_an_upward_import(tmp_path: Path) -> None:
    # The check itself must be able to fail: a tools module importing the CLI, inside a function, is caught.
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "x.py").write_text(
        "def f():\n    from unveil.commands import detect\n    import graphs.tag\n"
    )
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "y.py").write_text(
        "from training.reward import RewardSettings\nfrom runner import batch\n"
    )
    found = upward_imports(tmp_path)
    assert len(found) == 3 and any("tools/x.py:2" in f and "unveil" in f for f in found)
    assert any("evaluation/y.py:1" in f and "training" in f for f in found)
