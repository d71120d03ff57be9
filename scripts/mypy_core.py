"""mypy as it would run on a core install (no extras), in the environment that has them all: CI's second type gate.

`make lint` must pass on a core install too (CONTRIBUTING: an extra's untyped call carries
`# type: ignore[no-untyped-call, unused-ignore]`), but CI installs every extra, so a plain `mypy` cannot see what
changes without them. A second virtual environment would show it at the cost of a second install. Instead this
script hides, from one more mypy run, every installed module that no core dependency brings:

1. the core closure is `[project.dependencies]` of pyproject.toml and, recursively, what those distributions
   require (their own extras' requirements left out); every other installed distribution (the extras', the dev
   tools') is hidden, by the top-level modules it installs;
2. mypy then runs over the product packages with `follow_imports = "skip"` for the hidden modules (appended as one
   more override to a copy of pyproject.toml's settings), so each of them is `Any`, as a missing module under
   `ignore_missing_imports` is (in its own cache folder, `CACHE`, so that the plain run and this one stay
   incremental side by side);
3. an import of a hidden module that no `ignore_missing_imports` override covers is reported by name, as mypy on a
   core install would report it (`import-not-found`) and as `follow_imports = "skip"` does not.

Run: `python3 scripts/mypy_core.py` (exit 0 when clean; `--list` prints the hidden modules and exits).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import re
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "unveil"
# Its own cache: sharing the plain run's would make each of the two runs check again what the other changed.
CACHE = ".mypy_cache/core-install"


def _name(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def core_closure(requirements: list[str]) -> set[str]:
    """The normalised names of the distributions a core install has: the requirements and, recursively, theirs
    (a requirement whose marker asks for an extra, or that does not hold here, is left out)."""
    seen: set[str] = {_name(PROJECT)}
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = _name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # a core requirement not installed here: nothing of it to hide either
    return seen


def hidden_modules(core: set[str]) -> list[str]:
    """The top-level modules installed here by distributions outside the core closure only."""
    hidden = []
    for module, dists in metadata.packages_distributions().items():
        if module.isidentifier() and not any(_name(d) in core for d in dists):
            hidden.append(module)
    return sorted(hidden)


def _covered(module: str, overrides: list[dict[str, Any]]) -> bool:
    """Whether an `ignore_missing_imports` override of pyproject.toml matches the module."""
    for override in overrides:
        if not override.get("ignore_missing_imports"):
            continue
        patterns = override.get("module", [])
        for pattern in [patterns] if isinstance(patterns, str) else patterns:
            if fnmatch.fnmatchcase(module, pattern) or module == pattern.removesuffix(".*"):
                return True
    return False


def uncovered_imports(
    packages: list[str], hidden: set[str], overrides: list[dict[str, Any]], root: Path = ROOT
) -> list[str]:
    """`path:line module` for each import of a hidden module by product code that mypy on a core install would
    report as not found."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in hidden and not _covered(name, overrides):
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def main(argv: list[str] | None = None) -> int:
    """Run mypy with the extras hidden; its exit code, or 1 for an import a core install could not resolve."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the hidden modules and exit")
    args = parser.parse_args(argv)
    pyproject_text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = tomllib.loads(pyproject_text)
    hidden = hidden_modules(core_closure(pyproject["project"]["dependencies"]))
    if args.list:
        print("\n".join(hidden))
        return 0
    settings = pyproject["tool"]["mypy"]
    packages = list(settings["files"])
    missing = uncovered_imports(packages, set(hidden), settings.get("overrides", []))
    for line in missing:
        print(f"{line}: not installed without the extras and no ignore_missing_imports override covers it")
    modules = ", ".join(f'"{m}", "{m}.*"' for m in hidden)
    config = f'{pyproject_text}\n[[tool.mypy.overrides]]\nmodule = [{modules}]\nfollow_imports = "skip"\n'
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pyproject.toml"
        path.write_text(config, encoding="utf-8")
        command = [sys.executable, "-m", "mypy", "--config-file", str(path), "--cache-dir", CACHE, *packages]
        rc = subprocess.call(command, cwd=ROOT)
    return rc or (1 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
