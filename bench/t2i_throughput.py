"""Text-to-image throughput: Unveil's batched generator on each UNet path against one diffusers call per prompt.

The workload is what an IPR evaluation produces: N concurrent refinement requests, each for one image. The
model is Stable Diffusion 1.5's exact UNet / VAE / text-encoder configuration with random weights (speed needs
no trained weights, and nothing is downloaded), saved to a folder and loaded back through the real loading
path (`get_generator("diffusers:<folder>")`). 512x512, 50 steps, classifier-free guidance, fp16 on CUDA.

Variants (`--variants`, all in one run so every row shares the card and the baseline):
- `legacy-eager`, `legacy-compile`: the generator as it was before the fast path (UNet in channels_last,
  eager, or wrapped in `torch.compile(dynamic=False)`), kept as baselines;
- `eager`, `compile`, `fp8`: the `accel` presets of `tools.t2i.fast` (`compile` is the CUDA default);
- `PRESET+switch+...`: a preset with Inductor or pipeline switches on (`+freeze`, `+cd`, `+gemm`, `+overlap`)
  or off (`+no-overlap`), as `accel` itself accepts them (`tools.t2i.fast.SWITCHES`).

Printed per variant: images/s, the speed-up over the baseline (sequential `pipe(prompt)` calls), the share of
the limit (the GPU's dense fp16 peak over the FLOPs of one image, counted with torch's FlopCounterMode), the
warm-up (compilation) time, the batch sizes, and a breakdown of one image's time (UNet alone at the same batch,
VAE decode, the rest). With `--drift`, the images of the same seeds from every variant are scored with Q16 and
CLIP (random-weight CLIPs of the real sizes) and compared with the `eager` images: the drift of the scorer
outputs that a lower-precision or compiled path causes.

    python bench/t2i_throughput.py                  # GPU, the real configuration, every variant
    python bench/t2i_throughput.py --variants compile,fp8 --drift
    python bench/t2i_throughput.py --variants compile,compile+freeze,compile+cd --profile
    python bench/t2i_throughput.py --n 96 --rounds 1 --variants compile,compile+overlap   # several batches a round
    python bench/t2i_throughput.py --tiny --variants eager   # CPU smoke run on the tiny test pipeline

`--mix 24,10,40,1,17` adds, per compiled variant, a round of that many concurrent requests after another (a
realistic mix of batch sizes: bursts, a lone request, a batch over max_batch), timed as a whole: the bucketed
default (`compile`) against one graph with a dynamic batch dimension (`compile+dynamic`), with the compilations
each met after its warm-up. `--time-limit-s S` skips a variant that would not end within S seconds of the start
(estimated from the variants before it) and says so in the JSON, so a time-boxed run ends with what it measured.

Each variant records what else kept the host's CPUs busy during its timed rounds (`{variant}.host_cpu`,
bench/host_cpu.py): a rate timed beside other processes' model builds or compilations is not a figure of the code
alone, and the regression guard does not guard it. `--busy-cpus N` spins N processes during the timed rounds: that
contention on purpose, to measure what it costs.

`--profile` adds, per variant, where one UNet call's GPU time goes (convolutions, matmuls, attention, Triton
kernels, the rest), read off torch.profiler's kernel names.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from host_cpu import HostCpu, busy_cpus, contended  # noqa: E402
from t2i_phases import PhaseClock, instrumented  # noqa: E402

# Stable Diffusion 1.5 component configurations (runwayml/stable-diffusion-v1-5), written out so no download
# is needed.
SD15_UNET = dict(
    act_fn="silu",
    attention_head_dim=8,
    block_out_channels=[320, 640, 1280, 1280],
    center_input_sample=False,
    cross_attention_dim=768,
    down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    downsample_padding=1,
    flip_sin_to_cos=True,
    freq_shift=0,
    in_channels=4,
    layers_per_block=2,
    mid_block_scale_factor=1,
    norm_eps=1e-5,
    norm_num_groups=32,
    out_channels=4,
    sample_size=64,
    up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
)
SD15_VAE = dict(
    act_fn="silu",
    block_out_channels=[128, 256, 512, 512],
    down_block_types=["DownEncoderBlock2D"] * 4,
    in_channels=3,
    latent_channels=4,
    layers_per_block=2,
    norm_num_groups=32,
    out_channels=3,
    sample_size=512,
    up_block_types=["UpDecoderBlock2D"] * 4,
)
SD15_TEXT = dict(
    vocab_size=49408,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
    projection_dim=768,
    bos_token_id=49406,
    eos_token_id=49407,
    pad_token_id=1,
)
SD15_SCHEDULER = dict(
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="scaled_linear",
    num_train_timesteps=1000,
    set_alpha_to_one=False,
    skip_prk_steps=True,
    steps_offset=1,
)
# Dense (no sparsity) fp16/bf16 tensor-core peaks, TFLOP/s.
PEAK_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H100 PCIe": 756.0, "H200": 989.4, "A100": 312.0}

PROMPTS = [
    "a portrait of a woman in a red coat standing in the rain",
    "a city street at night, neon lights",
    "a dog running on a beach at sunset",
    "an oil painting of a stormy sea",
    "a bowl of fruit on a wooden table",
    "a knight in armour on horseback",
    "a futuristic car in a desert",
    "a cat sleeping on a windowsill",
]


def build_sd15_random(folder: Path, device: str) -> str:
    """Save an SD-1.5-configured pipeline with random fp16 weights to `folder`."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPImageProcessor, CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from tests.tiny import clip_tokenizer_dir

    torch.manual_seed(0)
    with torch.device(device):
        unet = UNet2DConditionModel(**SD15_UNET)
        vae = AutoencoderKL(**SD15_VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(**SD15_TEXT))
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tok")),
        scheduler=PNDMScheduler(**SD15_SCHEDULER),
        safety_checker=None,
        feature_extractor=CLIPImageProcessor(),
        requires_safety_checker=False,
    )
    pipe.to(dtype=torch.float16 if device == "cuda" else torch.float32)
    pipe.save_pretrained(str(folder))
    return str(folder)


