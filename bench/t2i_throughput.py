"""Text-to-image throughput: Unveil's batched generator against one diffusers call per prompt.

The workload is what an IPR evaluation produces: N concurrent refinement requests, each for one image. The
model is Stable Diffusion 1.5's exact UNet / VAE / text-encoder configuration with random weights (speed needs
no trained weights, and nothing is downloaded), saved to a folder and loaded back through the real loading
path (`get_generator("diffusers:<folder>")`). 512x512, 50 steps, classifier-free guidance, fp16 on CUDA.

Printed: images/s of the baseline (sequential `pipe(prompt)` calls), of the batched generator, the speed-up,
the UNet alone at the same batch, FLOPs per image (counted with torch's FlopCounterMode) and the fraction of the
GPU's dense fp16 peak reached.

    python bench/t2i_throughput.py                  # GPU, the real configuration
    python bench/t2i_throughput.py --variants eager,compile   # also with the UNet under torch.compile
    python bench/t2i_throughput.py --tiny           # CPU smoke run on the tiny test pipeline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Stable Diffusion 1.5 component configurations (runwayml/stable-diffusion-v1-5), written out so no download
# is needed.
SD15_UNET = dict(
    act_fn="silu", attention_head_dim=8, block_out_channels=[320, 640, 1280, 1280], center_input_sample=False,
    cross_attention_dim=768,
    down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    downsample_padding=1, flip_sin_to_cos=True, freq_shift=0, in_channels=4, layers_per_block=2,
    mid_block_scale_factor=1, norm_eps=1e-5, norm_num_groups=32, out_channels=4, sample_size=64,
    up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
)
SD15_VAE = dict(
    act_fn="silu", block_out_channels=[128, 256, 512, 512], down_block_types=["DownEncoderBlock2D"] * 4,
    in_channels=3, latent_channels=4, layers_per_block=2, norm_num_groups=32, out_channels=3, sample_size=512,
    up_block_types=["UpDecoderBlock2D"] * 4,
)
SD15_TEXT = dict(
    vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
    max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768, bos_token_id=49406,
    eos_token_id=49407, pad_token_id=1,
)
SD15_SCHEDULER = dict(
    beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
    set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1,
)
# Dense (no sparsity) fp16/bf16 tensor-core peaks, TFLOP/s.
PEAK_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H100 PCIe": 756.0, "H200": 989.4, "A100": 312.0}

PROMPTS = [
    "a portrait of a woman in a red coat standing in the rain", "a city street at night, neon lights",
    "a dog running on a beach at sunset", "an oil painting of a stormy sea", "a bowl of fruit on a wooden table",
    "a knight in armour on horseback", "a futuristic car in a desert", "a cat sleeping on a windowsill",
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
        unet=unet, vae=vae, text_encoder=text_encoder,
        tokenizer=CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tok")),
        scheduler=PNDMScheduler(**SD15_SCHEDULER), safety_checker=None,
        feature_extractor=CLIPImageProcessor(), requires_safety_checker=False,
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
    ctx = torch.randn(2, 77, 768 if pipe.unet.config.cross_attention_dim == 768 else pipe.unet.config.cross_attention_dim,
                      device=device, dtype=dtype)
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
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


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
    ap.add_argument("--variants", default="eager", help="comma list of eager,compile (torch.compile the UNet)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args()

    import torch

    from tools.image_store import get_image_store
    from tools.t2i import GenerationRequest, clear_generator_cache, get_generator
    from tools.t2i.batching import get_batcher

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="t2i-bench-"))
    results: dict[str, object] = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    if args.tiny:
        from tests.tiny import build_tiny_sd

        args.size, args.steps = 32, min(args.steps, 2)
        t0 = time.perf_counter()
        folder = build_tiny_sd(work / "tiny-sd")
    else:
        t0 = time.perf_counter()
        folder = build_sd15_random(work / "sd15-random", device)
    results["build_s"] = round(time.perf_counter() - t0, 1)
    prompts = [PROMPTS[i % len(PROMPTS)] + f", variation {i}" for i in range(args.n)]
    n_base = args.baseline_n or args.n

    # -- baseline: a plain diffusers pipeline, one call per prompt ----------------------------------------
    from diffusers import StableDiffusionPipeline

    dtype = torch.float16 if device == "cuda" else torch.float32
    base = StableDiffusionPipeline.from_pretrained(folder, dtype=dtype, safety_checker=None,
                                                   requires_safety_checker=False).to(device)
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
    base_unet = base.unet
    del base

    # -- Unveil: concurrent requests through the batched generator (eager, and optionally compiled) ---------
    store = get_image_store(work / "store")
    tflop = results["tflop_per_image"]
    name = str(results["device"])
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    if peak:
        results["peak_tflops"] = peak
        results["limit_img_per_s"] = peak / tflop
    for variant in args.variants.split(","):
        compile_ = variant == "compile"
        gen = get_generator("diffusers:" + folder, store=store, max_batch=args.max_batch,
                            max_wait_ms=args.max_wait_ms, compile=compile_)

        async def round_(steps: int) -> list[list[str]]:
            reqs = [GenerationRequest(prompt=p, seed=1000 + i, width=args.size, height=args.size, steps=steps)
                    for i, p in enumerate(prompts)]
            return await asyncio.gather(*(gen.generate(r) for r in reqs))

        t0 = time.perf_counter()
        asyncio.run(round_(2))  # warm-up at the full batch shape (and compilation, if any)
        results[f"{variant}.warmup_s"] = time.perf_counter() - t0
        batcher = get_batcher(gen.device)
        before = len(batcher.stats.sizes)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            ids = asyncio.run(round_(args.steps))
        sync(device)
        ours_s = time.perf_counter() - t0
        assert len(ids) == args.n and all(len(x) == 1 for x in ids)
        rate = args.rounds * args.n / ours_s
        results[f"{variant}.batched_img_per_s"] = rate
        results[f"{variant}.batch_sizes"] = batcher.stats.sizes[before:]
        results[f"{variant}.speedup"] = rate / results["baseline_img_per_s"]
        results[f"{variant}.achieved_tflops"] = rate * tflop
        if peak:
            results[f"{variant}.fraction_of_peak"] = rate * tflop / peak

        # The UNet alone at the same batch (CFG doubles it): the ceiling of this implementation.
        unet = gen.pipeline.unet
        b = min(args.n, args.max_batch) * 2
        lat = torch.randn(b, 4, args.size // 8, args.size // 8, device=device, dtype=unet.dtype)
        ctx = torch.randn(b, 77, unet.config.cross_attention_dim, device=device, dtype=unet.dtype)
        unet_steps = min(args.steps, 10)
        with torch.inference_mode():
            unet(lat, 10, encoder_hidden_states=ctx)
            sync(device)
            t0 = time.perf_counter()
            for _ in range(unet_steps):
                unet(lat, 10, encoder_hidden_states=ctx)
            sync(device)
        per_step = (time.perf_counter() - t0) / unet_steps
        results[f"{variant}.unet_only_img_per_s"] = (b // 2) / (per_step * args.steps)
        del gen, unet
        clear_generator_cache()
        if device == "cuda":
            torch.cuda.empty_cache()
    del base_unet

    for k, v in results.items():
        print(f"{k:>30}: {round(v, 3) if isinstance(v, float) else v}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
