"""The GPU suite: T2I throughput, the GRPO step on 1 and N GPUs and the Ray scaling rows in one command, one table,
one JSON.

Each part is one of the project's benchmarks, run as its own process group (so a part that fails or runs out of
time leaves the others' rows, and nothing it started outlives it):

- `t2i`: `bench/t2i_throughput.py`, batched eager and the default `compile` path, on one GPU;
- `grpo`: `bench/grpo_step.py`, GRPO steps at the paper's settings on one GPU; the first step compiles, the second
  is the one reported;
- `scale`: `bench/scale.py render` on the default (compiled) path: the local engine on one GPU, then the Ray engine
  on 1, 2 and 4 GPUs (counts above the GPUs present are skipped), each Ray round's records compared with the local
  engine's (equal apart from the image bytes; on GPUs an image depends slightly on its batch mates, so the share of
  identical images is reported beside it);
- `grpo-multi`: `bench/grpo_step.py --gpus N` (N = 4, or 2 with two or three GPUs): the same step, data-parallel
  under `accelerate launch`, each rank rendering the reward of its own prompts on its own GPU.

On four GPUs the 4-GPU jobs come first, side by side and gated (the Ray round once GRPO's ranks have taken their
warm-up step, GRPO's measured step once the Ray round has ended): their eight processes share the machine's cold
compilation (one bucket each for the first two, the others load). Then, with the cache warm, GRPO on GPU 0, T2I on
GPU 1, the local round on GPU 2 beside the 1-GPU Ray round on GPU 3, then the 2-GPU Ray round on GPUs 2-3. Every
process shares one Inductor cache (`TORCHINDUCTOR_CACHE_DIR`). With two or three GPUs the rows run two at a time.
With one GPU, T2I runs alone first, then GRPO and both scaling rounds prepare side by side and take the GPU in turn
(`GATES_ONE_GPU`), every process compiling the one bucket the timed rounds use (`ONE_GPU_ENV`); grpo-multi is
named "not planned". With `--tiny` (no GPU) the jobs run one after the other.

At the end every figure is compared with the last and the best committed results of the same GPU model
(`bench/regression_guard.py`): one more than 10% worse is a loud line, a table row and `guard` in the JSON.

Every model is Stable Diffusion 1.5's (and Qwen2.5-VL-3B's, CLIP's) configuration with random weights, built from
configs by the benchmarks themselves: nothing is downloaded.

`ipr` (not among the default parts: it does not fit beside them in 9 minutes; run it alone with `--parts ipr --i2p
FILE`): `unveil evaluate ipr --engine ray` (one render actor per GPU) on the first `--ipr-prompts` (200) prompts of
the I2P CSV or a JSONL of prompts, `--ipr-images` (the paper's 10) images each, Q16 on a random-weight CLIP
ViT-L/14, NudeNet and BLIP off; its wall time, start-up and compile warm-up included, is extrapolated linearly to
I2P's 4,703 prompts (an upper bound: the warm-up is paid once).

    python bench/gpu_suite.py --budget-s 540 --out $OUT   # a 4-GPU machine; ends within the budget
    python bench/gpu_suite.py --parts scale --scale-accel eager
    python bench/gpu_suite.py --parts ipr --i2p I2P.csv --budget-s 540 --out $OUT/gpu_suite-ipr.json
    python bench/gpu_suite.py --tiny                # CPU smoke run on the tiny test models (checks the suite)
    python bench/gpu_suite.py --tiny --budget-s 0   # the same without a time limit (what the test runs)

The JSON (commit, GPU model, versions of torch, diffusers, transformers, TRL and Ray, the rows and every part's
numbers and log tail) is rewritten as each part ends, and once more, with the table printed last, at the end or on
SIGTERM. It goes to `--out` (a file, or a folder for `gpu_suite.json`), else `$OUT/gpu_suite.json` when `$OUT` is
set (the lent GPU machines), else
`bench/results/gpu_suite-<commit>-<machine>.json`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # the guard and the parts' helpers are this folder's modules
from regression_guard import guard_report, guard_rows, loud_lines  # noqa: E402
from t2i_phases import STEPS as PHASE_STEPS  # noqa: E402

PARTS = ("t2i", "grpo", "scale", "grpo-multi", "ipr")
DEFAULT_PARTS = ("t2i", "grpo", "scale", "grpo-multi")  # ipr does not fit beside them in 9 minutes: run it alone
I2P_PROMPTS = 4703
MIX = "24,10,40,1,17"  # the t2i part's mix of concurrent requests: bursts, a lone one, one over max_batch

# Estimated seconds of each job on a machine with 4 GPUs, for the plan printed first (`plan_lines`): a bucket
# compiled cold takes COLD_BUCKET_S (the t2i part's `compile` warm-up in issue 31's 4-GPU run at 6c49ae7), one loaded
# from the machine's cache LOAD_BUCKET_S (the members' warm-ups with a warm cache, 26-38 s for both buckets at
# 4c6947f on 4 H200s and at 5055d75 on 4 H100s); the first processes compile one bucket each side by side
# (`tools.t2i.warmup`) and load the rest, later ones load every bucket. WORK_S is the work besides the warm-up, from
# the parts' earlier runs (bench/results/gpu_suite-4c6947f-*.json, gpu_suite-5055d75-*.json). The members' warm-up
# records in the JSON measure all of it.
COLD_BUCKET_S = 127.0
LOAD_BUCKET_S = 17.0
BUCKETS = 2  # tools.t2i.fast.DEFAULT_BUCKETS
WORK_S = {  # seconds besides the warm-up: builds, Ray start, rounds, steps
    "t2i": 100.0,  # build, 4 baseline images, eager rounds, the compiled round and mix (the dynamic variant: if room)
    # the random models' builds (~70 s), the first step (the decoding's compilation, ~115 s in all at 5055d75),
    # the measured step (~52 s), the report
    "grpo": 250.0,
    "scale-local": 55.0,
    "scale-ray1": 85.0,  # Ray's start and stop around the round
    "scale-ray2": 85.0,
    "scale-ray4": 70.0,
    "grpo-multi": 180.0,  # four ranks' builds, the warm-up step (its decoding's compilation), the measured step
    "ipr": 300.0,
}
# The 4-GPU jobs start together and prepare side by side (Ray, model builds, warm-ups, GRPO's warm-up step), then
# take the GPUs in turn: the Ray round once GRPO's ranks are prepared, GRPO's measured step once the Ray round has
# ended (`UNVEIL_BENCH_PREPARED_FILE` / `UNVEIL_BENCH_GO_FILE`, read by bench/scale.py and bench/grpo_step.py). No
# timed round shares its GPUs. Job -> (the job it waits for, and for what).
GATES = {"scale-ray4": ("grpo-multi", "prepared"), "grpo-multi": ("scale-ray4", "ended")}
# On one GPU the same idea in one lane's time: after the T2I part (alone: its rounds are timed from its first to
# its last minute), GRPO and both scaling rounds start together and prepare side by side (model builds, Ray's
# start, warm-ups, GRPO's first step); the local round's timed part waits until GRPO is prepared, the Ray round's
# until the local one has ended, GRPO's measured step until the Ray round has ended.
GATES_ONE_GPU = {
    "scale-local": ("grpo", "prepared"),
    "scale-ray1": ("scale-local", "ended"),
    "grpo": ("scale-ray1", "ended"),
}
# The timed part of a gated job (after its gate), estimated.
TAIL_S = {"scale-ray4": 35.0, "grpo-multi": 30.0, "scale-local": 30.0, "scale-ray1": 40.0, "grpo": 60.0}
# One GPU: every timed round renders full batches of 32, so the suite compiles that one bucket
# (`UNVEIL_T2I_BUCKETS=32`) instead of two (the graph of bucket 32 is the same either way; bucket 8 serves only
# batches of 1-8, which only the T2I mix has, and the mix does not run there). One cold bucket, compiled by a
# process alone on the machine: 105 s at 7e53b15 on 2x H100 (the T2I part's `compile` warm-up, one bucket then).
ONE_GPU_ENV = {"UNVEIL_T2I_BUCKETS": "32"}
ONE_GPU_COLD_BUCKET_S = 110.0
ONE_GPU_T2I_WORK_S = 70.0  # WORK_S["t2i"] less its mix
PACKAGES = ("torch", "diffusers", "transformers", "trl", "ray")


def versions() -> dict[str, str]:
    """Installed versions of the packages the numbers depend on ("-" when absent)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def commit() -> str:
    """The checkout's commit (with `+dirty` when files differ), or what `UNVEIL_COMMIT` says (a copied tree)."""
    if os.environ.get("UNVEIL_COMMIT"):
        return os.environ["UNVEIL_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def gpus() -> tuple[int, str]:
    """(GPUs visible, their model) without importing torch in this process."""
    try:
        out = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.SubprocessError):
        return 0, "CPU"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        out = out[: len([d for d in visible.split(",") if d.strip()])]
    return len(out), out[0] if out else "CPU"


