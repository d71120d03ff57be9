"""The public data files live in the repository's data/ folder (data/README.md): each is there, listed with its
source and licence, and no product code, test, bench or config reads data from outside the clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.datafiles import DATA_DIR, FILES, data_file

ROOT = Path(__file__).resolve().parents[2]
# Paths that point outside the clone: the old shared data folder, by relative or absolute spelling.
# `shared` as a path component (`/ "shared"`, `Path("shared")`), not a dict key of that name.
OUTSIDE = re.compile(
    r"""\.\./shared|/work/|/\s*["']shared["']|Path\(\s*["']shared|parents\[2\]|ROOT\.parent|parent\.parent\.parent"""
)


def test_every_data_file_is_in_the_repository_and_documented() -> None:
    readme = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    assert DATA_DIR == ROOT / "data"
    for name in FILES:
        assert data_file(name).stat().st_size > 0
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}`"))
        assert row.rstrip(" |").endswith(("MIT", "Apache-2.0")), row
    assert sum((DATA_DIR / n).stat().st_size for n in FILES) < 4_000_000  # 3.3 MB: small enough to keep in git


def test_a_missing_data_file_is_one_error_naming_it() -> None:
    with pytest.raises(FileNotFoundError, match=r"'i2p/nope\.csv' not found under .*data"):
        data_file("i2p/nope.csv")


def test_nothing_reads_data_from_outside_the_clone() -> None:
    checked = [
        p
        for d in (
            "agents",
            "graphs",
            "tools",
            "runner",
            "evaluation",
            "training",
            "unveil",
            "bench",
            "tests",
            "scripts",
            ".ci",
        )
        for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in (".py", ".sh", ".toml", "")
    ]
    checked += list((ROOT / "training" / "configs").glob("*"))
    me = Path(__file__).resolve()
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in checked
        if p.resolve() != me
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line.replace(_root_of(p), ""))
    ]
    assert hits == []


def _root_of(path: Path) -> str:
    """How a file names the clone's root from its own place (`parents[2]` in tests/FOLDER/): not outside it."""
    return f"Path(__file__).resolve().parents[{len(path.relative_to(ROOT).parts) - 1}]"
