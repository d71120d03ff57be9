"""Every bench's CPU smoke mode runs as a user runs it (a subprocess from the repository root) and prints its
numbers, so a bench that a code change broke fails here instead of the next time someone measures with it.

`bench/t2i_throughput.py` and `bench/grpo_step.py` are checked in tests/bench/test_gpu_suite.py: the tiny GPU suite
runs each of them as its `t2i` and `grpo` part, a subprocess from the repository root with their smoke flags, and
that test asserts what they print and write (running them here too paid their imports and models twice)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"\d+(?:\.\d+)?"
# A bench subprocess loads its models and tiny pipelines from scratch: on a busy 2-core machine that can take
# minutes (run_bench's own limit is 600 s). Every test here is slow: `make test-fast` leaves the benches out.
pytestmark = [pytest.mark.timeout(660), pytest.mark.slow]


def run_bench(*args: str, timeout: int = 600) -> str:
    """Run `python bench/ARGS...` from the repository root; its stdout (the test fails on a non-zero exit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)  # a smoke run never joins a cluster another process runs
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_tag_calls_prints_calls_tokens_and_the_targets() -> None:
    out = run_bench("bench/tag_calls.py", "--latency", "0")
    assert re.search(r"targets: overt calls \d+ <= 4: True", out)
    # both readings side by side; only the default (per_node) finds the covert pair
    cells = r"\d+ \| \d+ \| \S+ \| "
    assert re.search(rf"separate \| per_node \| (?:{cells}){{2}}\d+ \| \d+ \| 0\.99\d+ \|", out)
    assert re.search(rf"separate \| per_layer \| (?:{cells}){{2}}\d+ \| \d+ \| - \|", out)
    assert re.search(r"target: per_layer benign calls \d+ <= \d+: True", out)
    assert re.search(rf"separate \| per_node\+screen \| (?:{cells}){{2}}\d+ \| \d+ \| 0\.99\d+ \|", out)
    # the wide sample: measured calls / tokens / pairs, then the dry run's estimate (the same calls)
    for reading in ("per_node", "per_layer", "per_node\\+screen"):
        assert re.search(rf"^wide \| {reading} \| (\d+) \| \d+ \| \d+ \| \1 \| \d+$", out, re.M)


def test_scale_render_tiny_runs_the_local_and_ray_engines() -> None:
    out = run_bench("bench/scale.py", "render", "--tiny", "--gpus", "1", "--prompts-per-gpu", "4", "--warm", "1")
    assert "tiny pipeline" in out
    assert re.search(rf"^local\s+0\s+4\s+{NUMBER}\s+1\.00", out, re.M)
    assert re.search(rf"^ray\s+0\s+4\s+{NUMBER}\s+{NUMBER}", out, re.M)


def test_overlapping_intervals_are_counted_once() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from t2i_phases import covered

    assert covered([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    assert covered([(0.0, 4.0), (1.0, 2.0)]) == 4.0 and covered([]) == 0.0


def test_t2i_ab_runs_the_bench_of_each_prepared_commit(tmp_path: Path) -> None:
    # The bisection helper for a GPU call: each commit's tree prepared here, each bench run there, one table.
    run_bench("bench/t2i_ab.py", "prepare", "HEAD", "--ab", str(tmp_path / "trees"))
    (tree,) = sorted((tmp_path / "trees").iterdir())
    assert (tree / "bench" / "t2i_throughput.py").is_file() and (tree / "tools" / "t2i").is_dir()
    out = run_bench(
        "bench/t2i_ab.py",
        *("run", "--ab", str(tmp_path / "trees"), "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")),
        *("--", "--tiny", "--steps", "2", "--n", "2"),
    )
    # On a CPU the compiled variant is refused: the table names the tree and the reason.
    assert f"| {tree.name} | UnsupportedOptionError: accel='compile' needs a CUDA device" in out
    assert (tmp_path / "out" / f"ab-{tree.name}.json").is_file()


def test_ctd_throughput_tiny_prints_samples_per_hour() -> None:
    out = run_bench("bench/ctd_throughput.py", "--tiny")
    assert re.search(rf"^sequential\s+{NUMBER}\s+2\s+\d+\s+{NUMBER}", out, re.M)
    assert re.search(rf"^concurrent x2\s+{NUMBER}\s+2\s+\d+", out, re.M)


def test_faults_tiny_loses_and_duplicates_nothing() -> None:
    # The bench itself exits 1 when a record is lost or duplicated; the row must show its counts.
    out = run_bench("bench/faults.py", "--tiny", "--commands", "detect", "--scenarios", "two-writers")
    assert re.search(r"^detect\s+faults\s+30%\s+8\s+\d+\s+\d+\s+0\s+0\s", out, re.M)
    assert re.search(r"^detect\s+two-writers\s", out, re.M)


def test_first_run_times_the_demo_on_this_environment() -> None:
    # Setup already ran (the README's test command starts with it): time the demo's first result only.
    out = run_bench("bench/first_run.py", "--skip-setup", "--first-only")
    assert re.search(rf"first result after {NUMBER} s: \[", out)


def test_image_decode_memory_prints_the_rise_per_mode() -> None:
    out = run_bench("bench/image_decode_memory.py", "--side", "300", "--modes", "I;16,RGBA", "--before")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["mode"], r["code"]) for r in rows] == [("I;16", "before"), ("I;16", "now"), ("RGBA", "now")]
    assert all(r["errors"] == [] and r["rss_rise_mib"] >= 0 for r in rows)