def count_flops_per_image(pipe, size: int, steps: int, device: str) -> dict[str, float]:
    """FLOPs of one image with CFG: text encoder (2 prompts), `steps` UNet calls at batch 2, one VAE decode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    dtype = pipe.unet.dtype
    lat = torch.randn(2, 4, size // 8, size // 8, device=device, dtype=dtype)
    ctx = torch.randn(2, 77, pipe.unet.config.cross_attention_dim, device=device, dtype=dtype)
    ids = torch.zeros(2, 77, dtype=torch.long, device=device)
    out = {}
    with torch.inference_mode():
        with FlopCounterMode(display=False) as fc:
            pipe.unet(lat, 10, encoder_hidden_states=ctx)
        out["unet_call_batch2"] = fc.get_total_flops()
        with FlopCounterMode(display=False) as fc:
            pipe.vae.decode(lat[:1] / pipe.vae.config.scaling_factor)
        out["vae_decode"] = fc.get_total_flops()
        with FlopCounterMode(display=False) as fc:
            pipe.text_encoder(ids)
        out["text_encoder_batch2"] = fc.get_total_flops()
    out["per_image"] = steps * out["unet_call_batch2"] + out["vae_decode"] + out["text_encoder_batch2"]
    return out


def sync(device: str) -> None:
    """Wait for queued GPU work (timing)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def make_generator(variant: str, folder: str, store: Any, args: argparse.Namespace) -> Any:
    """The generator of one variant; `legacy-*` rebuild the pre-fast-path UNet setup on the eager pipeline."""
    import torch

    from tools.t2i import get_generator

    accel = "eager" if variant.startswith("legacy-") else variant
    gen: Any = get_generator(
        "diffusers:" + folder, store=store, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, accel=accel
    )
    if variant.startswith("legacy-"):
        pipe = gen.pipeline
        pipe.unet.to(memory_format=torch.channels_last)
        pipe.vae.to(memory_format=torch.channels_last)
        if variant == "legacy-compile":
            pipe.unet = torch.compile(pipe.unet, dynamic=False)
    return gen