class Runner:
    """Runs jobs as process groups against one deadline; kills what is still running when asked to stop."""

    def __init__(self, deadline: float, work: Path, t0: float | None = None):
        self.deadline = deadline
        self.t0 = time.monotonic() if t0 is None else t0  # the suite's start: jobs' start times are relative to it
        self.work = work
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()
        self.stopping = False

    def left(self) -> float:
        """Seconds to the deadline (infinite without a budget)."""
        return self.deadline - time.monotonic()

    def wait_for(self, event: threading.Event) -> None:
        """Wait for `event`, at most until the deadline."""
        event.wait(None if math.isinf(self.deadline) else max(0.0, self.left()))

    def run(self, name: str, cmd: list[str], env: dict[str, str], limit: float) -> dict[str, Any]:
        """Run one job for at most `limit` seconds (and never past the deadline); its JSON, status, seconds, log."""
        log = self.work / f"{name}.log"
        started = time.monotonic()
        limit = min(limit, self.left())
        status = "ok"
        if self.stopping or limit < 5:
            status = "not run: no time left in the budget"
        else:
            with open(log, "wb") as fh, self.lock:
                proc = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.procs[name] = proc
            print(f"{name}: started", flush=True)  # from here a stop ends it (SIGTERM's test waits for this)
            try:
                rc = proc.wait(timeout=None if math.isinf(limit) else limit)
                status = "ok" if rc == 0 else f"failed (exit {rc})"
            except subprocess.TimeoutExpired:
                status = f"stopped at its time limit ({limit:.0f} s)"
                self.kill(name)
            if self.stopping and status != "ok":
                status = "stopped with the suite"
            with self.lock:
                self.procs.pop(name, None)
        result_file = self.work / f"{name}.json"
        try:
            data = json.loads(result_file.read_text()) if result_file.is_file() else {}
        except ValueError:
            data = {}
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        return {
            "status": status,
            "seconds": round(time.monotonic() - started, 1),
            "started_s": round(started - self.t0, 1),
            "limit_s": round(limit, 1),
            "data": data,
            "log_tail": tail,
            "command": " ".join(cmd),
            "env": env,
        }

    def kill(self, name: str) -> None:
        """End one job's whole process group: SIGTERM, then SIGKILL after 5 s."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self) -> None:
        """Kill every running job (the suite is stopping)."""
        self.stopping = True
        for name in list(self.procs):
            self.kill(name)


def job_commands(args: argparse.Namespace, work: Path, n_gpus: int) -> dict[str, list[str]]:
    """The command of each job (a part may be several jobs: the scaling rounds)."""
    py = sys.executable
    tiny = ["--tiny"] if args.tiny else []
    t2i = [py, "bench/t2i_throughput.py", *tiny, "--json", str(work / "t2i.json")]
    t2i += (
        # `--busy-cpus 1`: the smoke runs the contended-host switch too (a spinner for its second of timed rounds)
        ["--variants", "eager", "--n", "4", "--rounds", "1", "--steps", "2", "--baseline-n", "1", "--busy-cpus", "1"]
        if args.tiny
        # The default (compiled) path first: it is the figure the guard watches, and on one GPU a cold compilation
        # left no time for it when eager went first (1x H100 at b5a3956: the part was stopped while compiling).
        else ["--variants", "compile,eager,compile+dynamic", "--n", "32", "--rounds", "1", "--baseline-n", "4"]
    )
    t2i += ["--phases"]  # where each variant's timed round went (bench/t2i_phases.py)
    # Bucketed (the default) against a dynamic batch dimension over a mix of batch sizes; the dynamic variant runs
    # only if the part's time limit (`--time-limit-s`, added when the job starts) leaves room for its compilation.
    if args.tiny or n_gpus != 1:  # one GPU compiles bucket 32 alone (`ONE_GPU_ENV`): a mix would only pad to it
        t2i += ["--mix", "2,1" if args.tiny else MIX]
    # The tiny VLM writes noise up to the completion limit: a short limit keeps the CPU run short.
    grpo_args = (
        ["--steps", "1", "--warmup", "1", "--max-completion", "16", "--images-per-prompt", "2"]
        if args.tiny
        else ["--steps", "1", "--warmup", "1"]
    )
    multi = 2 if args.tiny or n_gpus < 4 else 4
    jobs = {
        "t2i": t2i,
        "grpo": [py, "bench/grpo_step.py", *tiny, *grpo_args, "--json", str(work / "grpo.json")],
        "grpo-multi": [
            py,
            "bench/grpo_step.py",
            *tiny,
            *grpo_args,
            "--gpus",
            str(multi),
            "--json",
            str(work / "grpo-multi.json"),
        ],
    }
    sizes = (
        ["--prompts-per-gpu", "4", "--warm", "2"]
        if args.tiny
        else ["--prompts-per-gpu", str(args.images_per_gpu), "--warm", str(args.warm_per_gpu)]
    )
    scale = [py, "bench/scale.py", "render", *tiny, "--accel", args.scale_accel, *sizes]
    jobs["scale-local"] = [
        *scale,
        "--engines",
        "local",
        "--records-out",
        str(work / "scale-local.records.json"),
        "--json",
        str(work / "scale-local.json"),
    ]
    jobs["ipr"] = [
        py,
        "bench/gpu_suite.py",
        "--ipr-job",
        *tiny,
        "--i2p",
        args.i2p or "",
        "--ipr-prompts",
        str(args.ipr_prompts),
        "--ipr-images",
        str(args.ipr_images),
        "--out",
        str(work / "ipr.json"),
    ]
    for n in (1, 2, 4):
        jobs[f"scale-ray{n}"] = [
            *scale,
            "--engines",
            "ray",
            "--gpus",
            str(n),
            "--records-out",
            str(work / f"scale-ray{n}.records.json"),
            "--json",
            str(work / f"scale-ray{n}.json"),
        ]
    return jobs


def ipr_job(i2p: str, prompts: int, images: int, json_out: Path, tiny: bool) -> int:
    """The `ipr` part's job: `unveil evaluate ipr --engine ray` on the first `prompts` prompts of the I2P file with
    `images` images each (one Ray render actor per GPU), random-weight SD-1.5 and Q16 CLIP built here; the wall time
    (start-up and compile warm-up included) and its extrapolation to I2P's prompts go to `json_out`."""
    import csv
    import io

    import numpy as np

    sys.path.insert(0, str(ROOT))
    work = Path(tempfile.mkdtemp(prefix="gpu-suite-ipr-"))
    src = Path(i2p)
    if not src.is_file():
        raise SystemExit(f"--i2p {i2p}: no such file (the I2P CSV or a JSONL of prompts)")
    text = src.read_text(encoding="utf-8")
    if src.suffix.lower() == ".csv":
        reader = csv.reader(io.StringIO(text))
        rows = [row for _, row in zip(range(prompts + 1), reader, strict=False)]
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        sliced = work / "slice.csv"
        sliced.write_text(buf.getvalue(), encoding="utf-8")
        n = len(rows) - 1
    else:
        lines = [line for line in text.splitlines() if line.strip()][:prompts]
        sliced = work / "slice.jsonl"
        sliced.write_text("\n".join(lines) + "\n", encoding="utf-8")
        n = len(lines)
    if tiny:
        from tests.tiny import TINY_IMAGE_SIZE, build_tiny_clip, build_tiny_sd

        sd, clip, size, steps = build_tiny_sd(work / "sd"), build_tiny_clip(work / "clip"), TINY_IMAGE_SIZE, 2
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from grpo_step import build_clip
        from t2i_throughput import build_sd15_random

        sd, clip, size, steps = build_sd15_random(work / "sd15", "cuda"), build_clip(work, "L14"), 512, 50
        import torch

        torch.cuda.empty_cache()  # the render actors, not this process, use the GPUs from here on
    np.save(work / "q16.npy", np.random.RandomState(0).randn(2, 768).astype("float16"))
    cmd = [
        sys.executable,
        "-m",
        "unveil.cli",
        "evaluate",
        "ipr",
        "--engine",
        "ray",
        "--prompts",
        str(sliced),
        "--generator",
        f"sd=diffusers:{sd}",
        "--images-per-prompt",
        str(images),
        "--width",
        str(size),
        "--height",
        str(size),
        "--steps",
        str(steps),
        "--q16-embeddings",
        str(work / "q16.npy"),
        "--q16-clip-model",
        clip,
        "--no-nudenet",
        "--no-blip",
        "--no-progress",
        "--concurrency",
        "64",
        "--image-store",
        str(work / "store"),
        "--out",
        str(work / "run"),
    ]
    print("running:", " ".join(cmd), flush=True)
    started, started_at = time.perf_counter(), time.time()
    # The repository first, then whatever the caller's path held (on the lent machines: the carried wheels).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": path}).returncode
    wall = time.perf_counter() - started
    report = {
        "prompts": n,
        "images_per_prompt": images,
        "renders": n * images,
        "wall_s": round(wall, 1),
        "exit": rc,
        "i2p_prompts": I2P_PROMPTS,
        # The whole slice's wall time scaled up: an upper bound (the start-up and the end are paid once per run).
        "extrapolated_h": round(wall * I2P_PROMPTS / max(1, n) / 3600, 2),
        **ipr_phases(work / "store", started_at, wall, n * images, images),
    }
    json_out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report), flush=True)
    return rc


