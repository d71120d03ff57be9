"""The GPU suite: T2I throughput, the GRPO step and the Ray scaling rows in one command, one table, one JSON.

Each part is one of the project's benchmarks, run as its own process (so a part that fails or runs out of time
leaves the others' rows) with the time left of `--budget-s`:

- `t2i`: `bench/t2i_throughput.py`, batched eager and the default `compile` path, on GPU 0;
- `grpo`: `bench/grpo_step.py`, one GRPO step at the paper's settings on one GPU (GPU 1 when there are two or more,
  at the same time as `t2i`);
- `scale`: `bench/scale.py render`, the local engine on one GPU against the Ray engine on 1, 2 and 4 GPUs (counts
  above the GPUs present are skipped), with the records of each Ray row compared with the local engine's.

Every model is Stable Diffusion 1.5's (and Qwen2.5-VL-3B's) configuration with random weights, built from configs
by the benchmarks themselves: nothing is downloaded. The GRPO step on several GPUs and the `evaluate ipr --engine
ray` slice are not parts yet: the table says so.

    python bench/gpu_suite.py                       # a GPU machine (one command, about 9 minutes on 4 GPUs)
    python bench/gpu_suite.py --parts scale --scale-accel eager
    python bench/gpu_suite.py --tiny                # CPU smoke run on the tiny test models (checks the suite)

The table is printed last; the JSON (commit, GPU model, versions of torch, diffusers, transformers, TRL and Ray,
every part's numbers and log tail) goes to `$OUT/gpu_suite.json` when `$OUT` is set (the lent GPU machines), else
to `bench/results/gpu_suite-<commit>-<machine>.json`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("t2i", "grpo", "scale")
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
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def gpus() -> tuple[int, str]:
    """(GPUs visible, their model) without importing torch in this process."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return 0, "CPU"
    return len(out), out[0] if out else "CPU"


def run_part(name: str, cmd: list[str], env: dict[str, str], timeout: float, work: Path) -> dict[str, Any]:
    """Run one benchmark; its JSON, status, seconds and the tail of its log."""
    log = work / f"{name}.log"
    started = time.monotonic()
    status = "ok"
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, stdout=fh,
                                stderr=subprocess.STDOUT, timeout=max(1.0, timeout)).returncode
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            status = f"stopped at its time limit ({timeout:.0f} s)"
    result_file = work / f"{name}.json"
    data = json.loads(result_file.read_text()) if result_file.is_file() else {}
    tail = log.read_text(errors="replace")[-3000:]
    return {"status": status, "seconds": round(time.monotonic() - started, 1), "data": data, "log_tail": tail,
            "command": " ".join(cmd)}


