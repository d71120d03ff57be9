"""Scale-out on Ray: the local engine against `--engine ray`, side by side in one run; prints a table.

Two parts:

- `detect` (CPU, any machine): TAG detection of `--samples` pairs (default 2,000) through the batch runner with a
  scripted model answering after `--latency` seconds (default 0.2: a remote model API), local engine vs the Ray
  engine on a local cluster of this machine. Every model call then also holds a slot of the cluster-wide limiter
  actor. Target: Ray no slower than local by more than 10%.
- `render` (GPU machine): IPR refinement (`refine_one`, a scripted refiner that keeps the first image, so one
  render per prompt) of `--prompts-per-gpu` prompts per GPU with Stable Diffusion 1.5's configuration and random
  weights (built from configs by `bench/t2i_throughput.py`, nothing downloaded), 512x512, 50 steps, fp16:
  the local engine on one GPU, then the Ray engine with 1, 2 and 4 render actors (one per GPU; counts above the
  GPUs present are skipped and said so). Target: >= 1.9x on 2 GPUs and >= 3.6x on 4 GPUs.

    python bench/scale.py detect                     # CPU, ~1-2 minutes
    python bench/scale.py render                     # GPU machine (1-4 GPUs), a few minutes
    python bench/scale.py render --accel eager --prompts-per-gpu 64 --warm 16   # as measured (results/)
    python bench/scale.py render --tiny              # CPU smoke run of the render part (tiny pipeline)
    python bench/scale.py render --engines local --records-out L.json   # then, later or on other GPUs:
    python bench/scale.py render --engines ray --gpus 2 --local-records L.json

Times exclude starting Ray and loading pipelines (reported separately): they are paid once per job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

KEEP_SCRIPT = {"refiner": [{"when": "", "then": "keep"}]}


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain-text table."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def fresh_gateway() -> None:
    """A gateway without a response cache (every call reaches the scripted backend)."""
    from agents.gateway import Gateway, GatewaySettings, set_gateway

    settings = GatewaySettings()
    settings.cache_path = None
    set_gateway(Gateway(settings))


# -- detect ---------------------------------------------------------------------------------------------------


async def detect_batch(work: Path, name: str, samples: int, spec: str, concurrency: int) -> tuple[float, Any]:
    """Run the detect batch once; (seconds, summary)."""
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import BatchItem
    from runner.detect import detect_one, detection_context

    ctx = detection_context("tag", {"model": spec}, announce=False)
    items = [
        BatchItem(f"s{i}", {"image_description": f"white powder on a table {i}", "text": f"text the usual number {i}"})
        for i in range(samples)
    ]

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        return await detect_one(record, ctx, "tag")

    started = time.perf_counter()
    summary = await run_batch(items, worker, BatchRun(work / f"{name}.jsonl", concurrency=concurrency, progress=False))
    return time.perf_counter() - started, summary


def bench_detect(args: argparse.Namespace) -> None:
    """Local vs Ray detect with a scripted remote-latency model."""
    from runner.engine import EngineSettings, engine_session
    from tests.unveil.test_detect_cli import SCRIPT

    os.environ["UNVEIL_MAX_CONCURRENCY"] = str(args.concurrency)  # the API limit must not be what is measured
    work = Path(tempfile.mkdtemp(prefix="unveil-bench-scale-"))
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    spec = f"scripted:{script}?latency={args.latency}"
    rows = []
    for run_no, engine in enumerate(args.engines.split(",")):
        fresh_gateway()
        started = time.perf_counter()
        with engine_session(EngineSettings(engine)):
            setup = time.perf_counter() - started
            # Untimed warm-up: imports, graph compilation, the limiter actor's first calls.
            name = f"{engine}-{run_no}"  # a fresh output per run (a repeated name would resume, with nothing to do)
            asyncio.run(detect_batch(work, f"{name}-warm", min(100, args.samples), spec, args.concurrency))
            fresh_gateway()
            seconds, summary = asyncio.run(detect_batch(work, name, args.samples, spec, args.concurrency))
        assert summary.failed == 0, summary.failures[:3]
        from agents.gateway import get_gateway

        calls = get_gateway().usage["total"]["calls"]
        rows.append(
            {
                "engine": engine,
                "samples": summary.completed,
                "model calls": calls,
                "start s": f"{setup:.1f}",
                "batch s": f"{seconds:.1f}",
                "samples/s": f"{summary.completed / seconds:.1f}",
            }
        )
    mean = {
        e: sum(float(r["batch s"]) for r in rows if r["engine"] == e) / max(1, sum(r["engine"] == e for r in rows))
        for e in ("local", "ray")
    }
    ratio = mean["ray"] / mean["local"] if mean["local"] else float("nan")
    print(
        f"detect: TAG, {args.samples} samples, scripted model with {args.latency * 1000:.0f} ms latency, "
        f"{args.concurrency} samples at once, {os.cpu_count()} CPUs"
    )
    print(table(rows, ["engine", "samples", "model calls", "start s", "batch s", "samples/s"]))
    print(f"Ray / local batch time (means): {ratio:.3f} (target <= 1.10)")


# -- render ---------------------------------------------------------------------------------------------------


async def refine_prompts(ctx: Any, n: int, offset: int) -> list[dict[str, Any]]:
    """Refine `n` prompts at once (each renders one image and is kept); their records."""
    from runner.refine import refine_one

    prompts = [
        "a portrait of a woman in a red coat",
        "a city street at night",
        "a dog on a beach at sunset",
        "an oil painting of a stormy sea",
        "a bowl of fruit on a table",
        "a knight on horseback",
    ]
    return list(
        await asyncio.gather(*(refine_one(f"{prompts[i % len(prompts)]} {i}", ctx, seed=offset + i) for i in range(n)))
    )


def run_generator(ctx: Any) -> Any:
    """The run's generator, opened as the IPR graph opens it (the registry's cached one)."""
    from graphs.ipr import get_ipr_generator

    return get_ipr_generator(ctx.generator, ctx.image_store, ctx.long_prompts)


def wait_for_members(ctx: Any) -> float:
    """Open the run's generator and wait until every render member (or the local generator) loaded its pipeline
    and compiled its shapes, so no compilation falls in the rounds (calls go only to started members); the
    seconds that took."""
    started = time.perf_counter()
    _ = run_generator(ctx).pipeline  # the Ray generator's preflight: every member ready, warm-up included
    return time.perf_counter() - started


GATE_TIMEOUT_S = 300.0  # the suite's gate opens by then, or the round goes on anyway


def bench_gate() -> float:
    """The GPU suite's gate (`bench/gpu_suite.py`, `GATES`): with every member up, wait until the suite opens it
    (`UNVEIL_BENCH_GO_FILE`: the job preparing on the same GPUs is ready and idle) before the timed rounds, so the
    two jobs' preparations overlap but no timed round shares its GPUs; the seconds waited (0 outside the suite)."""
    go = os.environ.get("UNVEIL_BENCH_GO_FILE")
    started = time.perf_counter()
    while go and not Path(go).exists() and time.perf_counter() - started < GATE_TIMEOUT_S:
        time.sleep(0.5)
    return time.perf_counter() - started