def ipr_phases(store: Path, started_at: float, wall: float, renders: int, images: int) -> dict[str, Any]:
    """Where the ipr slice's wall time went, from the times its images landed in the run's store: `start_s` until
    the first image (Ray, the members' model loads and compile warm-ups), `render_s` from the first image to the
    last, `end_s` after the last (the last scores, the report, Ray's stop). `steady_h` is I2P at the slice's
    rendering rate plus one start and one end; an empty store (a failed run) gives no phases."""
    stamps = sorted(f.stat().st_mtime for f in store.rglob("*.png")) if store.is_dir() else []
    if len(stamps) < 2 * images:
        return {}
    first, last = stamps[0] - started_at, stamps[-1] - started_at
    # The images counted after the first one's batch: a prompt's images land together, so the first prompt's
    # rendering time is not inside `render_s`.
    timed = sum(1 for t in stamps if t - started_at > first + 1.0)
    per_render = (last - first) / max(1, timed)
    steady = first + (wall - last) + per_render * I2P_PROMPTS * images
    return {
        "stored_images": len(stamps),
        "start_s": round(first, 1),
        "render_s": round(last - first, 1),
        "end_s": round(wall - last, 1),
        "images_per_s": round(1 / per_render, 2) if per_render else None,
        "steady_h": round(steady / 3600, 2),
    }


