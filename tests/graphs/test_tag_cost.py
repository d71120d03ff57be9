"""The TAG cost estimate (`graphs.tag.cost`, what `unveil run --dry-run` prices TAG jobs with) against what
`bench/tag_calls.py` measures on its scripted benign sample, the worst case: the same calls, and tokens within 25%.

The setup is the bench's own (its scripts and its TAG run), made tiny: three layers, one or two roots a tree, and a
pair-judge batch of 20 so a layer's pairs still span several calls.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from graphs.tag.context import TagContext
from graphs.tag.cost import worst_case

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    """bench/tag_calls.py as a module (the bench folder is no package)."""
    spec = importlib.util.spec_from_file_location("tag_calls", ROOT / "bench" / "tag_calls.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


READINGS = [
    {"prune": "per_node"},
    {"prune": "per_layer"},
    {"prune": "per_node", "screen_pairs": True},
    {"prune": "per_node", "roots_mode": "joint"},
]


@pytest.mark.parametrize("roots", [1, 2])
@pytest.mark.parametrize("reading", READINGS, ids=lambda r: "+".join(str(v) for v in r.values()))
def test_estimate_matches_the_bench_on_the_worst_case(tmp_path: Path, roots: int, reading: dict[str, object]) -> None:
    settings = {"l_max": 3, "k_max": 6, "max_pairs_per_call": 20, **reading}
    calls, tokens, pairs = asyncio.run(bench().measure_wide(tmp_path, roots, **settings))
    est = worst_case(TagContext(model="scripted:bench", **settings), roots=roots)  # type: ignore[arg-type]
    assert (est.calls, est.pairs) == (calls, pairs)
    assert abs(est.tokens - tokens) <= 0.25 * tokens, (est.tokens, tokens)


def test_the_default_reading_prices_the_wide_sample_as_docs_tag_md_measures_it() -> None:
    # docs/tag.md: a benign sample with 4 roots a tree costs 143 calls and 880,481 tokens per_node, 13 and 26,105
    # per_layer (bench/tag_calls.py --latency 0); the estimate must stay within 25% of both.
    per_node = worst_case(TagContext(model="scripted:bench"))
    per_layer = worst_case(TagContext(model="scripted:bench", prune="per_layer"))
    assert per_node.calls == 143 and abs(per_node.tokens - 880_481) <= 0.25 * 880_481
    assert per_layer.calls == 13 and abs(per_layer.tokens - 26_105) <= 0.25 * 26_105
