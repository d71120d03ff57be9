"""`bench/t2i_throughput.py`'s time limit: a variant is skipped from what a variant of its own kind took, so eager
after the compiled variant still runs, and the dynamic variant after it is measured by its compilation."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from t2i_throughput import variant_need  # noqa: E402


def test_eager_after_a_compiled_variant_needs_nothing_compiled_ones_need_the_compilation() -> None:
    spent = {"compile": 120.0}
    assert variant_need(spent, "eager") == 0.0
    assert variant_need(spent, "compile+dynamic") == 120.0
    assert variant_need({**spent, "eager": 35.0}, "eager") == 35.0
    assert variant_need({}, "compile") == 0.0
    assert variant_need({"eager": 35.0}, "fp8") == 0.0