def scale_rows(work: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """The scaling rows from the rounds' record files: rate, speed-up over the local engine, records compared."""
    from scale import compare_records  # bench/scale.py (this file's folder is on sys.path)

    def load(name: str) -> dict[str, Any] | None:
        f = work / f"{name}.records.json"
        try:
            return next(iter(json.loads(f.read_text()).values())) if f.is_file() else None
        except (ValueError, StopIteration):
            return None

    local = load("scale-local")
    rows = []
    for name in ("scale-local", "scale-ray1", "scale-ray2", "scale-ray4"):
        if name not in results:
            continue
        got = load(name)
        if got is None:
            continue
        row: dict[str, Any] = {
            "engine": "local" if name == "scale-local" else "ray",
            "GPUs": got["gpus"],
            "images": len(got["records"]),
            "images/s": round(got["rate"], 2),
        }
        if local is not None:
            row["speed-up"] = round(got["rate"] / local["rate"], 2)
            if name != "scale-local":
                same, share = compare_records(local["records"], got["records"])
                row["records"] = "equal" if same else "DIFFER"
                row["same images"] = round(share, 3)
        rows.append(row)
    return rows


def _member_record(stats: dict[str, Any]) -> dict[str, Any]:
    """One member's warm-up, short: its seconds, the shapes it compiled or loaded, compilations after it."""
    warm = stats.get("warmup") or {}
    return {
        "pid": stats.get("pid", warm.get("pid")),
        "warmup_s": warm.get("seconds"),
        "shapes": [
            {k: r.get(k) for k in ("rows", "size", "seconds", "waited_s", "graphs", "fx_cache_hits", "fx_cache_misses")}
            for r in warm.get("shapes", [])
        ],
        "shared": warm.get("shared"),
        "late_compiles": stats.get("late_compiles", 0),
        "late_shapes": stats.get("late_shapes", []),
    }


def warmups(results: dict[str, Any]) -> dict[str, Any]:
    """Every job's compile record, gathered from the parts' JSON: each member's (or process's) warm-up and the
    compilations that happened after it (inside timed rounds: `compiles_in_timed_round` must be 0)."""
    out: dict[str, Any] = {}
    for name, res in results.items():
        data = res.get("data") or {}
        if name.startswith("scale-"):
            for round_name, rec in (data.get("compile") or {}).items():
                out[f"{name}/{round_name}"] = {
                    "members_up_s": rec.get("members_up_s"),
                    "compiles_in_timed_round": rec.get("compiles_in_timed_round"),
                    "members": [_member_record(m) for m in rec.get("members", [])],
                }
        elif name == "t2i":
            for key, value in data.items():
                if key.endswith(".compile") and value:
                    variant = key.removesuffix(".compile")
                    out[f"t2i/{variant}"] = {
                        "compiles_in_timed_round": data.get(f"{variant}.compiles_in_timed_rounds"),
                        "mix_compiles": data.get(f"{variant}.mix_compiles"),
                        "members": [_member_record(value)],
                    }
        elif name.startswith("grpo") and data.get("compile"):
            out[name] = {
                "compiles_in_timed_round": data["compile"].get("late_compiles"),
                "members": [_member_record(data["compile"])],
            }
    return out


def rows_of(results: dict[str, Any], work: Path, n_gpus: int, jobs: list[str]) -> list[dict[str, str]]:
    """One table row per measured figure (and one per job that produced none, with its status)."""
    rows: list[dict[str, str]] = []

    def add(part: str, what: str, value: str, target: str = "") -> None:
        rows.append({"part": part, "what": what, "result": value, "target": target})

    t2i = results.get("t2i")
    if t2i:
        d = t2i["data"]
        if "baseline_img_per_s" in d:
            add("t2i", "one pipeline call per prompt", f"{d['baseline_img_per_s']:.2f} images/s")
        for variant in ("eager", "compile", "compile+dynamic"):
            if f"{variant}.batched_img_per_s" in d:
                add(
                    "t2i",
                    f"batched {variant}",
                    f"{d[f'{variant}.batched_img_per_s']:.2f} images/s "
                    f"(warm-up {d.get(f'{variant}.warmup_s', 0):.0f} s)",
                    ">= 5.0 (compile)" if variant == "compile" else "",
                )
            elif f"{variant}.error" in d:
                add("t2i", f"batched {variant}", d[f"{variant}.error"][:80])
        for variant in ("eager", "compile"):
            phases = d.get(f"{variant}.phases")
            if phases:
                steps = ", ".join(f"{step} {phases[step]['wall_ms_per_image']:.0f}" for step in PHASE_STEPS)
                add(
                    "t2i",
                    f"where {variant}'s round went, wall ms per image",
                    f"{steps} (round {phases['round_s']:.1f} s)",
                )
        for variant in ("compile", "compile+dynamic"):
            if f"{variant}.mix_img_per_s" in d:
                add(
                    "t2i",
                    f"mix {d[f'{variant}.mix']} of {variant}",
                    f"{d[f'{variant}.mix_img_per_s']:.2f} images/s (warm-up {d.get(f'{variant}.warmup_s', 0):.0f} s, "
                    f"{d.get(f'{variant}.mix_compiles', 0)} compilation(s) after it)",
                    "bucketed vs dynamic",
                )
            elif f"{variant}.skipped" in d:
                add("t2i", f"batched {variant}", d[f"{variant}.skipped"])
    for name in ("grpo", "grpo-multi"):
        res = results.get(name)
        m = res["data"].get("measured") if res else None
        if res and m:
            n = res["data"].get("processes", 1)
            parts = ", ".join(
                f"{k} {v:.1f}" for k, v in m.items() if k not in ("step_s", "images") and isinstance(v, (int, float))
            )
            first = res["data"].get("steps", [{}])[0].get("step_s", 0.0)
            losses = ", ".join(f"{x:.4g}" for x in res["data"].get("losses", []))
            rewards = ", ".join(f"{x:.4g}" for x in res["data"].get("rewards", []))
            add(
                name,
                f"GRPO step, {n} GPU(s)" if n_gpus else f"GRPO step, {n} process(es)",
                f"{m['step_s']:.1f} s (first step {first:.0f} s; {parts}; losses {losses}; rewards {rewards})",
                "<= 40 s" if n == 1 else "<= 12 s on 4",
            )
    srows = scale_rows(work, results) if any(j.startswith("scale-") for j in results) else []
    for r in srows:
        target = {2: ">= 1.9x", 4: ">= 3.6x"}.get(r["GPUs"], "") if r["engine"] == "ray" else ""
        same = r.get("same images")
        add(
            "scale",
            f"{r['engine']} engine, {r['GPUs']} GPU(s), {r['images']} images",
            f"{r['images/s']} images/s, {r.get('speed-up', '-')}x, records {r.get('records', '-')} (apart from the "
            f"image bytes), same images {'-' if same is None else f'{same:.0%}'}",
            target,
        )
    for n in (2, 4):
        if f"scale-ray{n}" in jobs and n > max(n_gpus, 1) and n_gpus:
            add("scale", f"ray engine, {n} GPUs", f"not measured: {n_gpus} GPUs here")
    for name, rec in warmups(results).items():
        times = ", ".join(f"{m['warmup_s']:.0f}" for m in rec["members"] if m.get("warmup_s") is not None)
        late = rec.get("compiles_in_timed_round")
        add(
            name.split("/")[0],
            f"warm-up {name}",
            f"member warm-up(s) {times or '-'} s; compilations in the timed round: {'-' if late is None else late}",
            "0 compilations",
        )
    ipr = results.get("ipr")
    if ipr and ipr["data"].get("exit") == 0:
        d = ipr["data"]
        add(
            "ipr",
            f"evaluate ipr --engine ray, {d['prompts']} prompts x {d['images_per_prompt']} images, {n_gpus} GPU(s)",
            f"{d['wall_s']:.0f} s (start-up and warm-up included) -> {d['extrapolated_h']:.2f} h "
            f"for I2P's {d['i2p_prompts']} prompts as an upper bound"
            + (
                f"; {d['start_s']:.0f} s to the first image, {d['render_s']:.0f} s rendering at "
                f"{d['images_per_s']} images/s, {d['end_s']:.0f} s after the last -> {d['steady_h']:.2f} h "
                "(one start and one end)"
                if "steady_h" in d
                else ""
            ),
            "<= 1.5 h for I2P",
        )
    elif not ipr:
        add(
            "ipr",
            "evaluate ipr --engine ray, 200-prompt slice",
            "not run (run `--parts ipr --i2p FILE` alone)",
            "<= 1.5 h for I2P",
        )
    for name in jobs:
        res = results.get(name)
        if res is None:
            add(name, "status", "not run (the suite stopped first)")
        elif res["status"] != "ok" or not any(r["part"] in (name, name.split("-")[0]) for r in rows):
            add(name, "status", f"{res['status']} after {res['seconds']:.0f} s")
    return rows


def folder_size(folder: str) -> dict[str, Any]:
    """How many files `folder` holds and their megabytes (none when it does not exist)."""
    path = Path(folder)
    files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else []
    return {"folder": folder, "files": len(files), "mb": round(sum(f.stat().st_size for f in files) / 1e6, 1)}


def compile_caches(machine_cache: str) -> dict[str, Any]:
    """The compile caches the jobs see: the machine's Inductor folder and, with `UNVEIL_COMPILE_SHARED`, the
    cluster's shared folder (a run's start tells whether it began cold, warm or from a shared folder)."""
    shared = os.environ.get("UNVEIL_COMPILE_SHARED", "")
    return {"machine": folder_size(machine_cache), "shared": folder_size(shared) if shared else None}


def table(rows: list[dict[str, str]]) -> str:
    """A plain-text table of the rows."""
    cols = ["part", "what", "result", "target"]
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(r[c].ljust(w) for c, w in zip(cols, widths, strict=True)) for r in rows]
    return "\n".join(lines)


