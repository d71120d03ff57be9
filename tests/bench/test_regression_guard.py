"""`bench/regression_guard.py`: the GPU suite compares every figure with the last and the best committed results of
the same GPU model and flags one more than 10% worse, in its table, its JSON and a loud line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import host_cpu  # noqa: E402
import regression_guard as guard  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def result(commit: str, date: str, *, compile_rate: float, step_s: float, model: str = H100, **extra: Any) -> dict:
    """A suite result with a T2I compiled rate and a GRPO step, as bench/gpu_suite.py writes them."""
    return {
        "commit": commit,
        "machine": f"1x {model}",
        "gpu_model": model,
        "tiny": False,
        "date": date,
        "parts": {
            "t2i": {
                "status": "ok",
                "data": {"compile.batched_img_per_s": compile_rate, "eager.batched_img_per_s": 2.8},
            },
            "grpo": {
                "status": "ok",
                "data": {
                    "processes": 1,
                    "settings": {"scheduler": "pndm", "steps": 50},
                    "measured": {"step_s": step_s, "rendering (SD)": 37.0, "images": 160},
                },
            },
            "scale-ray1": {
                "status": "ok",
                "data": {"accel": "auto", "rows": [{"engine": "ray", "GPUs": 1, "images/s": "3.4"}]},
            },
        },
        **extra,
    }


def write(folder: Path, name: str, data: dict) -> Path:
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def test_a_figure_more_than_ten_percent_worse_is_flagged_in_table_json_and_log(tmp_path: Path) -> None:
    write(tmp_path, "old.json", result("6c49ae7", "2026-11-27 15:23:51 UTC", compile_rate=4.18, step_s=40.0))
    new = result("465fccf", "2026-12-07 10:00:00 UTC", compile_rate=3.10, step_s=51.7)
    report = guard.guard_report(new, tmp_path)
    assert set(report["regressions"]) == {
        "t2i: batched compile",
        "grpo: GRPO step, 1 process(es) (scheduler=pndm, steps=50)",
    }
    by_name = {c["name"]: c for c in report["comparisons"]}
    assert by_name["t2i: batched compile"]["change_pct"] == pytest.approx(-25.8, abs=0.1)
    assert by_name["t2i: batched compile"]["baseline_commit"] == "6c49ae7"
    assert not by_name["t2i: batched eager"]["regressed"]  # the same figure: 0% change
    rows = guard.guard_rows(report)
    assert [r["result"].startswith("REGRESSION: ") for r in rows].count(True) == 2
    assert "2 more than 10% worse" in rows[-1]["result"]
    lines = guard.loud_lines(report)
    assert any(line.startswith("!!! REGRESSION: t2i: batched compile: 3.1 images/s, 26% worse") for line in lines)


def test_within_ten_percent_or_better_is_not_flagged(tmp_path: Path) -> None:
    write(tmp_path, "old.json", result("aaa", "2026-11-27 00:00:00 UTC", compile_rate=4.18, step_s=40.0))
    report = guard.guard_report(result("bbb", "2026-12-01 00:00:00 UTC", compile_rate=3.9, step_s=43.0), tmp_path)
    assert report["regressions"] == []
    assert len(report["comparisons"]) == 5


def test_only_the_newest_earlier_run_of_the_same_gpu_model_is_the_baseline(tmp_path: Path) -> None:
    write(tmp_path, "oldest.json", result("a1", "2026-11-01 00:00:00 UTC", compile_rate=3.2, step_s=50.0))
    write(tmp_path, "newest.json", result("a2", "2026-11-20 00:00:00 UTC", compile_rate=3.2, step_s=50.0))
    write(
        tmp_path,
        "h200.json",
        result("a3", "2026-11-25 00:00:00 UTC", compile_rate=9.0, step_s=10.0, model="NVIDIA H200"),
    )
    write(tmp_path, "tiny.json", result("a4", "2026-11-26 00:00:00 UTC", compile_rate=9.0, step_s=10.0, tiny=True))
    write(tmp_path, "later.json", result("a5", "2026-12-30 00:00:00 UTC", compile_rate=9.0, step_s=10.0))
    write(tmp_path, "same-commit.json", result("bbb", "2026-11-30 00:00:00 UTC", compile_rate=9.0, step_s=10.0))
    report = guard.guard_report(result("bbb", "2026-12-01 00:00:00 UTC", compile_rate=3.1, step_s=51.0), tmp_path)
    assert report["regressions"] == []
    assert {c["baseline_file"] for c in report["comparisons"]} == {"newest.json"}


def test_a_regression_that_became_the_last_run_is_still_flagged_against_the_best_earlier_one(tmp_path: Path) -> None:
    # 4.34 before the regression, 3.13 since: the next run at 3.1 is 1% worse than the last run, 29% worse than the
    # best, and the step at 40 s is better than the last (51 s) but not the best (38 s) by more than 10%.
    write(tmp_path, "good.json", result("41f7c82", "2026-11-20 00:00:00 UTC", compile_rate=4.34, step_s=38.0))
    write(tmp_path, "bad.json", result("f43e1dd", "2026-11-30 00:00:00 UTC", compile_rate=3.13, step_s=51.0))
    report = guard.guard_report(result("8f0c2e9", "2026-12-07 00:00:00 UTC", compile_rate=3.1, step_s=40.0), tmp_path)
    assert report["regressions"] == ["t2i: batched compile"]
    by_name = {c["name"]: c for c in report["comparisons"]}
    compiled = by_name["t2i: batched compile"]
    assert (compiled["baseline_file"], compiled["best_file"]) == ("bad.json", "good.json")
    assert compiled["change_pct"] == pytest.approx(-1.0, abs=0.1)
    assert compiled["best_change_pct"] == pytest.approx(-28.6, abs=0.1)
    step = by_name["grpo: GRPO step, 1 process(es) (scheduler=pndm, steps=50)"]
    assert step["best"] == 38.0 and not step["regressed"]  # lower is better: the best is the smallest
    (line,) = guard.loud_lines(report)
    assert line.endswith(
        "1% worse than 3.13 at f43e1dd (1x NVIDIA H100 80GB HBM3); 29% worse than the best earlier, 4.34 at 41f7c82"
    )


def test_a_figure_missing_from_the_newest_run_is_compared_with_the_last_run_that_has_it(tmp_path: Path) -> None:
    older = result("a1", "2026-11-01 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    partial = result("a2", "2026-11-20 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    del partial["parts"]["t2i"]  # a run of other parts only
    write(tmp_path, "older.json", older)
    write(tmp_path, "partial.json", partial)
    report = guard.guard_report(result("b", "2026-12-01 00:00:00 UTC", compile_rate=3.1, step_s=40.0), tmp_path)
    by_name = {c["name"]: c for c in report["comparisons"]}
    assert by_name["t2i: batched compile"]["baseline_file"] == "older.json"
    assert by_name["grpo: GRPO step, 1 process(es) (scheduler=pndm, steps=50)"]["baseline_file"] == "partial.json"


def test_the_command_exits_1_on_a_regression_and_finds_the_committed_one(capsys: pytest.CaptureFixture[str]) -> None:
    # The project's own results: 5055d75's compiled T2I rate against 6c49ae7's (the regression of issue 43).
    rc = guard.main([str(ROOT / "bench" / "results" / "gpu_suite-5055d75-4x-h100.json")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "!!! REGRESSION: t2i: batched compile: 3.18 images/s, 24% worse than 4.18 at 6c49ae7" in out


def test_the_plain_diffusers_pipeline_is_reported_but_not_guarded(tmp_path: Path) -> None:
    old = result("a1", "2026-11-20 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    new = result("b1", "2026-12-01 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    old["parts"]["t2i"]["data"]["baseline_img_per_s"] = 0.55
    new["parts"]["t2i"]["data"]["baseline_img_per_s"] = 0.35  # diffusers' own first images: not Unveil's path
    write(tmp_path, "old.json", old)
    report = guard.guard_report(new, tmp_path)
    assert report["regressions"] == []
    assert all("one pipeline call" not in c["name"] for c in report["comparisons"])


def test_a_line_says_what_ran_beside_the_figure_when_the_runs_differ(tmp_path: Path) -> None:
    # The compiled T2I rate measured beside two scaling rounds, against a baseline measured alone.
    old = result("a1", "2026-11-20 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    for name, (start, seconds) in {"t2i": (0, 150), "grpo": (150, 200), "scale-ray1": (150, 200)}.items():
        old["parts"][name].update(started_s=start, seconds=seconds)
    new = result("b1", "2026-12-01 00:00:00 UTC", compile_rate=3.1, step_s=40.0)
    for name, (start, seconds) in {"t2i": (300, 150), "grpo": (0, 540), "scale-ray1": (290, 120)}.items():
        new["parts"][name].update(started_s=start, seconds=seconds)
    write(tmp_path, "old.json", old)
    report = guard.guard_report(new, tmp_path)
    by_name = {c["name"]: c for c in report["comparisons"]}
    compiled = by_name["t2i: batched compile"]
    assert list(compiled["beside"]) == ["grpo", "scale-ray1"]
    assert list(compiled["baseline_beside"]) == []
    (line,) = guard.loud_lines(report)
    assert line.endswith("[measured beside grpo, scale-ray1; the baseline beside nothing]")
    step = by_name["grpo: GRPO step, 1 process(es) (scheduler=pndm, steps=50)"]
    assert list(step["beside"]) == ["scale-ray1", "t2i"] and list(step["baseline_beside"]) == ["scale-ray1"]


def busy(others_cores: float, cpus: int = 16) -> dict[str, Any]:
    """A `host_cpu` record as bench/t2i_throughput.py writes it for a variant's timed rounds."""
    return host_cpu.contention(host_busy_s=others_cores * 8.0 + 8.0, own_s=8.0, wall_s=8.0, cpus=cpus)