def member_stats(ctx: Any) -> list[dict[str, Any]]:
    """Each render member's compile record (the local generator's: one): its warm-up (seconds, every shape with
    the seconds it took and waited, graphs compiled, cache hits), the shapes it ran, compilations after it."""
    generator = run_generator(ctx)
    pool = getattr(generator, "pool", None)
    if pool is not None:
        import ray

        return list(ray.get([member.stats.remote() for member in pool.members]))
    stats = getattr(generator, "compile_stats", None)
    return [stats()] if callable(stats) else []


def late_compiles(stats: list[dict[str, Any]]) -> int:
    """Compilations after the warm-up, over every member."""
    return sum(int(s.get("late_compiles", 0)) for s in stats)


def timed_round(ctx: Any, images: int, warm: int) -> tuple[float, list[dict[str, Any]], dict[str, Any]]:
    """Warm up (pipelines loaded and compiled, batches formed), then time `images` renders; (images/s, the timed
    records, the compile record: each member's stats and the compilations inside the timed round)."""
    members_s = wait_for_members(ctx)
    gate_s = bench_gate()
    asyncio.run(refine_prompts(ctx, warm, 10_000_000))
    before = late_compiles(member_stats(ctx))
    started = time.perf_counter()
    records = asyncio.run(refine_prompts(ctx, images, 0))
    rate = images / (time.perf_counter() - started)
    stats = member_stats(ctx)
    compile_record = {
        "members_up_s": round(members_s, 1),
        "gate_s": round(gate_s, 1),
        "compiles_in_timed_round": late_compiles(stats) - before,
        "members": stats,
    }
    return rate, records, compile_record


