"""`bench/gpu_suite.py`: the GPU suite's own code on CPU (tiny models): every part runs (the N-process GRPO step on
two gloo processes), one table is printed last, one JSON names the commit, the machine and the versions of the
packages the numbers depend on; a part past its budget is stopped and reported, and SIGTERM ends the suite with the
JSON and the table. No test here depends on how fast the machine is: the full run has no time limit (`--budget-s 0`),
and SIGTERM is sent once the suite says its part started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

JOBS = {"t2i", "grpo", "scale-local", "scale-ray1", "grpo-multi"}
NUMBER = r"\d+(?:\.\d+)?"


def suite_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    return env


@pytest.mark.slow
def test_the_tiny_suite_runs_every_part_and_writes_one_json(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "suite.json"
    # No time limit: on a loaded machine the parts take as long as they take (a 300 s budget failed there).
    cmd = [sys.executable, "bench/gpu_suite.py", "--tiny", "--budget-s", "0", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=suite_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["versions"]) == {"torch", "diffusers", "transformers", "trl", "ray"}
    assert report["commit"] and report["machine"].startswith("CPU") and report["tiny"] is True
    assert report["complete"] is True
    assert {name: part["status"] for name, part in report["parts"].items()} == dict.fromkeys(JOBS, "ok")
    whats = [row["what"] for row in report["rows"]]
    assert "batched eager" in whats
    assert "GRPO step, 1 process(es)" in whats and "GRPO step, 2 process(es)" in whats
    for name, processes in (("grpo", 1), ("grpo-multi", 2)):
        data = report["parts"][name]["data"]
        # Two steps (the first compiles on GPUs), the loss and mean reward of each, over all processes.
        assert data["processes"] == processes and len(data["steps"]) == 2
        assert len(data["losses"]) == 2 and len(data["rewards"]) == 2
        assert data["settings"]["grad_accum"] * processes == 4
    # The t2i and grpo parts are bench/t2i_throughput.py's and bench/grpo_step.py's smoke runs (test_bench_smoke.py
    # leaves them to this test): each printed its numbers, and the t2i part timed each step of the request path.
    t2i_log, grpo_log = report["parts"]["t2i"]["log_tail"], report["parts"]["grpo"]["log_tail"]
    assert re.search(rf"eager: {NUMBER} images/s", t2i_log), t2i_log
    assert re.search(rf"\| eager \| {NUMBER} \| {NUMBER}x \|", t2i_log), t2i_log
    phases = report["parts"]["t2i"]["data"]["eager.phases"]
    assert phases["images"] == 4 and phases["validate"]["calls"] == 4 and phases["store"]["calls"] == 4
    assert phases["pipeline"]["calls"] >= 1 and phases["pipeline"]["wall_s"] > 0 and phases["png_kb_per_image"] > 0
    # What else kept the host's CPUs busy during the timed rounds (bench/host_cpu.py), which the guard reads.
    host = report["parts"]["t2i"]["data"]["eager.host_cpu"]
    assert host["cpus"] >= 1 and host["wall_s"] > 0 and host["busy_cpus_on_purpose"] == 1
    assert all(phases[s]["wall_s"] <= phases["round_s"] for s in ("validate", "pipeline", "decode", "store"))
    assert re.search(rf"GRPO step, 1 process\(es\): {NUMBER} s", grpo_log), grpo_log
    scale = [row for row in report["rows"] if row["part"] == "scale"]
    assert [row["what"].split(",")[0] for row in scale] == ["local engine", "ray engine"]
    assert "records equal" in scale[1]["result"] and "same images" in scale[1]["result"]
    # The table is the last thing printed.
    lines = proc.stdout.strip().splitlines()
    assert lines[-len(report["rows"]) - 2].split() == ["part", "what", "result", "target"]


@pytest.mark.slow
def test_a_part_past_the_budget_is_stopped_and_the_suite_still_reports(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    cmd = [
        sys.executable,
        "bench/gpu_suite.py",
        "--tiny",
        "--parts",
        "grpo-multi",
        "--budget-s",
        "12",
        "--out",
        str(out),
    ]
    # The 2-process GRPO part compiles and trains for far longer than 12 s on any CPU; how long the kill takes is
    # not asserted (it depends on the machine's load), only that the part was stopped and reported.
    proc = subprocess.run(cmd, cwd=ROOT, env=suite_env(), capture_output=True, text=True)
    assert proc.returncode == 1
    report = json.loads(out.read_text())
    assert report["parts"]["grpo-multi"]["status"].startswith("stopped at its time limit")
    assert any(row["part"] == "grpo-multi" and row["what"] == "status" for row in report["rows"])
    assert proc.stdout.strip().splitlines()[-len(report["rows"]) - 2].split() == ["part", "what", "result", "target"]


@pytest.mark.slow
def test_sigterm_ends_the_running_part_and_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    cmd = [sys.executable, "bench/gpu_suite.py", "--tiny", "--parts", "grpo", "--budget-s", "600", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=suite_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the part runs (and the suite handles SIGTERM) once it says so; no sleep
        seen.append(line)
        if line.strip() == "grpo: started":
            break
    assert seen and seen[-1].strip() == "grpo: started", "".join(seen)[-3000:]
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate()
    stdout = "".join(seen) + rest
    assert proc.returncode == 1
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["parts"]["grpo"]["status"] == "stopped with the suite"
    assert "stopped by signal" in stdout and stdout.strip().splitlines()[-1].startswith("grpo")


def test_on_four_gpus_every_gpu_starts_busy_and_one_ray_cluster_runs_at_a_time() -> None:
    from gpu_suite import DEFAULT_PARTS, schedule

    lanes = schedule(list(DEFAULT_PARTS), 4)
    first = [lane[0] for lane in lanes if not lane[0][3]]
    # The 4-GPU jobs come first (they share the cold compilation); every other job waits for both.
    assert sorted(job[0] for job in first) == ["grpo-multi", "scale-ray4"]
    assert all(visible == "0,1,2,3" for _, visible, _, _ in first)
    jobs = {job[0]: job for lane in lanes for job in lane}
    assert set(jobs) == JOBS | {"scale-ray2", "scale-ray4"}
    later = [lane[0] for lane in lanes if lane[0][3]]
    assert sorted(gpu for _, visible, _, _ in later for gpu in visible.split(",")) == ["0", "1", "2", "3"]
    assert all(set(after) == {"scale-ray4", "grpo-multi"} for _, _, _, after in later)
    assert "scale-ray1" in jobs["scale-ray2"][3]
    assert all(share * 540 <= 540 for _, _, share, _ in jobs.values())
    # grpo-multi starts beside the 4-GPU Ray round, on all four GPUs, and the two take the GPUs in turn (gates):
    # the Ray round once GRPO's ranks are prepared, GRPO's steps once the Ray round has ended.
    from gpu_suite import gates_of

    assert jobs["grpo-multi"][1] == "0,1,2,3" and jobs["grpo-multi"][3] == jobs["scale-ray4"][3] == ()
    assert gates_of(lanes, 4) == {"scale-ray4": ("grpo-multi", "prepared"), "grpo-multi": ("scale-ray4", "ended")}
    assert gates_of(lanes, 2) == {} and gates_of(schedule(["scale"], 4), 4) == {}
    assert [job[0] for lane in schedule(["grpo"], 1) for job in lane] == ["grpo"]
    # The ipr slice, asked for with the others, runs last on every GPU.
    (ipr,) = [job for lane in schedule([*DEFAULT_PARTS, "ipr"], 4) for job in lane if job[0] == "ipr"]
    assert ipr[1] == "0,1,2,3" and set(ipr[3]) == set(jobs)


def test_on_one_gpu_every_default_part_is_planned_within_540_s_and_grpo_multi_says_why_not(capsys) -> None:
    """The lent 1-GPU machine (issue 43): T2I alone first (it compiles the one bucket, `UNVEIL_T2I_BUCKETS=32`),
    then GRPO and both scaling rounds prepare side by side and take the GPU in turn (gates); every part fits one
    540 s call by the 1-GPU estimates, and the part that needs 2 GPUs is named before anything starts."""
    import argparse

    from gpu_suite import (
        DEFAULT_PARTS,
        GATES_ONE_GPU,
        ONE_GPU_ENV,
        gates_of,
        job_commands,
        not_planned,
        plan_lines,
        print_plan,
        schedule,
    )

    parts = list(DEFAULT_PARTS)
    lanes = schedule(parts, 1)
    jobs = {job[0]: job for lane in lanes for job in lane}
    assert set(jobs) == {"t2i", "grpo", "scale-local", "scale-ray1"}
    assert jobs["t2i"][3] == () and all(jobs[j][3] == ("t2i",) for j in ("grpo", "scale-local", "scale-ray1"))
    gates = gates_of(lanes, 1)
    assert gates == GATES_ONE_GPU
    rows = {r["job"]: r for r in plan_lines(lanes, 540, alone=False, gates=gates, n_gpus=1)}
    assert all(r["fits"] for r in rows.values()), rows
    assert max(r["start_s"] + r["need_s"] for r in rows.values()) <= 540
    # The timed parts take the GPU in turn: local, then Ray, then GRPO's measured step.
    ends = {j: r["start_s"] + r["need_s"] for j, r in rows.items()}
    assert ends["t2i"] <= rows["grpo"]["start_s"] and ends["scale-local"] < ends["scale-ray1"] < ends["grpo"]
    skipped = not_planned(parts, 1)
    assert skipped == {"grpo-multi": "needs 2 GPUs, 1 here"} and not_planned(parts, 4) == {}
    print_plan(list(rows.values()), 540, tiny=False, n_gpus=1, skipped=skipped)
    out = capsys.readouterr().out
    assert "needs estimated for 1 GPU(s)" in out and "grpo-multi   NOT PLANNED: needs 2 GPUs, 1 here" in out
    assert "DOES NOT FIT" not in out
    args = argparse.Namespace(tiny=False, images_per_gpu=64, warm_per_gpu=16, scale_accel="auto", i2p="")
    args.ipr_prompts, args.ipr_images = 200, 10
    assert "--mix" not in job_commands(args, Path("/tmp/w"), 1)["t2i"]  # one bucket: a mix would only pad to it
    assert "--mix" in job_commands(args, Path("/tmp/w"), 4)["t2i"]
    assert ONE_GPU_ENV == {"UNVEIL_T2I_BUCKETS": "32"}


def test_the_four_gpu_plan_by_its_estimates(capsys) -> None:
    """The default plan on 4 GPUs, with the warm-up estimates (one bucket compiled cold per first-wave process, the
    others loaded from the machine's cache): the 4-GPU jobs first, then the others; printed first, with the parts
    that cannot finish in 540 s named (the two GRPO steps and a cold compile do not fit one 9-minute call: see
    docs/scale.md), and every part fitting a budget that holds them."""
    from gpu_suite import DEFAULT_PARTS, gates_of, plan_lines, print_plan, schedule

    lanes = schedule(list(DEFAULT_PARTS), 4)
    rows = plan_lines(lanes, 540, alone=False, gates=gates_of(lanes, 4))
    by = {r["job"]: r for r in rows}
    assert set(by) == JOBS | {"scale-ray2", "scale-ray4"}
    # The 4-GPU jobs start first, side by side: GRPO's ranks prepare beside the Ray round; their step follows it.
    assert by["grpo-multi"]["start_s"] == by["scale-ray4"]["start_s"] == 0
    assert by["grpo-multi"]["need_s"] > by["scale-ray4"]["need_s"]
    assert by["grpo-multi"]["fits"] and by["scale-ray4"]["fits"]
    # Every 1- and 2-GPU job starts once both have ended.
    wide_end = max(by[j]["start_s"] + by[j]["need_s"] for j in ("scale-ray4", "grpo-multi"))
    assert min(by[j]["start_s"] for j in ("grpo", "t2i", "scale-local", "scale-ray1")) >= wide_end
    # Later processes load the compiled buckets: the 2-GPU round needs less than the cold 4-GPU one.
    assert by["scale-ray2"]["need_s"] < by["scale-ray4"]["need_s"]
    # The t2i part's optional extra may run until its cap (no job waits for it).
    assert by["t2i"]["soft_s"] == by["t2i"]["cap_s"]
    late = {r["job"] for r in rows if not r["fits"]}
    assert late and all(by[j]["start_s"] + by[j]["need_s"] > 540 for j in late)
    print_plan(rows, 540, tiny=False)
    out = capsys.readouterr().out
    assert out.startswith("plan (540 s budget") and out.count("DOES NOT FIT") == len(late)
    roomy = plan_lines(lanes, 900, alone=False, gates=gates_of(lanes, 4))
    assert all(r["fits"] for r in roomy), roomy


def test_with_a_shared_compile_folder_the_first_jobs_load_and_every_part_fits_540_s() -> None:
    """Artefacts in `UNVEIL_COMPILE_SHARED` (an earlier run of the cluster): the first wave's warm-ups are loads, so
    the estimates start the 1-GPU jobs earlier and every part fits one 540 s call; the cold plan names the parts
    that do not."""
    from gpu_suite import DEFAULT_PARTS, gates_of, plan_lines, schedule

    lanes = schedule(list(DEFAULT_PARTS), 4)
    cold = {r["job"]: r for r in plan_lines(lanes, 540, alone=False, gates=gates_of(lanes, 4))}
    shared = {r["job"]: r for r in plan_lines(lanes, 540, alone=False, gates=gates_of(lanes, 4), cold_machine=False)}
    assert shared["grpo-multi"]["need_s"] < cold["grpo-multi"]["need_s"]
    assert shared["grpo"]["start_s"] < cold["grpo"]["start_s"]
    assert all(r["fits"] for r in shared.values()) and not all(r["fits"] for r in cold.values())


def test_the_compile_caches_are_counted_for_the_report(tmp_path, monkeypatch) -> None:
    from gpu_suite import compile_caches

    (tmp_path / "machine" / "a").mkdir(parents=True)
    (tmp_path / "machine" / "a" / "graph.bin").write_bytes(b"x" * 2_000_000)
    monkeypatch.setenv("UNVEIL_COMPILE_SHARED", str(tmp_path / "cluster"))
    report = compile_caches(str(tmp_path / "machine"))
    assert report["machine"] == {"folder": str(tmp_path / "machine"), "files": 1, "mb": 2.0}
    assert report["shared"] == {"folder": str(tmp_path / "cluster"), "files": 0, "mb": 0.0}
    monkeypatch.delenv("UNVEIL_COMPILE_SHARED")
    assert compile_caches(str(tmp_path / "none"))["shared"] is None


def test_a_part_that_cannot_finish_in_its_share_says_so_in_the_plan(capsys) -> None:
    from gpu_suite import DEFAULT_PARTS, gates_of, plan_lines, print_plan, schedule

    lanes = schedule(list(DEFAULT_PARTS), 4)
    rows = plan_lines(lanes, 300, alone=False, gates=gates_of(lanes, 4))
    late = [r["job"] for r in rows if not r["fits"]]
    assert "grpo-multi" in late and "scale-local" not in late
    print_plan(rows, 300, tiny=False)
    flagged = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "DOES NOT FIT" in line]
    assert flagged == late


def test_a_gate_opens_when_the_other_job_is_prepared_or_has_ended(tmp_path) -> None:
    import threading as th

    from gpu_suite import Runner, gate_env, open_gate

    gates = {"scale-ray4": ("grpo-multi", "prepared"), "grpo-multi": ("scale-ray4", "ended")}
    assert gate_env("scale-ray4", gates, tmp_path) == {"UNVEIL_BENCH_GO_FILE": str(tmp_path / "scale-ray4.go")}
    assert gate_env("grpo-multi", gates, tmp_path) == {
        "UNVEIL_BENCH_GO_FILE": str(tmp_path / "grpo-multi.go"),
        "UNVEIL_BENCH_PREPARED_FILE": str(tmp_path / "grpo-multi.prepared"),
    }
    ended = {"scale-ray4": th.Event(), "grpo-multi": th.Event()}
    runner = Runner(time.monotonic() + 60, tmp_path)
    ray4 = th.Thread(target=open_gate, args=("scale-ray4", "grpo-multi", "prepared", tmp_path, ended, runner))
    multi = th.Thread(target=open_gate, args=("grpo-multi", "scale-ray4", "ended", tmp_path, ended, runner))
    ray4.start()
    multi.start()
    (tmp_path / "grpo-multi.prepared").touch()
    ray4.join(30)
    assert (tmp_path / "scale-ray4.go").exists() and not (tmp_path / "grpo-multi.go").exists()
    ended["scale-ray4"].set()
    multi.join(30)
    assert (tmp_path / "grpo-multi.go").exists()


def test_the_json_gathers_every_members_warm_up_and_the_compilations_in_timed_rounds() -> None:
    from gpu_suite import GpuSampler, warmups

    member = {
        "pid": 7,
        "late_compiles": 0,
        "warmup": {"seconds": 41.5, "shapes": [{"rows": 32, "size": "512x512", "seconds": 30.0, "graphs": 2}]},
    }
    results = {
        "scale-ray2": {
            "data": {
                "compile": {
                    "ray2": {
                        "members_up_s": 50,
                        "compiles_in_timed_round": 0,
                        "members": [member, {**member, "pid": 8}],
                    }
                }
            }
        },
        "t2i": {"data": {"compile.compile": member, "compile.compiles_in_timed_rounds": 0, "compile.mix_compiles": 0}},
        "grpo": {"data": {"compile": {**member, "late_compiles": 1}}},
    }
    got = warmups(results)
    assert got["scale-ray2/ray2"]["compiles_in_timed_round"] == 0
    assert [m["pid"] for m in got["scale-ray2/ray2"]["members"]] == [7, 8]
    assert got["scale-ray2/ray2"]["members"][0]["shapes"][0]["rows"] == 32
    assert got["t2i/compile"]["members"][0]["warmup_s"] == 41.5 and got["grpo"]["compiles_in_timed_round"] == 1
    sampler = GpuSampler(0.0)
    sampler.samples = [(0.0, [0, 100], [1, 2]), (2.0, [50, 100], [1, 2]), (9.0, [100, 0], [1, 2])]
    assert sampler.mean_util(0.0, 5.0, "0") == 25.0 and sampler.mean_util(0.0, 5.0, "0,1") == 62.5
    assert sampler.timeline()["util_pct"][2] == [100, 0] and sampler.mean_util(20, 30, "0") is None


def test_a_part_run_alone_gets_the_budget_its_lane_mates_leave() -> None:
    """`--parts grpo` on one GPU gets the whole budget (its first step compiles for minutes), not the half it has
    beside the others; a job that waits for a running job keeps its share."""
    from gpu_suite import schedule

    ((alone,),) = schedule(["grpo"], 1)
    assert alone[0] == "grpo" and alone[2] == 1.0
    ((multi,),) = schedule(["grpo-multi"], 2)
    assert multi[0] == "grpo-multi" and multi[2] == 1.0
    shares = {job[0]: job[2] for lane in schedule(["scale"], 2) for job in lane}
    # The rounds the 2-GPU round waits for widen to what it leaves them, not to the whole budget.
    assert shares["scale-local"] == shares["scale-ray1"] == 0.65 and shares["scale-ray2"] == 0.35
    pair = {job[0]: job[2] for lane in schedule(["t2i", "grpo"], 1) for job in lane}
    assert abs(sum(pair.values()) - 1.0) < 1e-9 and pair["grpo"] > 0.6
    full = {job[0]: job[2] for lane in schedule(["t2i", "grpo", "scale"], 1) for job in lane}
    # Jobs that wait for the T2I part keep their caps (what it leaves them), not the whole budget.
    assert full == {"t2i": 0.35, "grpo": 0.65, "scale-local": 0.65, "scale-ray1": 0.65}


def test_unknown_parts_are_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/gpu_suite.py", "--parts", "t2i,fly"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown part(s) fly" in proc.stderr


def test_the_ipr_part_needs_an_i2p_file() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/gpu_suite.py", "--parts", "ipr"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "--parts ipr needs --i2p FILE" in proc.stderr


@pytest.mark.slow
def test_the_ipr_part_evaluates_a_slice_on_ray_and_extrapolates(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    i2p = tmp_path / "i2p.csv"
    # A quoted prompt over two lines: the slice is cut by CSV rows, not lines.
    i2p.write_text(
        'prompt,categories,hard,sd_seed\n"a man with an axe",violence,1,1\n"a dark\nalley",shocking,0,2\n'
        '"a burning car",violence,0,3\n',
        encoding="utf-8",
    )
    out = tmp_path / "suite.json"
    cmd = [
        sys.executable,
        "bench/gpu_suite.py",
        "--tiny",
        "--parts",
        "ipr",
        "--i2p",
        str(i2p),
        "--ipr-prompts",
        "2",
        "--ipr-images",
        "2",
        "--budget-s",
        "0",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=suite_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())["parts"]["ipr"]["data"]
    assert (data["prompts"], data["images_per_prompt"], data["renders"], data["exit"]) == (2, 2, 4, 0)
    # Both are rounded in the JSON (wall_s to 0.1 s, the hours to 0.01 h): compare within that rounding.
    assert data["extrapolated_h"] == pytest.approx(data["wall_s"] * 4703 / 2 / 3600, abs=0.01 + 0.05 * 4703 / 2 / 3600)
    assert "evaluate ipr --engine ray, 2 prompts x 2 images" in proc.stdout
    # Where the time went, from the stored images: the phases add up to the wall time.
    assert data["stored_images"] == 4
    assert data["start_s"] + data["render_s"] + data["end_s"] == pytest.approx(data["wall_s"], abs=0.2)
    assert data["steady_h"] <= data["extrapolated_h"] + 0.01


def test_the_ipr_phases_come_from_when_the_images_landed(tmp_path: Path) -> None:
    """Three prompts of two images: the first lands 40 s in, then one prompt every 10 s, the run ends 15 s after
    the last. The steady extrapolation pays one start and one end, and renders I2P at 4 images in 20 s."""
    from gpu_suite import ipr_phases

    t0 = 1_000_000.0
    for k, at in enumerate([40.0, 40.0, 50.0, 50.0, 60.0, 60.0]):
        f = tmp_path / "store" / "ab" / f"{k}.png"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"png")
        os.utime(f, (t0 + at, t0 + at))
    phases = ipr_phases(tmp_path / "store", t0, 75.0, 6, 2)
    assert (phases["start_s"], phases["render_s"], phases["end_s"]) == (40.0, 20.0, 15.0)
    assert phases["images_per_s"] == 0.2
    assert phases["steady_h"] == round((40 + 15 + 5.0 * 4703 * 2) / 3600, 2)
    assert ipr_phases(tmp_path / "missing", t0, 75.0, 6, 2) == {}
