"""Small modules with one job: no product module reaches 500 lines (CONTRIBUTING's rule). A module that grows past
it is split by job (as `agents/gateway.py` into the call record `agents/gateway_call.py` and the knobs
`agents/gateway_settings.py`), not trimmed of its comments."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agents", "graphs", "tools", "runner", "training", "evaluation", "unveil")
MAX_LINES = 500


def oversized(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """`path: N lines` for every product module of `limit` lines or more."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines >= limit:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_every_product_module_is_under_500_lines() -> None:
    assert oversized() == [], "split these by job"


def test_the_count_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "long.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "runner" / "short.py").write_text("x = 1\n" * (MAX_LINES - 1))
    assert oversized(tmp_path) == [f"runner/long.py: {MAX_LINES} lines"]