def part_commands(args: argparse.Namespace, work: Path, n_gpus: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The command and environment of each part."""
    py = sys.executable
    tiny = ["--tiny"] if args.tiny else []
    second = "1" if n_gpus >= 2 else "0"
    t2i = [py, "bench/t2i_throughput.py", *tiny, "--json", str(work / "t2i.json")]
    t2i += (["--variants", "eager", "--n", "4", "--rounds", "1", "--steps", "2", "--baseline-n", "1"] if args.tiny
            else ["--variants", "eager,compile", "--n", "32", "--rounds", "1", "--baseline-n", "4"])
    grpo = [py, "bench/grpo_step.py", *tiny, "--json", str(work / "grpo.json")]
    # The tiny VLM writes noise up to the completion limit: a short limit keeps the CPU run short.
    grpo += (["--steps", "1", "--warmup", "0", "--max-completion", "16", "--images-per-prompt", "2"] if args.tiny
             else ["--steps", "1", "--warmup", "1"])
    counts = [n for n in (1, 2, 4) if args.tiny and n == 1 or not args.tiny and n <= max(1, n_gpus)]
    scale = [py, "bench/scale.py", "render", *tiny, "--gpus", ",".join(map(str, counts)),
             "--accel", args.scale_accel, "--json", str(work / "scale.json")]
    scale += ["--prompts-per-gpu", "4", "--warm", "2"] if args.tiny else ["--prompts-per-gpu", "64", "--warm", "32"]
    return {"t2i": (t2i, {"CUDA_VISIBLE_DEVICES": "0"} if n_gpus else {}),
            "grpo": (grpo, {"CUDA_VISIBLE_DEVICES": second} if n_gpus else {}),
            "scale": (scale, {})}


def rows_of(results: dict[str, Any], n_gpus: int) -> list[dict[str, str]]:
    """One table row per measured figure (and one per part that produced none, with its status)."""
    rows: list[dict[str, str]] = []

    def add(part: str, what: str, value: str, target: str = "") -> None:
        rows.append({"part": part, "what": what, "result": value, "target": target})

    t2i = results.get("t2i")
    if t2i:
        d = t2i["data"]
        if "baseline_img_per_s" in d:
            add("t2i", "one pipeline call per prompt", f"{d['baseline_img_per_s']:.2f} images/s")
        for variant in ("eager", "compile"):
            if f"{variant}.batched_img_per_s" in d:
                add("t2i", f"batched {variant}", f"{d[f'{variant}.batched_img_per_s']:.2f} images/s "
                    f"(warm-up {d.get(f'{variant}.warmup_s', 0):.0f} s)", ">= 5.0 (compile)" if variant == "compile"
                    else "")
            elif f"{variant}.error" in d:
                add("t2i", f"batched {variant}", d[f"{variant}.error"][:80])
    grpo = results.get("grpo")
    if grpo:
        m = grpo["data"].get("measured")
        if m:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in m.items() if k not in ("step_s", "images")
                              and isinstance(v, (int, float)))
            add("grpo", "GRPO step, 1 GPU", f"{m['step_s']:.1f} s ({parts})", "<= 40 s")
    add("grpo", f"GRPO step, {max(n_gpus, 2)} GPUs", "not a part of the suite yet", "<= 12 s on 4")
    scale = results.get("scale")
    if scale:
        for r in scale["data"].get("rows", []):
            target = {"2": ">= 1.9x", "4": ">= 3.6x"}.get(str(r["GPUs"]), "") if r["engine"] == "ray" else ""
            add("scale", f"{r['engine']} engine, {r['GPUs']} GPU(s), {r['images']} images",
                f"{r['images/s']} images/s, {r['speed-up']}x, records {r.get('records', '-')}, "
                f"same images {r.get('same images', '-')}", target)
        for n in scale["data"].get("skipped_gpus", []):
            add("scale", f"ray engine, {n} GPUs", f"not measured: {scale['data'].get('gpus_present')} GPUs here")
    add("ipr", "evaluate ipr --engine ray, 200-prompt slice", "not a part of the suite yet", "<= 3 h for I2P")
    for name, res in results.items():
        if res["status"] != "ok" or not any(r["part"] == name for r in rows):
            add(name, "status", f"{res['status']} after {res['seconds']:.0f} s")
    return rows


def table(rows: list[dict[str, str]]) -> str:
    """A plain-text table of the rows."""
    cols = ["part", "what", "result", "target"]
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(r[c].ljust(w) for c, w in zip(cols, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for within the budget; print the table; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny test models")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"parts to run, of {', '.join(PARTS)}")
    ap.add_argument("--budget-s", type=float, default=540.0, help="seconds for the whole suite")
    ap.add_argument("--scale-accel", default="auto", choices=("auto", "eager", "compile"),
                    help="UNet path of the scaling rows (auto: compile on GPUs, the default path)")
    ap.add_argument("--out", default=None, help="the JSON file (default: $OUT/gpu_suite.json or bench/results/)")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(unknown)}; use {', '.join(PARTS)}")
    started = time.monotonic()
    n_gpus, gpu_model = (0, "CPU") if args.tiny else gpus()
    work = Path(tempfile.mkdtemp(prefix="gpu-suite-"))
    commands = part_commands(args, work, n_gpus)
    results: dict[str, Any] = {}

    def left() -> float:
        return args.budget_s - (time.monotonic() - started)

    # t2i and the one-GPU GRPO step use one GPU each: side by side when there are two; the scaling rows use all.
    first = [p for p in ("t2i", "grpo") if p in parts]
    if n_gpus >= 2 and len(first) == 2:
        # The scaling rows need about a third of the budget: the first phase gets the rest.
        phase = left() * (0.6 if "scale" in parts else 1.0)
        with ThreadPoolExecutor(2) as pool:
            futures = {p: pool.submit(run_part, p, *commands[p], phase, work) for p in first}
            results.update({p: f.result() for p, f in futures.items()})
    else:
        for p in first:
            share = left() * (0.5 if p == "t2i" and len(first) == 2 else 0.6 if "scale" in parts else 1.0)
            results[p] = run_part(p, *commands[p], share, work)
    if "scale" in parts:
        results["scale"] = run_part("scale", *commands["scale"], left(), work)

    rows = rows_of(results, n_gpus)
    machine = f"{n_gpus}x {gpu_model}" if n_gpus else f"CPU ({platform.node()})"
    report = {"commit": commit(), "machine": machine, "gpu_model": gpu_model, "gpus": n_gpus, "tiny": args.tiny,
              "versions": versions(), "python": platform.python_version(), "seconds": round(time.monotonic() -
              started, 1), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": rows,
              "parts": results}
    if args.out:
        out = Path(args.out)
    elif os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "gpu_suite.json"
    else:
        slug = "".join(c if c.isalnum() else "-" for c in machine).strip("-").lower()
        out = ROOT / "bench" / "results" / f"gpu_suite-{report['commit'].split('+')[0]}-{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"GPU suite on {machine}, commit {report['commit']}, {report['seconds']:.0f} s; "
          + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + f"; JSON: {out}")
    print(table(rows))
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
