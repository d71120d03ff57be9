"""Imports point down only: tools <- agents <- graphs <- runner <- evaluation, training <- unveil (the CLI).

Walks every module of the product packages with `ast` (imports inside functions included) and fails on an import
of a higher layer, or of a sibling at the same level that is not the module's own package (evaluation and
training do not import each other). `bench/` and `tests/` sit above everything and are not checked.

Inside `unveil/` the same holds one floor finer: the console script (`unveil/cli.py`) over the commands
(`unveil/commands/`) over the rest (the web app, the renderer), so no command reaches up into the CLI's module.
And no product modules import each other round a circle, at any floor.
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


# The floors inside `unveil/`, by module name prefix (the longest that matches); anything else there is floor 0.
UNVEIL_FLOORS: dict[str, int] = {"unveil.cli": 2, "unveil.commands": 1}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every absolute import in a file (`from a.b import c`: `a.b.c`, which may name a
    module or a name in `a.b`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    return [(line, name.split(".")[0]) for line, name in imported_modules(path)]


def unveil_floor(module: str) -> int:
    """The floor of a module of `unveil/` (see `UNVEIL_FLOORS`)."""
    return max(
        (f for prefix, f in UNVEIL_FLOORS.items() if module == prefix or module.startswith(prefix + ".")), default=0
    )


def upward_imports_in_unveil(root: Path = ROOT) -> list[str]:
    """Every import inside `unveil/` from a lower floor to a higher one (a command importing `unveil.cli`)."""
    bad: list[str] = []
    for path in sorted((root / "unveil").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for line, target in imported_modules(path):
            if target.split(".")[0] == "unveil" and unveil_floor(target) > unveil_floor(module):
                bad.append(
                    f"{path.relative_to(root)}:{line} imports {target} (floor {unveil_floor(target)} of unveil/)"
                )
    return bad


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


def test_no_command_imports_the_console_script() -> None:
    assert upward_imports_in_unveil() == []


def test_the_walker_sees_a_command_importing_the_cli(tmp_path: Path) -> None:
    (tmp_path / "unveil" / "commands").mkdir(parents=True)
    (tmp_path / "unveil" / "commands" / "x.py").write_text("def f():\n    from unveil.cli import build_parser\n")
    (tmp_path / "unveil" / "ui").mkdir()
    (tmp_path / "unveil" / "ui" / "y.py").write_text("import unveil.commands.common\nfrom unveil import cli\n")
    (tmp_path / "unveil" / "cli.py").write_text("from unveil.commands.parser import build_parser\n")  # down: fine
    found = upward_imports_in_unveil(tmp_path)
    assert len(found) == 3 and any("unveil/commands/x.py:2" in f and "unveil.cli" in f for f in found), found


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


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each product module and the product modules it imports (imports inside functions included)."""
    files = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for package in LAYERS
        for path in (root / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for _line, name in imported_modules(path):
            # `from a.b import c` names the module a.b.c when it is one, else a name in a.b.
            target = name if name in files else name.rpartition(".")[0]
            if target in files and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_modules_import_each_other_round_a_circle() -> None:
    # After a merge, seven command modules imported each other round a circle (a cap note in common.py that needed
    # the estimate, which needed detect and evaluate, which need common.py); a lazy import hid it from the floors.
    assert import_circles(module_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