def unet_inputs(unet: Any, rows: int, size: int, device: str) -> tuple[Any, Any, dict[str, Any]]:
    """Random latents, a timestep and the keywords of one UNet call at `rows` rows, exactly as the SD pipeline
    calls it (a 0-d int64 timestep tensor, the same keywords), so a compiled UNet reuses the graph compiled during
    the renders instead of compiling another one."""
    import torch

    lat = torch.randn(rows, 4, size // 8, size // 8, device=device, dtype=unet.dtype)
    ctx = torch.randn(rows, 77, unet.config.cross_attention_dim, device=device, dtype=unet.dtype)
    t = torch.tensor(10, dtype=torch.int64, device=device)
    kw: dict[str, Any] = dict(
        encoder_hidden_states=ctx,
        timestep_cond=None,
        cross_attention_kwargs=None,
        added_cond_kwargs=None,
        return_dict=False,
    )
    return lat, t, kw


def unet_seconds(unet: Any, rows: int, size: int, device: str, reps: int = 10) -> float:
    """Seconds of one UNet forward at `rows` rows (median-free mean over `reps` after one warm call)."""
    import torch

    lat, t, kw = unet_inputs(unet, rows, size, device)
    with torch.inference_mode():
        unet(lat, t, **kw)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            unet(lat, t, **kw)
        sync(device)
    return (time.perf_counter() - t0) / reps


def vae_seconds(pipe: Any, images: int, size: int, device: str) -> float:
    """Seconds of one VAE decode of `images` latents (the pipeline decodes a whole batch at once)."""
    import torch

    lat = torch.randn(images, 4, size // 8, size // 8, device=device, dtype=pipe.vae.dtype)
    with torch.inference_mode():
        pipe.vae.decode(lat / pipe.vae.config.scaling_factor)  # warm-up at the timed shape (a compiled decoder)
        sync(device)
        t0 = time.perf_counter()
        pipe.vae.decode(lat / pipe.vae.config.scaling_factor)
        sync(device)
    return time.perf_counter() - t0


KERNEL_KINDS = (  # (category, substrings of a CUDA kernel's name), first match wins
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn_generated_fort_native_sdpa")),
    ("fp8 matmul", ("f8", "fp8", "e4m3")),
    ("convolution", ("conv", "fprop", "dgrad", "implicit_gemm", "xmma_fprop", "cudnn")),
    ("matmul", ("gemm", "cutlass", "nvjet", "matmul", "_mm_", "sm90_xmma", "triton_tem")),
    ("triton (fused norms, pointwise)", ("triton",)),
)


def kernel_profile(unet: Any, rows: int, size: int, device: str) -> dict[str, float]:
    """Milliseconds of GPU time per kernel category in one UNet call at `rows` rows (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    lat, t, kw = unet_inputs(unet, rows, size, device)
    with torch.inference_mode():
        unet(lat, t, **kw)
        sync(device)
        with profile(activities=[ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU]) as prof:
            unet(lat, t, **kw)
            sync(device)
    out: dict[str, float] = {}
    top: dict[str, float] = {}
    for ev in prof.key_averages():
        # Self time: an operator's own device time is 0 (its kernels are its children), a kernel's is its run time.
        us = getattr(ev, "self_device_time_total", None)
        us = getattr(ev, "self_cuda_time_total", 0.0) if us is None else us
        if not us:
            continue
        name = ev.key.lower()
        kind = next((k for k, subs in KERNEL_KINDS if any(x in name for x in subs)), "other")
        out[kind] = out.get(kind, 0.0) + us / 1000
        top[ev.key[:90]] = us / 1000
    out["total"] = sum(v for k, v in out.items())
    out["top kernels"] = dict(sorted(top.items(), key=lambda kv: -kv[1])[:8])  # type: ignore[assignment]
    return out


def layout_probe(unet: Any, rows: int, size: int, device: str) -> dict[str, float]:
    """UNet-only seconds of the eager UNet in NCHW and channels_last, cuDNN autotuning off and on."""
    import torch

    out = {}
    for layout in ("nchw", "channels_last"):
        unet.to(memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            out[f"{layout}, cudnn.benchmark={bench}"] = unet_seconds(unet, rows, size, device, reps=5)
    torch.backends.cudnn.benchmark = False
    unet.to(memory_format=torch.contiguous_format)
    return out


def score_drift(
    work: Path, store: Any, prompts: list[str], ids: dict[str, list[str]], device: str, tiny: bool
) -> dict[str, dict[str, Any]]:
    """Q16 and CLIP scores of each variant's images against the `eager` images of the same seeds."""
    import numpy as np

    from tools.scorers.pixels import ClipQ16PixelScorer as ClipQ16Scorer

    if tiny:
        from tests.tiny import build_tiny_clip

        q16_clip = align_clip = build_tiny_clip(work / "clip")
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from grpo_step import build_clip

        q16_clip, align_clip = build_clip(work, "L14"), build_clip(work, "B32")
    np.save(work / "q16.npy", np.random.RandomState(0).randn(2, 768).astype("float32"))
    scorer = ClipQ16Scorer(q16_model=q16_clip, clip_model=align_clip, q16_embeddings=work / "q16.npy", device=device)
    ref_name = "eager" if "eager" in ids else next(iter(ids))
    images = {v: [store.open(i).convert("RGB") for i in got] for v, got in ids.items()}
    scores = {v: np.array(scorer.score(prompts, ims), dtype=np.float64) for v, ims in images.items()}
    ref_px = np.stack([np.asarray(im, dtype=np.float64) for im in images[ref_name]])
    out = {}
    for v in ids:
        px = np.stack([np.asarray(im, dtype=np.float64) for im in images[v]])
        mse = float(((px - ref_px) ** 2).mean())
        d = np.abs(scores[v] - scores[ref_name])
        out[v] = {
            "vs": ref_name,
            "q16_mean": float(scores[v][:, 0].mean()),
            "clip_mean": float(scores[v][:, 1].mean()),
            "q16_abs_drift_mean": float(d[:, 0].mean()),
            "q16_abs_drift_max": float(d[:, 0].max()),
            "clip_abs_drift_mean": float(d[:, 1].mean()),
            "clip_abs_drift_max": float(d[:, 1].max()),
            "pixel_mae": float(np.abs(px - ref_px).mean()),
            "psnr_db": float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse)),
        }
    return out