Job = tuple[str, str, float, tuple[str, ...]]


def schedule(parts: list[str], n_gpus: int) -> list[list[Job]]:
    """Lanes of jobs (name, CUDA_VISIBLE_DEVICES, share of the budget, jobs it waits for): lanes run side by side,
    the jobs of a lane one after the other, each once the jobs it waits for have ended (whatever their outcome; a job
    that is not run counts as ended), so a job on every GPU never shares one with another, whichever parts run; a
    job's share caps its time (`Runner` also stops it at the deadline). At most one Ray cluster runs at a time."""
    everything = ("t2i", "grpo", "scale-local", "scale-ray1", "scale-ray2")
    if n_gpus >= 4:
        # The 4-GPU jobs first: their eight processes share the cold compilation (a later process would only load),
        # and the GRPO step, the longest 1-GPU job, then has the rest of the budget with the cache warm. Shares are
        # caps (the suite's deadline caps every job too), sized from `estimate_s` with some room.
        wide = ("scale-ray4", "grpo-multi")
        lanes: list[list[Job]] = [
            # Side by side, gated (`GATES`): the Ray round, then GRPO's measured step.
            [("scale-ray4", "0,1,2,3", 0.65, ())],
            [("grpo-multi", "0,1,2,3", 0.7, ())],
            [("grpo", "0", 0.6, wide)],
            [("t2i", "1", 0.5, wide)],
            [("scale-local", "2", 0.3, wide), ("scale-ray2", "2,3", 0.3, ("scale-ray1",))],
            [("scale-ray1", "3", 0.35, wide)],
        ]
    elif n_gpus >= 2:
        lanes = [
            [("grpo", "0", 0.5, ()), ("scale-local", "0", 0.3, ())],
            [("t2i", "1", 0.45, ()), ("scale-ray1", "1", 0.3, ())],
            [("scale-ray2", "0,1", 0.35, everything[:-1]), ("grpo-multi", "0,1", 0.45, everything)],
        ]
    elif n_gpus == 1:
        # T2I alone first (it compiles the machine's one bucket), then the rest side by side, gated
        # (`GATES_ONE_GPU`). grpo-multi needs two GPUs: not planned (`not_planned`).
        lanes = [
            [("t2i", "0", 0.35, ())],
            [("grpo", "0", 0.65, ("t2i",))],
            [("scale-local", "0", 0.65, ("t2i",))],
            [("scale-ray1", "0", 0.65, ("t2i",))],
        ]
    else:
        visible = ""
        lanes = [
            [
                (j, visible, share, ())
                for j, share in (
                    ("t2i", 0.3),
                    ("grpo", 0.5),
                    ("scale-local", 0.3),
                    ("scale-ray1", 0.3),
                    ("grpo-multi", 0.5),
                )
            ]
        ]
    lanes.append([("ipr", ",".join(map(str, range(n_gpus))), 1.0, tuple(j for lane in lanes for j, *_ in lane))])
    want = {
        "ipr": "ipr" in parts,
        "t2i": "t2i" in parts,
        "grpo": "grpo" in parts,
        "grpo-multi": "grpo-multi" in parts,
        **{j: "scale" in parts for j in ("scale-local", "scale-ray1", "scale-ray2", "scale-ray4")},
    }
    lanes = [[job for job in lane if want[job[0]]] for lane in lanes]
    return widen([lane for lane in lanes if lane])