def test_ui_scale_tiny_lists_decides_and_opens_the_huge_line(tmp_path: Path) -> None:
    numbers = tmp_path / "ui_scale.json"
    out = run_bench("bench/ui_scale.py", "--tiny", "--json", str(numbers))
    got = json.loads(numbers.read_text())
    # the smoke sizes, every measurement present and printed
    assert (got["results"], got["samples"], got["huge_line_mib"]) == (1000, 500, 8)
    for key in ("list_first_page_s", "list_last_page_s", "decide_median_s", "decide_p95_s", "huge_line_peak_growth_mb"):
        assert got[key] >= 0 and re.search(rf"{key}: {NUMBER}", out), key
    assert got["decide_median_s"] <= got["decide_p95_s"] <= got["decide_max_s"]


def test_compile_reuse_tiny_compiles_once_across_a_plain_process_and_a_ray_actor(tmp_path: Path) -> None:
    """The plain process compiles the tiny UNet (Inductor on CPU); the Ray actor after it on the same cache folder
    loads both caches' entries and compiles nothing; the record keeps what the plain process's key was made of."""
    out = run_bench("bench/compile_reuse.py", "--tiny", "--json", str(tmp_path / "reuse.json"))
    assert re.search(rf"^plain \| {NUMBER} \| 0 \| [1-9]\d* \| 0 \| [1-9]\d*$", out, re.M)
    assert re.search(rf"^ray \| {NUMBER} \| \d+ \| 0 \| [1-9]\d* \| 0$", out, re.M)
    assert "reused: yes" in out
    key = json.loads((tmp_path / "reuse.json").read_text())["plain"]["keys"][0]
    assert key["inputs"] and {row["type"] for row in key["inputs"]} == {"FakeTensor"}
    assert "example_inputs" not in key["fields"] and "inductor_config" in key["fields"]
    assert "TensorMetadata" in key["inputs"][0]["pickle"]


def test_compile_reuse_names_the_parts_of_two_keys_that_differ() -> None:
    """Keys compared pair by pair: the differing fields, how many example inputs differ, of which types, and the
    pickled text of the first differing input when it was kept."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_reuse", ROOT / "bench" / "compile_reuse.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = {"type": "FakeTensor", "sha": "a", "pickle": "A"}
    a = [{"fields": {"gm": "1", "inductor_config": "2"}, "inputs": [row, {**row, "sha": "b"}, row]}]
    b = [{"fields": {"gm": "1", "inductor_config": "3"}, "inputs": [{**row, "sha": "c", "pickle": "C"}, row, row]}]
    (diff,) = bench.compare(a, b)
    assert diff["fields"] == ["inductor_config"] and (diff["inputs"], diff["inputs_differing"]) == (3, 2)
    assert diff["types"] == ["FakeTensor/FakeTensor"] and diff["first_differing_pickles"] == ["A", "C"]
    assert bench.compare(a, a) == [{"fields": [], "inputs": 3, "inputs_differing": 0}]