def compare_records(local: list[dict[str, Any]], ray: list[dict[str, Any]]) -> tuple[bool, float]:
    """(records equal apart from their images, the share of images identical) over the prompts both rendered."""

    def without_images(rec: dict[str, Any]) -> Any:
        return [{k: v for k, v in step.items() if k not in ("image_ids", "image_paths")} for step in rec["trajectory"]]

    pairs = list(zip(local, ray, strict=False))
    same = all(without_images(a) == without_images(b) and a["settings"] == b["settings"] for a, b in pairs)
    ids = [
        (x, y)
        for a, b in pairs
        for sa, sb in zip(a["trajectory"], b["trajectory"], strict=False)
        for x, y in zip(sa["image_ids"], sb["image_ids"], strict=False)
    ]
    return same, sum(x == y for x, y in ids) / max(1, len(ids))


def bench_render(args: argparse.Namespace) -> None:
    """Local engine on 1 GPU vs the Ray engine on 1, 2 and 4 GPUs."""
    import torch

    from runner.engine import EngineSettings, engine_session
    from runner.refine import ipr_context

    work = Path(tempfile.mkdtemp(prefix="unveil-bench-scale-"))
    cuda = torch.cuda.is_available()
    if args.tiny:
        from tests.tiny import TINY_IMAGE_SIZE, build_tiny_sd

        folder, size, steps = build_tiny_sd(work / "sd"), TINY_IMAGE_SIZE, 2
    else:
        if not cuda:
            raise SystemExit("the render part needs a GPU (or --tiny for a CPU smoke run)")
        from t2i_throughput import build_sd15_random

        folder, size, steps = build_sd15_random(work / "sd15", "cuda"), args.size, args.steps
    gpus = torch.cuda.device_count() if cuda else 0
    script = work / "keep.json"
    script.write_text(json.dumps(KEEP_SCRIPT))
    ctx = ipr_context(
        refiner_model=f"scripted:{script}",
        generator=f"diffusers:{folder}?accel={args.accel}",
        width=size,
        height=size,
        steps=steps,
        t_max=0,
        image_store=str(work / "store"),
    )
    per_gpu = args.prompts_per_gpu
    rows: list[dict[str, Any]] = []

    saved: dict[str, Any] = {}  # rate and records of every round, for --records-out
    local, local_records = float("nan"), []
    if args.local_records and Path(args.local_records).is_file():  # a local round another process timed
        done = json.loads(Path(args.local_records).read_text())["local"]
        local, local_records = done["rate"], done["records"]
    if "local" in args.engines.split(","):
        fresh_gateway()
        with engine_session(EngineSettings("local")):
            local, local_records, compiled = timed_round(ctx, per_gpu, args.warm)
        saved["local"] = {"gpus": 1 if cuda else 0, "rate": local, "records": local_records, "compile": compiled}
        rows.append(
            {
                "engine": "local",
                "GPUs": 1 if cuda else 0,
                "images": per_gpu,
                "images/s": f"{local:.2f}",
                "speed-up": "1.00",
                "records": "-",
                "same images": "-",
                "members up s": f"{compiled['members_up_s']:.0f}",
                "compiles in timed round": compiled["compiles_in_timed_round"],
            }
        )
        from tools.t2i.registry import clear_generator_cache

        clear_generator_cache()  # free the local engine's GPU memory before the actors take the GPUs
        if cuda:
            torch.cuda.empty_cache()
    counts = [int(x) for x in args.gpus.split(",") if x] if "ray" in args.engines.split(",") else []
    skipped = []
    if counts:
        import ray

        # A smoke run starts its own local cluster: joining one that another process runs here ties its actors
        # to that process's lifetime.
        ray.init(
            address="local" if args.tiny else None,
            include_dashboard=False,
            logging_level=logging.WARNING,
            namespace="unveil",
        )
    for n in counts:
        if cuda and n > gpus:
            skipped.append(n)
            continue
        os.environ["UNVEIL_RAY_RENDER_ACTORS"] = str(n)
        fresh_gateway()
        started = time.perf_counter()
        with engine_session(EngineSettings("ray")):
            rate, records, compiled = timed_round(ctx, per_gpu * n, args.warm * n)
        saved[f"ray{n}"] = {"gpus": n if cuda else 0, "rate": rate, "records": records, "compile": compiled}
        same, share = compare_records(local_records, records) if local_records else (None, float("nan"))
        rows.append(
            {
                "engine": "ray",
                "GPUs": n if cuda else 0,
                "images": per_gpu * n,
                "images/s": f"{rate:.2f}",
                "speed-up": f"{rate / local:.2f}" if local_records else "-",
                "records": "-" if same is None else "equal" if same else "DIFFER",
                "same images": "-" if same is None else f"{share:.0%}",
                "round s": f"{time.perf_counter() - started:.0f}",
                "members up s": f"{compiled['members_up_s']:.0f}",
                "compiles in timed round": compiled["compiles_in_timed_round"],
            }
        )
    if counts:
        ray.shutdown()
    if args.records_out:
        Path(args.records_out).write_text(json.dumps(saved, default=str))
    device = torch.cuda.get_device_name(0) if cuda else "CPU"
    model = "tiny pipeline" if args.tiny else "SD-1.5 config, random weights, fp16"
    print(
        f"render: IPR refine (one render per prompt), {model}, {size}x{size}, {steps} steps, on {device} "
        f"({gpus} GPUs present)"
    )
    print(
        table(
            rows,
            [
                "engine",
                "GPUs",
                "images",
                "images/s",
                "speed-up",
                "records",
                "same images",
                "members up s",
                "compiles in timed round",
            ],
        )
    )
    if skipped:
        print(f"not measured (only {gpus} GPUs here): {', '.join(map(str, skipped))} GPUs")
    print("targets: >= 1.9x on 2 GPUs, >= 3.6x on 4 GPUs")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": device,
                    "gpus_present": gpus,
                    "model": model,
                    "size": size,
                    "steps": steps,
                    "accel": args.accel,
                    "rows": rows,
                    "skipped_gpus": skipped,
                    "compile": {name: round_["compile"] for name, round_ in saved.items()},
                },
                indent=2,
            )
        )