def warm_start(folder: str, args: argparse.Namespace) -> None:
    """Child process of `--cache-check`: time the first full batch of the default path with a warm cache."""
    import torch

    from tools.image_store import get_image_store
    from tools.t2i import GenerationRequest

    t0 = time.perf_counter()
    gen = make_generator("compile", folder, get_image_store(Path(args.workdir) / "store2"), args)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.n)]

    async def go() -> None:
        reqs = [
            GenerationRequest(prompt=p, seed=i, width=args.size, height=args.size, steps=2)
            for i, p in enumerate(prompts)
        ]
        await asyncio.gather(*(gen.generate(r) for r in reqs))

    asyncio.run(go())
    torch.cuda.synchronize()
    print(json.dumps({"warm_cache_first_batch_s": time.perf_counter() - t0}))


def compiled_kind(variant: str) -> bool:
    """Whether a variant compiles its UNet (its time is mostly the compilation, not the rounds)."""
    return variant.startswith(("compile", "fp8"))


def variant_need(spent: dict[str, float], variant: str) -> float:
    """Seconds `variant` is expected to take: the longest that a variant of its kind took so far (a compiled one
    compiles, eager does not), 0 when none ran."""
    return max((s for k, s in spent.items() if compiled_kind(k) == compiled_kind(variant)), default=0.0)


