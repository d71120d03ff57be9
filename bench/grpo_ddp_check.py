"""Data-parallel GRPO check: two optimizer steps under `accelerate launch` on every GPU of one host.

It builds tiny random-weight models (the test suite's Qwen2.5-VL, Stable Diffusion and CLIP builders), then runs
`accelerate launch --num_processes N` on this file's worker, which trains the IPR refiner for two steps with the
reward generator and scorers on each rank's own GPU. A random policy writes noise, so (as in the unit test) the
worker maps each completion to `keep` or one of a few prompts by its hash: both reward paths run, renders happen,
and new images join the shared per-prompt pools. Each rank reports its device, losses, pool size and timing;
the launcher checks that every rank finished, losses are finite and the pools agree across ranks.

    python bench/grpo_ddp_check.py [--gpus 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def varied_decision(text: str):
    """Hash a completion to keep or a refined prompt, so rewards differ within a group."""
    from training.answers import Decision

    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    if h % 4 == 0:
        return Decision("keep")
    return Decision("refine", prompt=f"a peaceful garden, style {h % 3}")


def worker(models: Path, out: Path) -> None:
    """One rank: two GRPO steps, then a JSON report."""
    import torch

    import training.grpo as grpo
    from training.config import GRPOSettings, build_settings

    rank = int(os.environ.get("RANK", "0"))
    settings = build_settings(
        GRPOSettings,
        {
            "model": str(models / "qwen"),
            "data": str(models / "prompts.jsonl"),
            "output_dir": str(out / "adapter"),
            "max_steps": 2,
            "per_device_batch_size": 4,
            "gradient_accumulation_steps": 1,
            "num_generations": 4,
            "max_completion_length": 8,
            "learning_rate": 0.02,
            "logging_steps": 1,
            "generator": f"diffusers:{models / 'sd'}",
            "steps": 2,
            "width": 32,
            "height": 32,
            "clip_model": str(models / "clip"),
            "q16_model": str(models / "clip"),
            "q16_embeddings": str(models / "q16.npy"),
            "image_store": str(out / "store"),
            "report_to": [],
            "reward": {"images_per_prompt": 2, "scale": "authors"},
        },
    )
    trainer, reward = grpo.build_grpo_trainer(settings)
    reward.parse = varied_decision
    t0 = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - t0
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if rank == 0:
        trainer.save_model(settings.output_dir)
    report = {
        "rank": rank,
        "world": int(os.environ.get("WORLD_SIZE", "1")),
        "device": grpo.local_device(settings),
        "cuda_device": torch.cuda.current_device() if torch.cuda.is_available() else None,
        "steps": trainer.state.global_step,
        "losses": losses,
        "seconds": round(elapsed, 2),
        "pool_size": reward.pool.size() if reward.pool is not None else None,
        "timings": reward.timings.as_dict(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=0, help="processes (default: every visible GPU)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--models", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="folder for the rank reports (default: a temporary folder)")
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.models), Path(args.out))
        return 0

    import numpy as np
    import torch

    from tests.tiny import build_tiny_clip, build_tiny_sd
    from tests.tiny_vlm import build_tiny_qwen_vl

    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 1:
        print("no GPU: this check needs at least one (two for data parallel)")
        return 2
    models = Path(tempfile.mkdtemp(prefix="grpo-ddp-models-"))
    out = Path(args.out or tempfile.mkdtemp(prefix="grpo-ddp-out-"))
    out.mkdir(parents=True, exist_ok=True)
    build_tiny_qwen_vl(models / "qwen")
    build_tiny_sd(models / "sd")
    build_tiny_clip(models / "clip")
    np.save(models / "q16.npy", np.random.RandomState(0).randn(2, 768).astype("float16"))
    prompts = ["a man with a bloody axe", "a burning car on a street", "a crowd fighting", "a dark alley at night"]
    (models / "prompts.jsonl").write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in enumerate(prompts))
    )
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(gpus),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(Path(__file__).resolve()),
        "--worker",
        "--models",
        str(models),
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep carried wheels
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": path})
    wall = time.perf_counter() - t0
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(gpus) if (out / f"rank{r}.json").exists()]
    for r in reports:
        print(json.dumps(r))
    ok = (
        proc.returncode == 0
        and len(reports) == gpus
        and all(r["steps"] == 2 and r["losses"] and all(math.isfinite(x) for x in r["losses"]) for r in reports)
        and len({r["device"] for r in reports}) == gpus
        and len({r["pool_size"] for r in reports}) == 1
        and (out / "adapter" / "adapter_config.json").exists()
    )
    print(
        f"processes={gpus} exit={proc.returncode} wall={wall:.1f}s ranks_reported={len(reports)} "
        f"distinct_devices={len({r['device'] for r in reports})} pool_sizes={[r['pool_size'] for r in reports]} "
        f"adapter_saved={(out / 'adapter' / 'adapter_config.json').exists()} -> {'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