def widen(lanes: list[list[Job]]) -> list[list[Job]]:
    """Give the budget left by parts not asked for to the jobs that run: a lane whose jobs wait for no job that
    runs has its shares scaled to sum to 1 (so `--parts grpo` alone gets the whole budget, not half of it), or, if
    running jobs wait for it, to what the largest of those leaves."""
    running = {job[0] for lane in lanes for job in lane}
    out = []
    for lane in lanes:
        total = sum(share for _, _, share, _ in lane)
        waits = any(set(after) & running for _, _, _, after in lane)
        names = {name for name, *_ in lane}
        # A lane other jobs wait for widens only up to what the largest of them leaves: to 1, it could take
        # the later jobs' time.
        later = [share for ln in lanes for _, _, share, after in ln if set(after) & names]
        target = max(total, 1.0 - max(later)) if later else 1.0
        if waits or total >= target:
            out.append(lane)
        else:
            out.append([(name, gpus, share * target / total, after) for name, gpus, share, after in lane])
    return out


def estimate_s(job: str, cold: bool, n_gpus: int = 4) -> float:
    """Estimated seconds of `job` (see `WORK_S`) on a machine of `n_gpus`: its work plus its warm-up, compiling one
    bucket cold and loading the others when it starts on a cold machine cache (`cold`), loading every bucket
    otherwise. One GPU: one bucket (`ONE_GPU_ENV`), compiled by a process alone, and no T2I mix."""
    buckets, cold_bucket, work = BUCKETS, COLD_BUCKET_S, WORK_S[job]
    if n_gpus == 1:
        buckets, cold_bucket = 1, ONE_GPU_COLD_BUCKET_S
        work = ONE_GPU_T2I_WORK_S if job == "t2i" else work
    warm = cold_bucket + (buckets - 1) * LOAD_BUCKET_S if cold else buckets * LOAD_BUCKET_S
    return work + warm


def gates_of(plan: list[list[Job]], n_gpus: int) -> dict[str, tuple[str, str]]:
    """The gates that apply, between jobs that both run: `GATES` on 4 GPUs, `GATES_ONE_GPU` on one."""
    names = {job[0] for lane in plan for job in lane}
    table = GATES if n_gpus >= 4 else GATES_ONE_GPU if n_gpus == 1 else {}
    return {j: g for j, g in table.items() if j in names and g[0] in names}


def not_planned(parts: list[str], n_gpus: int) -> dict[str, str]:
    """The default jobs a machine of `n_gpus` cannot run, and why (said in the plan and the table)."""
    if "grpo-multi" in parts and n_gpus == 1:
        return {"grpo-multi": "needs 2 GPUs, 1 here"}
    return {}


def gated_end(
    name: str, start: float, gates: dict[str, tuple[str, str]], cold_machine: bool = True, n_gpus: int = 4
) -> float:
    """When a job ends by the estimates: `start` plus its need, or, gated, its preparation, then its gate (the
    jobs of a gated group start together), then its timed part. `cold_machine`: the first jobs compile (no shared
    compile folder with artefacts to load)."""
    cold = cold_machine and start < 1.0
    if name not in gates:
        return start + estimate_s(name, cold, n_gpus)
    other, kind = gates[name]
    prep = estimate_s(name, cold, n_gpus) - TAIL_S[name]
    if kind == "prepared":
        go = start + estimate_s(other, cold, n_gpus) - TAIL_S[other]
    else:
        go = gated_end(other, start, gates, cold_machine, n_gpus)
    return max(start + prep, go) + TAIL_S[name]


def plan_lines(
    plan: list[list[Job]],
    budget: float,
    alone: bool,
    gates: dict[str, tuple[str, str]] | None = None,
    cold_machine: bool = True,
    n_gpus: int = 4,
) -> list[dict[str, Any]]:
    """The plan as the suite expects it to run: each job's GPUs, its cap (share of the budget), its estimated
    need (for a gated job, its gate's wait included), the start and end the estimates give, and whether it fits
    (ends within its cap and the budget). `alone`: a single part, which has the whole budget."""
    gates = gates or {}
    ends: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    names = [job[0] for lane in plan for job in lane]
    while len(ends) < len(names):  # the lanes form a DAG: each pass settles at least one job
        progressed = False
        for lane in plan:
            at = 0.0
            for name, visible, share, after in lane:
                if name in ends:
                    at = ends[name]
                    continue
                waits = [a for a in after if a in names]
                if any(a not in ends for a in waits):
                    break
                start = max([at, *(ends[a] for a in waits)])
                cap = min(budget if alone else share * budget, max(0.0, budget - start))
                need = gated_end(name, start, gates, cold_machine, n_gpus) - start
                ends[name] = start + min(need, cap)
                rows[name] = {
                    "job": name,
                    "GPUs": visible or "-",
                    "start_s": round(start),
                    "cap_s": round(cap) if math.isfinite(cap) else None,  # None: no budget (--budget-s 0)
                    "need_s": round(need),
                    "fits": need <= cap,
                }
                at = ends[name]
                progressed = True
        if not progressed:
            break
    for name, row in rows.items():
        # Until the first job that waits for this one is due to start: what an optional extra (the t2i part's
        # dynamic-batch variant) may use without delaying the later jobs.
        due = [rows[w]["start_s"] for lane in plan for w, _, _, after in lane if name in after and w in rows]
        cap_s = math.inf if row["cap_s"] is None else row["cap_s"]
        soft = min([cap_s, *(d - row["start_s"] for d in due)])
        row["soft_s"] = round(soft) if math.isfinite(soft) else None
    return [rows[n] for n in names if n in rows]