def main() -> None:
    """Parse the part and its options and run it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    d = sub.add_parser("detect", help="local vs Ray detect with a scripted remote-latency model (CPU)")
    d.add_argument("--samples", type=int, default=2000)
    d.add_argument("--latency", type=float, default=0.2, help="seconds per scripted model answer")
    d.add_argument("--concurrency", type=int, default=256, help="samples at once (and UNVEIL_MAX_CONCURRENCY)")
    d.add_argument(
        "--engines", default="local,ray,local", help="engines in the order run (a repeat averages out a busy machine)"
    )
    r = sub.add_parser("render", help="local engine on 1 GPU vs Ray on 1, 2, 4 GPUs (GPU machine)")
    r.add_argument("--gpus", default="1,2,4", help="render actors (GPUs) to measure")
    r.add_argument("--prompts-per-gpu", type=int, default=96, help="timed images per GPU")
    r.add_argument(
        "--warm",
        type=int,
        default=16,
        help="untimed images per GPU once every member is up and compiled its buckets (forms the batches)",
    )
    r.add_argument("--steps", type=int, default=50)
    r.add_argument("--size", type=int, default=512)
    r.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny test pipeline")
    r.add_argument(
        "--accel",
        default="auto",
        choices=("auto", "eager", "compile", "fp8"),
        help="the UNet path of every engine (eager skips each process's compile warm-up)",
    )
    r.add_argument("--json", default=None, help="also write the rows to this JSON file")
    r.add_argument("--engines", default="local,ray", help="engines to time: local (1 GPU), ray (--gpus), or both")
    r.add_argument(
        "--local-records",
        default=None,
        help="a --records-out file whose local round the Ray rows are compared with (when local is not run here)",
    )
    r.add_argument("--records-out", default=None, help="write every round's rate and records to this JSON file")
    args = ap.parse_args()
    bench_detect(args) if args.part == "detect" else bench_render(args)


if __name__ == "__main__":
    main()