def test_a_rate_timed_while_other_processes_held_the_cpus_is_not_guarded_and_no_baseline(tmp_path: Path) -> None:
    # The committed 4x H100 suites timed T2I while the other jobs built their models and compiled beside it.
    alone = result("a1", "2026-11-20 00:00:00 UTC", compile_rate=4.2, step_s=40.0)
    alone["parts"]["t2i"]["data"]["compile.host_cpu"] = busy(0.5)
    beside = result("b1", "2026-11-25 00:00:00 UTC", compile_rate=3.1, step_s=40.0)
    beside["parts"]["t2i"]["data"]["compile.host_cpu"] = busy(13.0)
    write(tmp_path, "alone.json", alone)
    write(tmp_path, "beside.json", beside)

    # A run alone is compared with the last rate measured alone, not with the newer contended one.
    report = guard.guard_report(result("c1", "2026-12-01 00:00:00 UTC", compile_rate=3.6, step_s=40.0), tmp_path)
    compiled = {c["name"]: c for c in report["comparisons"]}["t2i: batched compile"]
    assert (compiled["baseline"], compiled["baseline_commit"]) == (4.2, "a1")
    assert "t2i: batched compile" in report["regressions"]  # 14% worse than 4.2: flagged, as before

    # A contended rate is compared and said loudly, but it is neither a regression nor a pass.
    new = result("d1", "2026-12-02 00:00:00 UTC", compile_rate=3.1, step_s=40.0)
    new["parts"]["t2i"]["data"]["compile.host_cpu"] = busy(12.5)
    report = guard.guard_report(new, tmp_path)
    assert report["regressions"] == [] and report["not_guarded"] == ["t2i: batched compile"]
    (row,) = [r for r in guard.guard_rows(report) if r["what"] == "t2i: batched compile"]
    assert row["result"].startswith("NOT GUARDED: 3.1 images/s, 26% worse than 4.2 at a1")
    assert "other processes kept 12.5 of 16 CPUs busy" in row["result"]
    assert "1 not guarded" in guard.guard_rows(report)[-1]["result"]
    (line,) = guard.loud_lines(report)
    assert line.startswith("!!! NOT GUARDED: t2i: batched compile")
    assert line.endswith("(rerun the part alone: --parts t2i)")