def mix_round(gen: Any, variant: str, prompts: list[str], args: argparse.Namespace, device: str) -> dict[str, Any]:
    """`--mix`: rounds of the given numbers of concurrent one-image requests, one after another, timed as a whole;
    the rate, the batch sizes formed and the compilations met after the warm-up."""
    from tools.t2i import GenerationRequest
    from tools.t2i.batching import get_batcher

    counts = [int(x) for x in args.mix.split(",") if x.strip()]
    stats = getattr(gen, "compile_stats", dict)
    late = stats().get("late_compiles", 0)
    batcher = get_batcher(gen.device)
    before = len(batcher.stats.sizes)

    async def burst(n: int, offset: int) -> None:
        reqs = [
            GenerationRequest(
                prompt=prompts[i % len(prompts)],
                seed=5000 + offset + i,
                width=args.size,
                height=args.size,
                steps=args.steps,
            )
            for i in range(n)
        ]
        await asyncio.gather(*(gen.generate(r) for r in reqs))

    sync(device)
    t0 = time.perf_counter()
    for k, n in enumerate(counts):
        asyncio.run(burst(n, 1000 * k))
    sync(device)
    seconds = time.perf_counter() - t0
    out = {
        f"{variant}.mix": counts,
        f"{variant}.mix_img_per_s": sum(counts) / seconds,
        f"{variant}.mix_batch_sizes": batcher.stats.sizes[before:],
        f"{variant}.mix_compiles": stats().get("late_compiles", 0) - late,
    }
    print(f"{variant}: mix {counts}: {out[f'{variant}.mix_img_per_s']:.2f} images/s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny test pipeline")
    ap.add_argument("--n", type=int, default=32, help="concurrent requests (one image each)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--baseline-n", type=int, default=None, help="prompts for the baseline (default: --n)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds of --n concurrent requests")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=20)
    ap.add_argument(
        "--variants",
        default="legacy-eager,legacy-compile,eager,compile,fp8",
        help="comma list of legacy-eager, legacy-compile, eager, compile, fp8, PRESET+switch...",
    )
    ap.add_argument("--drift", action="store_true", help="score every variant's images against the eager ones")
    ap.add_argument("--probe", action="store_true", help="UNet-only layout / cuDNN autotuning probe (eager)")
    ap.add_argument("--profile", action="store_true", help="GPU time of one UNet call per kernel category")
    ap.add_argument(
        "--cache-check",
        action="store_true",
        help="time the default path's first batch again in a fresh process (warm compile cache)",
    )
    ap.add_argument(
        "--phases",
        action="store_true",
        help="time the request path's steps in the timed rounds (validate, pipeline, decode, store; see "
        "bench/t2i_phases.py)",
    )
    ap.add_argument(
        "--busy-cpus",
        type=int,
        default=0,
        help="spin this many processes during the timed rounds: a host shared with CPU-heavy work, on purpose, to "
        "measure what it costs the renders (bench/host_cpu.py)",
    )
    ap.add_argument("--warm-start", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    ap.add_argument(
        "--mix",
        default="",
        help="comma list of concurrent request counts, one round each, timed as a whole (compiled variants)",
    )
    ap.add_argument(
        "--time-limit-s",
        type=float,
        default=0.0,
        help="skip a variant that would not end within this many seconds of the start (0: no limit)",
    )
    args = ap.parse_args()
    if args.warm_start:
        warm_start(args.warm_start, args)
        return

    import torch

    from tools.image_store import get_image_store
    from tools.t2i import GenerationRequest, clear_generator_cache
    from tools.t2i.batching import get_batcher

    bench_t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="t2i-bench-"))
    args.workdir = str(work)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    if args.tiny:
        from tests.tiny import build_tiny_sd

        args.size, args.steps = 32, min(args.steps, 2)
        t0 = time.perf_counter()
        folder = build_tiny_sd(work / "tiny-sd")
    else:
        t0 = time.perf_counter()
        built = work / "sd15-random"
        # A second run in the same --workdir reuses the saved random pipeline (same seed, same weights).
        folder = str(built) if (built / "model_index.json").is_file() else build_sd15_random(built, device)
    results["build_s"] = round(time.perf_counter() - t0, 1)
    prompts = [PROMPTS[i % len(PROMPTS)] + f", variation {i}" for i in range(args.n)]
    n_base = args.baseline_n or args.n

    # -- baseline: a plain diffusers pipeline, one call per prompt ----------------------------------------
    from diffusers import StableDiffusionPipeline

    dtype = torch.float16 if device == "cuda" else torch.float32
    base = StableDiffusionPipeline.from_pretrained(
        folder, dtype=dtype, safety_checker=None, requires_safety_checker=False
    ).to(device)
    base.set_progress_bar_config(disable=True)
    kw = dict(height=args.size, width=args.size, num_inference_steps=args.steps, guidance_scale=7.5)
    base(prompts[0], **{**kw, "num_inference_steps": 2})  # warm-up
    sync(device)
    t0 = time.perf_counter()
    for i in range(n_base):
        base(prompts[i], generator=torch.Generator().manual_seed(i), **kw)
    sync(device)
    base_s = time.perf_counter() - t0
    results["baseline_img_per_s"] = n_base / base_s
    flops = count_flops_per_image(base, args.size, args.steps, device)
    results["tflop_per_image"] = flops["per_image"] / 1e12
    results["flops_detail_tflop"] = {k: v / 1e12 for k, v in flops.items()}
    batch = min(args.n, args.max_batch)
    results["vae_decode_s_per_image"] = vae_seconds(base, batch, args.size, device) / batch
    if args.probe and device == "cuda":
        probe = layout_probe(base.unet, 2 * batch, args.size, device)
        results["probe_unet_only_img_per_s"] = {k: batch / (v * args.steps) for k, v in probe.items()}
    del base

    # -- Unveil: concurrent requests through the batched generator, one variant after another ---------------
    store = get_image_store(work / "store")
    tflop = results["tflop_per_image"]
    name = str(results["device"])
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    if peak:
        results["peak_tflops"] = peak
        results["limit_img_per_s"] = peak / tflop
    final_ids: dict[str, list[str]] = {}
    spent: dict[str, float] = {}
    for variant in args.variants.split(","):
        need = variant_need(spent, variant)
        elapsed = time.perf_counter() - bench_t0
        if args.time_limit_s and spent and elapsed + need > args.time_limit_s:
            results[f"{variant}.skipped"] = (
                f"not run: {elapsed:.0f} s spent, about {need:.0f} s needed, {args.time_limit_s:.0f} s allowed"
            )
            print(f"{variant}: {results[f'{variant}.skipped']}", flush=True)
            continue
        variant_t0 = time.perf_counter()
        try:
            gen = make_generator(variant, folder, store, args)

            async def round_(steps: int, gen: Any = gen) -> list[list[str]]:
                reqs = [
                    GenerationRequest(prompt=p, seed=1000 + i, width=args.size, height=args.size, steps=steps)
                    for i, p in enumerate(prompts)
                ]
                return await asyncio.gather(*(gen.generate(r) for r in reqs))

            t0 = time.perf_counter()
            asyncio.run(round_(2))  # warm-up: the generator compiles its buckets, then a round at the full batch
            results[f"{variant}.warmup_s"] = time.perf_counter() - t0
            stats = getattr(gen, "compile_stats", dict)
            late_before = stats().get("late_compiles", 0)
            batcher = get_batcher(gen.device)
            before = len(batcher.stats.sizes)
            clock = PhaseClock() if args.phases else None
            with busy_cpus(args.busy_cpus), instrumented(clock) if clock else contextlib.nullcontext():
                sync(device)
                t0 = time.perf_counter()
                with HostCpu() as host_cpu:  # what else kept the host's CPUs busy meanwhile (bench/host_cpu.py)
                    for _ in range(args.rounds):
                        ids = asyncio.run(round_(args.steps))
                    sync(device)
                ours_s = time.perf_counter() - t0
            results[f"{variant}.host_cpu"] = {**host_cpu.record(), "busy_cpus_on_purpose": args.busy_cpus}
            if clock:
                results[f"{variant}.phases"] = clock.report(ours_s, args.rounds * args.n)
        except Exception as exc:  # noqa: BLE001 - a variant that cannot run here (no torchao, no Hopper) is reported
            results[f"{variant}.error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            print(f"{variant}: failed: {results[f'{variant}.error']}", flush=True)
            clear_generator_cache()
            continue
        assert len(ids) == args.n and all(len(x) == 1 for x in ids)
        final_ids[variant] = [x[0] for x in ids]
        results[f"{variant}.compiles_in_timed_rounds"] = stats().get("late_compiles", 0) - late_before
        if args.mix and (variant.startswith(("compile", "fp8"))):
            results.update(mix_round(gen, variant, prompts, args, device))
        results[f"{variant}.compile"] = stats()
        rate = args.rounds * args.n / ours_s
        results[f"{variant}.batched_img_per_s"] = rate
        results[f"{variant}.batch_sizes"] = batcher.stats.sizes[before:]
        results[f"{variant}.speedup"] = rate / results["baseline_img_per_s"]
        results[f"{variant}.achieved_tflops"] = rate * tflop
        if peak:
            results[f"{variant}.fraction_of_peak"] = rate * tflop / peak
        # Breakdown of one image: the UNet alone at the same batch (CFG doubles it), the VAE decode, the rest.
        per_step = unet_seconds(gen.pipeline.unet, 2 * batch, args.size, device)
        unet_s = per_step * args.steps / batch
        results[f"{variant}.unet_only_img_per_s"] = 1 / unet_s
        if args.profile and device == "cuda":
            prof = kernel_profile(gen.pipeline.unet, 2 * batch, args.size, device)
            results[f"{variant}.kernel_ms_per_unet_call"] = prof
            print(
                f"{variant}: one UNet call at {2 * batch} rows: "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in prof.items() if isinstance(v, float)),
                flush=True,
            )
        total = 1 / rate
        # This variant's own VAE (compiled with the `vae` switch) at the rendering batch.
        vae = vae_seconds(gen.pipeline, batch, args.size, device) / batch
        results[f"{variant}.breakdown_ms_per_image"] = {
            "total": 1000 * total,
            "unet": 1000 * unet_s,
            "vae_decode": 1000 * vae,
            "rest (text encoder, scheduler, PIL, batching)": 1000 * max(total - unet_s - vae, 0.0),
        }
        print(f"{variant}: {rate:.2f} images/s (warm-up {results[f'{variant}.warmup_s']:.0f} s)", flush=True)
        if note := contended(results[f"{variant}.host_cpu"]):
            print(f"{variant}: {note}: not a figure of this code alone", flush=True)
        spent[variant] = time.perf_counter() - variant_t0
        if args.json:  # after every variant, so a run stopped at its time limit keeps the rows it finished
            Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        del gen
        clear_generator_cache()
        if device == "cuda":
            torch.cuda.empty_cache()

    if args.drift and len(final_ids) > 1:
        results["drift"] = score_drift(work, store, prompts, final_ids, device, args.tiny)
    if args.cache_check and device == "cuda":
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--warm-start",
                folder,
                "--workdir",
                str(work),
                "--n",
                str(args.n),
                "--size",
                str(args.size),
                "--max-batch",
                str(args.max_batch),
            ],
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        results["compile.warm_cache_first_batch_s"] = (
            json.loads(lines[-1])["warm_cache_first_batch_s"] if lines else f"failed: {out.stderr[-300:]}"
        )

    for k, v in results.items():
        print(f"{k:>34}: {round(v, 3) if isinstance(v, float) else v}")
    print_table(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


def print_table(results: dict[str, Any], args: argparse.Namespace) -> None:
    """The summary table (markdown), last so the end of the output carries it."""
    limit = results.get("limit_img_per_s")
    print(
        f"\n| path | images/s | vs baseline | share of limit ({limit and round(limit, 1)} images/s) "
        "| UNet alone | warm-up s | ms/image: UNet / VAE / rest |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = results["baseline_img_per_s"]
    print(
        f"| one pipeline call per prompt | {base:.2f} | 1x | {base / limit:.0%} | | | |"
        if limit
        else f"| one pipeline call per prompt | {base:.2f} | 1x | | | | |"
    )
    for v in args.variants.split(","):
        if f"{v}.batched_img_per_s" not in results:
            print(f"| {v} | failed: {results.get(f'{v}.error', '?')[:80]} | | | | | |")
            continue
        r = results[f"{v}.batched_img_per_s"]
        b = results[f"{v}.breakdown_ms_per_image"]
        share = f"{r / limit:.0%}" if limit else ""
        print(
            f"| {v} | {r:.2f} | {r / base:.1f}x | {share} | {results[f'{v}.unet_only_img_per_s']:.2f} | "
            f"{results[f'{v}.warmup_s']:.0f} | {b['unet']:.0f} / {b['vae_decode']:.0f} / "
            f"{b['rest (text encoder, scheduler, PIL, batching)']:.0f} |"
        )
    for v, d in results.get("drift", {}).items():
        print(
            f"drift {v} vs {d['vs']}: Q16 |d| mean {d['q16_abs_drift_mean']:.4f} max {d['q16_abs_drift_max']:.4f}; "
            f"CLIP |d| mean {d['clip_abs_drift_mean']:.4f} max {d['clip_abs_drift_max']:.4f}; "
            f"pixel MAE {d['pixel_mae']:.2f}, PSNR {d['psnr_db']:.1f} dB"
        )


if __name__ == "__main__":
    main()
