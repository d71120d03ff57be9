"""Does a Ray render member reuse the UNet graphs a plain process on the same machine compiled for the same pipeline?

A user who renders with the local engine and then with `--engine ray` on one machine should compile once: both build
the same generator, and Inductor's FX graph and AOTAutograd caches live in one folder of the machine. This bench
warms the same pipeline up in a plain process and then in a Ray actor, both on one empty cache folder, and prints
each process's cache hits and misses; where both computed an FX graph cache key, it says which parts of the key
differ (per field, and per example input with its type and the digest of its pickled bytes, as Inductor hashes it).

    python bench/compile_reuse.py                 # GPU: SD-1.5's architecture, random weights, accel compile
    python bench/compile_reuse.py --tiny          # CPU smoke: the tiny pipeline's UNet, Inductor on CPU
    python bench/compile_reuse.py --json out.json # also write both processes' records and the comparison

Steps: 1. build the pipeline folder and the empty cache folder; 2. warm up in a plain subprocess; 3. warm up in a
Ray actor; 4. compare. On CPU both processes run with `OMP_NUM_THREADS=1`, as Ray runs its workers: the CPU key
includes the thread count (`cpp_runtime_thread_count`), which would otherwise differ for that reason alone.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickletools
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT), str(ROOT / "bench")]  # Unveil's packages and the other benches' builders
DUMPED_INPUTS = 2  # example inputs of each graph whose pickled bytes are kept as text, to read a difference


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _pickle_text(data: bytes) -> str:
    out = io.StringIO()
    pickletools.dis(data, out=out)
    return out.getvalue()


def _key_parts(pickler: Any, details: Any) -> dict[str, Any]:
    """What one FX graph cache key is made of: a digest per field, and per example input its type and digest."""
    fields, inputs = {}, []
    for name, value in vars(details).items():
        if name == "example_inputs":
            for i, x in enumerate(value):
                data = pickler.dumps(x)
                row = {"type": type(x).__name__, "sha": _digest(data)}
                if i < DUMPED_INPUTS:
                    row["pickle"] = _pickle_text(data)
                inputs.append(row)
        else:
            try:
                fields[name] = _digest(pickler.dumps(value))
            except Exception as exc:  # noqa: BLE001 - a part Inductor itself cannot pickle is reported, not fatal
                fields[name] = f"not picklable: {type(exc).__name__}"
    return {"fields": fields, "inputs": inputs}


def _generator(folder: str, tiny: bool) -> Any:
    """The generator a render member builds (`build_local_generator`); on CPU the tiny UNet compiled by Inductor
    (accel `compile` needs CUDA, so its switches are set here as the warm-up tests set them)."""
    from tools.image_store import ImageStore
    from tools.t2i.registry import build_local_generator

    store = ImageStore(Path(folder).parent / f"store-{os.getpid()}")  # in the bench's work folder
    if not tiny:
        return build_local_generator(f"diffusers:{folder}?accel=compile", store=store)
    from dataclasses import replace

    from tools.t2i.diffusers_backend import DiffusersGenerator
    from tools.t2i.fast import PRESETS, compile_static

    gen = DiffusersGenerator("tiny", folder, device="cpu", max_batch=2, store=store)
    gen.fast_path = replace(PRESETS["eager"], compile=True, bucket_batches=True)
    compile_static(gen._load().unet, backend="inductor")
    return gen


def warm(folder: str, tiny: bool) -> dict[str, Any]:
    """One process's warm-up of the pipeline at `folder`: its seconds, cache counters and FX graph cache keys."""
    import torch._inductor.codecache as codecache
    from torch._dynamo.utils import counters

    keys: list[dict[str, Any]] = []
    original = codecache.FxGraphCachePickler.debug_lines

    def debug_lines(self: Any, details: Any) -> list[str]:  # Inductor calls it with every key it computes
        keys.append(_key_parts(self, details))
        return original(self, details)

    setattr(codecache.FxGraphCachePickler, "debug_lines", debug_lines)  # noqa: B010 - a method replaced for its keys
    started = time.perf_counter()
    report = _generator(folder, tiny).warm_up()
    return {
        "pid": os.getpid(),
        "seconds": round(time.perf_counter() - started, 1),
        "shapes": [s.get("rows") for s in report.get("shapes", [])],
        "cache_dir": report.get("cache_dir"),
        "counters": {
            name: int(counters[group][name])
            for group, names in (
                ("inductor", ("fxgraph_cache_hit", "fxgraph_cache_miss")),
                ("aot_autograd", ("autograd_cache_hit", "autograd_cache_miss")),
            )
            for name in names
        },
        "keys": keys,
    }


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair of keys (in the order the two processes computed them): the fields and example inputs that differ."""
    rows = []
    for ka, kb in zip(a, b, strict=False):
        fields = sorted(
            f for f in ka["fields"].keys() | kb["fields"].keys() if ka["fields"].get(f) != kb["fields"].get(f)
        )
        pairs = list(zip(ka["inputs"], kb["inputs"], strict=False))
        differ = [i for i, (x, y) in enumerate(pairs) if x["sha"] != y["sha"]]
        row: dict[str, Any] = {"fields": fields, "inputs": len(pairs), "inputs_differing": len(differ)}
        if differ:
            row["types"] = sorted({pairs[i][0]["type"] + "/" + pairs[i][1]["type"] for i in differ})
            first = differ[0]
            if first < DUMPED_INPUTS:
                row["first_differing_pickles"] = [pairs[first][0]["pickle"], pairs[first][1]["pickle"]]
        rows.append(row)
    return rows


def _in_subprocess(folder: str, tiny: bool, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", folder, *(["--tiny"] if tiny else [])]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"the plain process failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _in_ray_actor(folder: str, tiny: bool) -> dict[str, Any]:
    import logging

    import ray

    class Warmer:  # an actor, as a render member is one (`runner.ray.members.RenderWorker`)
        def warm(self, folder: str, tiny: bool) -> dict[str, Any]:
            return warm(folder, tiny)

    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
    try:
        actor = ray.remote(num_cpus=1, num_gpus=0 if tiny else 1)(Warmer).remote()
        record: dict[str, Any] = ray.get(actor.warm.remote(folder, tiny))
        return record
    finally:
        ray.shutdown()


def main() -> None:
    """Run the two warm-ups and print what each compiled and what differs between their keys."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny test pipeline")
    ap.add_argument("--json", default=None, help="also write both processes' records and the comparison here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path[:0] = PATHS
    # The plain subprocess and Ray's workers import Unveil from here too (without an install of it).
    os.environ["PYTHONPATH"] = os.pathsep.join([*PATHS, *filter(None, [os.environ.get("PYTHONPATH")])])
    if args.child:
        print(json.dumps(warm(args.child, args.tiny)))
        return
    # 1. The pipeline folder and one empty cache folder for both processes.
    work = Path(tempfile.mkdtemp(prefix="unveil-bench-compile-reuse-"))
    if args.tiny:
        from tests.tiny import TINY_IMAGE_SIZE, build_tiny_sd_without_attention

        folder = build_tiny_sd_without_attention(work / "sd")
        os.environ["OMP_NUM_THREADS"] = "1"  # as Ray runs its workers (see the module's docstring)
        os.environ["UNVEIL_T2I_WARMUP_SIZES"] = f"{TINY_IMAGE_SIZE}x{TINY_IMAGE_SIZE}"
    else:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("this bench needs a GPU (or --tiny for a CPU smoke run)")
        from t2i_throughput import build_sd15_random

        folder = build_sd15_random(work / "sd15", "cuda")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
    # 2. The plain process compiles; 3. the Ray actor on the same machine should then only load.
    plain = _in_subprocess(folder, args.tiny, dict(os.environ))
    actor = _in_ray_actor(folder, args.tiny)
    # 4. What each compiled, and where their keys differ.
    print(f"compile reuse, {'tiny pipeline, CPU' if args.tiny else 'SD-1.5 random weights, GPU'}; cache {work}")
    print("process | seconds | FX hits | FX misses | AOT hits | AOT misses")
    for name, rec in (("plain", plain), ("ray", actor)):
        c = rec["counters"]
        print(
            f"{name} | {rec['seconds']} | {c['fxgraph_cache_hit']} | {c['fxgraph_cache_miss']} | "
            f"{c['autograd_cache_hit']} | {c['autograd_cache_miss']}"
        )
    misses = actor["counters"]["fxgraph_cache_miss"] + actor["counters"]["autograd_cache_miss"]
    print("reused: yes (the actor compiled nothing)" if misses == 0 else f"reused: no ({misses} misses in the actor)")
    differences = compare(plain["keys"], actor["keys"])
    for i, row in enumerate(differences):
        print(
            f"key {i}: fields differing {row['fields'] or 'none'}; example inputs differing "
            f"{row['inputs_differing']} of {row['inputs']} {row.get('types', '')}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"plain": plain, "ray": actor, "differences": differences}, indent=1))


if __name__ == "__main__":
    main()