def print_plan(
    rows: list[dict[str, Any]], budget: float, tiny: bool, n_gpus: int = 4, skipped: dict[str, str] | None = None
) -> None:
    """The plan, before anything starts: a job that will not fit in its cap, or that this machine cannot run,
    says so here."""
    total = f"{budget:.0f} s budget" if math.isfinite(budget) else "no budget"
    count = "4 H100s" if n_gpus >= 4 else f"{n_gpus} GPU(s)"
    print(f"plan ({total}; needs estimated for {count}, see WORK_S{', not for --tiny' if tiny else ''}):")
    for job, why in (skipped or {}).items():
        print(f"  {job:<12} NOT PLANNED: {why}", flush=True)
    for r in rows:
        verdict = "fits" if r["fits"] else "DOES NOT FIT: it will be stopped at its cap"
        print(
            f"  {r['job']:<12} GPUs {r['GPUs']:<8} start ~{r['start_s']:>4} s  cap {r['cap_s'] or '-':>4} s  "
            f"needs ~{r['need_s']:>4} s  {'-' if tiny else verdict}",
            flush=True,
        )


class GpuSampler:
    """`nvidia-smi` every `interval` seconds on a thread: each GPU's utilisation and memory over the suite's run
    (what the GPUs wait for shows as idle stretches), and each job's mean utilisation from it."""

    def __init__(self, t0: float, interval: float = 2.0):
        self.t0 = t0
        self.interval = interval
        self.samples: list[tuple[float, list[int], list[int]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nvidia-smi", daemon=True)

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        while not self.stop.is_set():
            try:
                out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout
                rows = [[int(float(x)) for x in line.split(",")] for line in out.strip().splitlines()]
                self.samples.append((round(time.monotonic() - self.t0, 1), [r[0] for r in rows], [r[1] for r in rows]))
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                return  # no nvidia-smi here (CPU runs): no timeline
            self.stop.wait(self.interval)

    def timeline(self) -> dict[str, Any]:
        """The samples: seconds since the suite started, utilisation % and memory MiB of every GPU."""
        samples = list(self.samples)
        return {
            "interval_s": self.interval,
            "t_s": [t for t, _, _ in samples],
            "util_pct": [u for _, u, _ in samples],
            "mem_mib": [m for _, _, m in samples],
        }

    def mean_util(self, start: float, end: float, gpus: str) -> float | None:
        """Mean utilisation of the GPUs `gpus` ("0,1") between `start` and `end` (suite seconds)."""
        picked = [int(g) for g in gpus.split(",") if g.strip().isdigit()]
        values = [u[g] for t, u, _ in list(self.samples) if start <= t <= end for g in picked if g < len(u)]
        return round(sum(values) / len(values), 1) if values else None


def gate_env(job: str, gates: dict[str, tuple[str, str]], work: Path) -> dict[str, str]:
    """The gate files of `job` (`GATES`): the one it waits for before its timed part, the one it creates once
    prepared (when another job waits for that)."""
    env = {}
    if job in gates:
        env["UNVEIL_BENCH_GO_FILE"] = str(work / f"{job}.go")
    if any(other == job and kind == "prepared" for other, kind in gates.values()):
        env["UNVEIL_BENCH_PREPARED_FILE"] = str(work / f"{job}.prepared")
    return env


def open_gate(job: str, other: str, kind: str, work: Path, ended: dict[str, threading.Event], runner: Runner) -> None:
    """Open `job`'s gate (create its go file) once `other` is prepared (its file exists) or has ended, as `kind`
    asks; a job that ended early (failed, stopped) opens it too, so nothing waits for ever."""
    while runner.left() > 0 and not ended[job].is_set():
        if ended[other].is_set() or (kind == "prepared" and (work / f"{other}.prepared").exists()):
            (work / f"{job}.go").touch()
            return
        time.sleep(0.5)


def guard_of(out: Path) -> dict[str, Any]:
    """The regression guard's report as the suite wrote it into `out` (empty for a tiny run)."""
    try:
        return dict(json.loads(out.read_text()).get("guard") or {})
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for within the budget; write the JSON as each ends; print the table last."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny test models")
    ap.add_argument(
        "--parts", default=",".join(DEFAULT_PARTS), help=f"parts to run, of {', '.join(PARTS)} (default: all but ipr)"
    )
    ap.add_argument("--i2p", default="", help="the I2P CSV (or a JSONL of prompts) the ipr part takes its slice of")
    ap.add_argument("--ipr-prompts", type=int, default=200, help="prompts of the ipr slice")
    ap.add_argument("--ipr-images", type=int, default=10, help="images per prompt of the ipr slice (the paper's 10)")
    ap.add_argument("--ipr-job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="seconds for the whole suite: every job is stopped by then, the table follows at once (0: no limit, "
        "every part runs to its end)",
    )
    ap.add_argument(
        "--scale-accel",
        default="auto",
        choices=("auto", "eager", "compile"),
        help="UNet path of the scaling rows (auto: compile on GPUs, the default path)",
    )
    ap.add_argument("--images-per-gpu", type=int, default=64, help="timed images per GPU of each scaling round")
    ap.add_argument(
        "--warm-per-gpu",
        type=int,
        default=16,
        help="untimed images per GPU before each scaling round, once every member is up (each member compiled "
        "its buckets before it came up: this round only forms the batches)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="the JSON file, or a folder for gpu_suite.json (default: $OUT/gpu_suite.json or bench/results/)",
    )
    args = ap.parse_args(argv)
    if args.ipr_job:
        return ipr_job(args.i2p, args.ipr_prompts, args.ipr_images, Path(args.out), args.tiny)
    parts = [p for p in args.parts.split(",") if p]
    if "ipr" in parts and not args.i2p:
        ap.error("--parts ipr needs --i2p FILE (the I2P CSV or a JSONL of prompts)")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(unknown)}; use {', '.join(PARTS)}")
    started = time.monotonic()
    n_gpus, gpu_model = (0, "CPU") if args.tiny else gpus()
    work = Path(tempfile.mkdtemp(prefix="gpu-suite-"))
    commands = job_commands(args, work, n_gpus)
    plan = schedule(parts, n_gpus)
    jobs = [job[0] for lane in plan for job in lane]
    ended = {job: threading.Event() for job in commands}
    for job in set(commands) - set(jobs):
        ended[job].set()  # a job not asked for is never waited for
    # One Inductor cache for every process: later processes compile from the graphs the first ones compiled.
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(Path.home() / ".cache" / "unveil" / "inductor")
    machine = f"{n_gpus}x {gpu_model}" if n_gpus else f"CPU ({platform.node()})"
    if args.out:
        out = Path(args.out) / "gpu_suite.json" if Path(args.out).is_dir() else Path(args.out)
    elif os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "gpu_suite.json"
    else:
        slug = "".join(c if c.isalnum() else "-" for c in machine).strip("-").lower()
        out = ROOT / "bench" / "results" / f"gpu_suite-{commit().split('+')[0]}-{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.budget_s < 0:
        ap.error("--budget-s: expected seconds >= 0 (0: no limit)")
    budget = args.budget_s or math.inf
    runner = Runner(started + budget, work, started)
    results: dict[str, Any] = {}
    gates = gates_of(plan, n_gpus)
    # Artefacts in the cluster's shared compile folder (`UNVEIL_COMPILE_SHARED`): the first jobs load, not compile.
    cold_machine = not (compile_caches(cache)["shared"] or {}).get("files")
    planned = plan_lines(plan, budget, len(parts) == 1, gates, cold_machine, n_gpus)
    skipped = not_planned(parts, n_gpus)
    print_plan(planned, budget, args.tiny, n_gpus, skipped)
    sampler = GpuSampler(started)
    if n_gpus:
        sampler.thread.start()
    write_lock = threading.Lock()
    base = {
        "commit": commit(),
        "machine": machine,
        "gpu_model": gpu_model,
        "gpus": n_gpus,
        "tiny": args.tiny,
        "versions": versions(),
        "python": platform.python_version(),
        "budget_s": args.budget_s,
        "plan": [[f"{j} (GPUs {g or '-'})" for j, g, _, _ in lane] for lane in plan],
        "plan_estimates": planned,
        "gates": gates,
        "estimate_assumptions": (
            {"cold_bucket_s": ONE_GPU_COLD_BUCKET_S, "load_bucket_s": LOAD_BUCKET_S, "buckets": 1, "env": ONE_GPU_ENV}
            if n_gpus == 1
            else {"cold_bucket_s": COLD_BUCKET_S, "load_bucket_s": LOAD_BUCKET_S, "buckets": BUCKETS}
        ),
        "not_planned": skipped,
        "compile_caches_at_start": compile_caches(cache),
    }

    def write(final: bool = False) -> list[dict[str, str]]:
        with write_lock:
            rows = rows_of(results, work, n_gpus, jobs if final else list(results))
            rows += [
                {"part": j, "what": "status", "result": f"not planned: {why}", "target": ""}
                for j, why in skipped.items()
            ]
            report = {
                **base,
                "seconds": round(time.monotonic() - started, 1),
                "complete": final,
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "rows": rows,
                "parts": dict(results),
                "warmups": warmups(results),
                "compile_caches": compile_caches(cache),
                "gpu_timeline": sampler.timeline(),
            }
            if final and not args.tiny:
                # Every figure against the last and the best committed runs on this GPU model (regression_guard.py).
                report["guard"] = guard_report(report, exclude=out)
                rows = [*rows, *guard_rows(report["guard"])]
                report["rows"] = rows
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(report, indent=1, default=str))
            tmp.replace(out)  # a reader never sees half a file
            return rows

    def finish(reason: str = "") -> int:
        sampler.stop.set()
        rows = write(final=True)
        for line in loud_lines(guard_of(out)):
            print(line, flush=True)
        print(
            f"GPU suite on {machine}, commit {base['commit']}, {time.monotonic() - started:.0f} s{reason}; "
            + ", ".join(f"{k} {v}" for k, v in base["versions"].items())
            + f"; JSON: {out}",
            flush=True,
        )
        print(table(rows), flush=True)
        return 0 if jobs and all(results.get(j, {}).get("status") == "ok" for j in jobs) else 1

    def on_signal(signum: int, _frame: Any) -> None:
        runner.stop_all()
        until = time.monotonic() + 15  # the lanes record the jobs just stopped
        for job in jobs:
            ended[job].wait(max(0.0, until - time.monotonic()))
        finish(f" (stopped by signal {signum})")
        os._exit(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def run_lane(lane: list[Job]) -> None:
        for job, visible, share, after in lane:
            try:
                for other in after:
                    runner.wait_for(ended[other])
                env = {"TORCHINDUCTOR_CACHE_DIR": cache, **gate_env(job, gates, work)}
                if n_gpus == 1:
                    env.update(ONE_GPU_ENV)
                if n_gpus:
                    env["CUDA_VISIBLE_DEVICES"] = visible
                # A part run alone has the whole budget; among others, its share leaves the later jobs theirs.
                limit = min(share * budget if len(parts) > 1 else budget, runner.left())
                now = time.monotonic() - started
                need = gated_end(job, now, gates, cold_machine, n_gpus) - now
                cap = f"{limit:.0f} s" if math.isfinite(limit) else "no limit"
                print(
                    f"[{time.monotonic() - started:5.0f} s] {job}: starting on GPUs {visible or '-'} with {cap}"
                    f" (needs ~{need:.0f} s{'' if args.tiny or need <= limit else ': WILL LIKELY NOT FINISH'})",
                    flush=True,
                )
                cmd = commands[job]
                if job == "t2i":  # the t2i part skips its optional variant if it would delay the jobs after it
                    soft = next((r["soft_s"] for r in planned if r["job"] == job), None)
                    allowed = min(limit, math.inf if soft is None else soft)
                    if math.isfinite(allowed):
                        cmd = [*cmd, "--time-limit-s", f"{max(1.0, allowed - 10):.0f}"]
                results[job] = runner.run(job, cmd, env, limit)
                res = results[job]
                res["gpu_util_mean"] = sampler.mean_util(res["started_s"], res["started_s"] + res["seconds"], visible)
                print(
                    f"[{time.monotonic() - started:5.0f} s] {job}: {results[job]['status']} "
                    f"({results[job]['seconds']:.0f} s)",
                    flush=True,
                )
                write()
            finally:
                ended[job].set()

    run: Callable[[list[Job]], None] = run_lane
    for job, (other, kind) in gates.items():
        threading.Thread(target=open_gate, args=(job, other, kind, work, ended, runner), daemon=True).start()
    with ThreadPoolExecutor(len(plan) or 1) as pool:
        list(pool.map(run, plan))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
