"""Seconds per GRPO step of the IPR refiner, and where they go, with random weights of the real sizes.

The policy is Qwen2.5-VL-3B-Instruct built from its configuration (hard-coded below; no download), with the
paper's LoRA (r=8, q_proj/v_proj); the reward generator is a Stable Diffusion 1.x pipeline of the real sizes at
512x512 (random weights, saved to a temporary folder and loaded through `tools.t2i.registry`); the scorers are
CLIP ViT-L/14 (Q16) and ViT-B/32 (alignment) of the real sizes. Settings are the paper's: 4 completions per
device batch, gradient accumulation 4, group size 4 (4 prompts x 4 answers per step), 10 images per refined
prompt, 200 completion tokens, the authors' SD settings (50 steps, guidance 7).

A random policy never writes `keep`, and its text does not parse, so the bench counts every answer as a refined
prompt (the decoded text, cut at CLIP's 77 tokens by the generator): the worst case, 160 renders a step.

The tokenizer is a byte-level BPE trained here on English text (the real Qwen vocabulary cannot be downloaded),
with Qwen's special tokens; prompt lengths are printed so they can be compared with the real tokenizer's.

Run on a GPU machine:  python bench/grpo_step.py [--steps 2] [--warmup 1] [--t2i-steps 50] [--fast-steps 20]
`--fast-steps N` adds a second measurement with a DPM-Solver++ scheduler at N steps. The reward's UNet runs on
the generator's default CUDA path (compiled; `--accel eager` for the old one) and the policy samples with a
static cache and compiled decoding (`--no-fast-sampling` for TRL's default). `--sampling-bench` first times
policy sampling alone (16 x `--max-completion` tokens) both ways, side by side on the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QWEN_SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen/Qwen2.5-VL-3B-Instruct config.json (sizes that matter for speed).
QWEN_TEXT = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=11008,
    num_hidden_layers=36,
    num_attention_heads=16,
    num_key_value_heads=2,
    max_position_embeddings=128000,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=True,
    use_sliding_window=False,
    max_window_layers=70,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
)
QWEN_VISION = dict(
    depth=32,
    hidden_size=1280,
    intermediate_size=3420,
    num_heads=16,
    out_hidden_size=2048,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31],
    in_chans=3,
    tokens_per_second=2,
    hidden_act="silu",
)


def corpus() -> list[str]:
    """English text for the bench tokenizer: the project's prompts and docs."""
    from agents.labeller import LABELLER_PROMPT
    from agents.refiner import REFINER_PROMPT

    texts = [REFINER_PROMPT, LABELLER_PROMPT]
    root = Path(__file__).resolve().parent.parent
    for p in list(root.glob("docs/*.md")) + list(root.glob("agents/**/*.py")) + list(root.glob("training/*.py")):
        texts.append(p.read_text(encoding="utf-8", errors="ignore"))
    return texts


def build_qwen(folder: Path):
    """Save the processor (bench tokenizer + Qwen2-VL image processor) and return a random 3B model on GPU."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus(),
        trainers.BpeTrainer(vocab_size=8000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=32768
    )
    fast.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL})
    fast.chat_template = QWEN_TEMPLATE
    ids = {t: fast.convert_tokens_to_ids(t) for t in QWEN_SPECIAL}
    # The real processor's defaults: 512x512 becomes 36x36 patches of 14 px = 324 merged image tokens.
    from transformers import Qwen2VLVideoProcessor

    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(),
        tokenizer=fast,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=QWEN_TEMPLATE,
    )
    processor.save_pretrained(folder)
    text = dict(
        QWEN_TEXT, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]
    )
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=QWEN_VISION,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    config.save_pretrained(folder)
    if os.environ.get("BENCH_CHECK_ONLY"):  # build the processor and config only (CPU check of this function)
        return None
    with torch.device(os.environ.get("BENCH_DEVICE", "cuda")):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    return model


def build_sd(folder: Path) -> str:
    """A random SD 1.x pipeline (v1.4/1.5 sizes), fp16, saved for `diffusers:<folder>`."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from tests.tiny import clip_tokenizer_dir

    with torch.device(os.environ.get("BENCH_DEVICE", "cuda")):
        unet = UNet2DConditionModel(
            sample_size=64,
            in_channels=4,
            out_channels=4,
            layers_per_block=2,
            block_out_channels=(320, 640, 1280, 1280),
            cross_attention_dim=768,
            attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        ).half()
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            layers_per_block=2,
            sample_size=512,
            block_out_channels=(128, 256, 512, 512),
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
        ).half()
        text = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=49408,
                hidden_size=768,
                intermediate_size=3072,
                num_hidden_layers=12,
                num_attention_heads=12,
                max_position_embeddings=77,
                hidden_act="quick_gelu",
                projection_dim=768,
            )
        ).half()
    tokenizer = CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tok"))
    scheduler = PNDMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", skip_prk_steps=True, steps_offset=1
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder / "sd")
    return str(folder / "sd")


def build_clip(folder: Path, kind: str) -> str:
    """A random transformers CLIP of ViT-L/14 or ViT-B/32 size with a processor."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    from tests.tiny import clip_tokenizer_dir

    if kind == "L14":
        vision = dict(
            hidden_size=1024,
            intermediate_size=4096,
            num_hidden_layers=24,
            num_attention_heads=16,
            patch_size=14,
            image_size=224,
        )
        textc = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
        proj = 768
    else:
        vision = dict(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            patch_size=32,
            image_size=224,
        )
        textc = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)
        proj = 512
    cfg = CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, **textc),
        vision_config=vision,
        projection_dim=proj,
    )
    out = folder / f"clip{kind}"
    CLIPModel(cfg).half().save_pretrained(out)
    tok = CLIPTokenizer.from_pretrained(clip_tokenizer_dir(folder / "_tok"))
    CLIPProcessor(image_processor=CLIPImageProcessor(), tokenizer=tok).save_pretrained(out)
    return str(out)


class Timer:
    """Accumulates seconds per label around wrapped callables (CUDA-synchronised)."""

    def __init__(self, device: str):
        self.t: dict[str, float] = {}
        self.device = device

    def sync(self) -> None:
        """Wait for queued GPU work so it is booked to the right phase."""
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def wrap(self, obj, name: str, label: str):
        fn = getattr(obj, name)

        def timed(*a, **k):
            self.sync()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.sync()
                self.t[label] = self.t.get(label, 0.0) + time.perf_counter() - t0

        setattr(obj, name, timed)


def sampling_bench(trainer, records: list[dict], store, *, n: int, tokens: int, device: str) -> dict[str, float]:
    """Seconds to sample `n` answers of exactly `tokens` tokens with the trainer's policy: TRL's default (dynamic
    cache, no compilation) and the fast path (static cache, compiled decoding); the first compiled call is the
    warm-up (compilation) and is reported apart."""
    import copy

    import torch

    from training.data import refiner_conversation

    proc = trainer.processing_class
    proc.tokenizer.padding_side = "left"
    texts, images = [], []
    for i in range(n):
        rec = records[i % len(records)]
        texts.append(
            proc.apply_chat_template(refiner_conversation(rec["prompt"]), tokenize=False, add_generation_prompt=True)
        )
        images.append(store.open(rec["image_id"]).convert("RGB"))
    inputs = proc(text=texts, images=images, return_tensors="pt", padding=True).to(device)
    model = trainer.model
    out: dict[str, float] = {}
    for label, static in (("TRL default (dynamic cache, eager)", False), ("static cache, compiled", True)):
        cfg = copy.deepcopy(trainer.generation_config)
        cfg.max_new_tokens = cfg.min_new_tokens = tokens
        cfg.cache_implementation = "static" if static else None
        cfg.disable_compile = not static
        times = []
        for _ in range(2 if static else 1):
            torch.cuda.synchronize() if device.startswith("cuda") else None
            t0 = time.perf_counter()
            with torch.no_grad():
                ids = model.generate(**inputs, generation_config=cfg)
            torch.cuda.synchronize() if device.startswith("cuda") else None
            times.append(time.perf_counter() - t0)
            assert ids.shape[1] - inputs["input_ids"].shape[1] == tokens, ids.shape
        out[f"{label}: first call"] = times[0]
        out[label] = sum(times[1:]) / len(times[1:]) if len(times) > 1 else times[0]
        print(f"sampling {n}x{tokens} tokens, {label}: {out[label]:.2f} s (first call {times[0]:.1f} s)", flush=True)
    return out


def launch(n: int, *, tiny: bool) -> int:
    """Run this bench with the same arguments in `n` processes: `accelerate launch` on GPUs, `torch.distributed.run`
    (gloo) on CPU for `--tiny`; rank 0 writes the report."""
    import subprocess

    here = str(Path(__file__).resolve())
    argv = sys.argv[1:]
    if tiny:  # accelerate's CPU launcher wants MPI for several processes; torchrun's gloo needs nothing more
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n), here, *argv]
    else:
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(n),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            here,
            *argv,
        ]
    print("launching:", " ".join(cmd), flush=True)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run(cmd, env=env).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2, help="measured optimizer steps")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--t2i-steps", type=int, default=50)
    ap.add_argument("--fast-steps", type=int, default=0, help="also measure DPM-Solver++ at this many steps")
    ap.add_argument("--images-per-prompt", type=int, default=10)
    ap.add_argument("--max-completion", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--json", help="write the numbers here too")
    ap.add_argument(
        "--scheduler",
        choices=["pndm", "dpm"],
        default="pndm",
        help="sampler of the reward renders: the SD default (PNDM) or DPM-Solver++",
    )
    ap.add_argument(
        "--keep-frac",
        type=float,
        default=0.0,
        help="count this fraction of answers as `keep` (a trained refiner keeps often; 0: worst case)",
    )
    ap.add_argument("--max-batch", type=int, default=32, help="images per SD batch")
    ap.add_argument(
        "--accel",
        default="auto",
        help="the reward generator's UNet path: auto (compiled on CUDA), eager, compile, fp8, "
        "PRESET+switch... (tools.t2i.fast)",
    )
    ap.add_argument(
        "--no-fast-sampling",
        action="store_true",
        help="sample the policy as TRL does by default (dynamic cache, no compilation)",
    )
    ap.add_argument(
        "--sampling-bench",
        action="store_true",
        help="first time policy sampling alone, TRL's default against the fast path",
    )
    ap.add_argument("--sampling-only", action="store_true", help="stop after --sampling-bench (no GRPO steps)")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="tiny models on CPU: checks the bench itself, times nothing real (and, unless given, a small "
        "workload: 1 step after 1 warm-up, 4 prompts, 2 renders each at 2 diffusion steps, 16 tokens)",
    )
    ap.add_argument(
        "--gpus",
        type=int,
        default=1,
        help="processes (1, 2 or 4): above 1, `accelerate launch` runs the step data-parallel with the "
        "same group and batch in all (each rank takes 1/N of the prompts and renders its own reward)",
    )
    args = ap.parse_args()
    import logging

    # What the compiled decoding loaded from and saved to a shared compile folder (`UNVEIL_COMPILE_SHARED`).
    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("unveil.training.grpo").setLevel(logging.INFO)
    if args.tiny:
        small = {"steps": 1, "warmup": 1, "prompts": 4, "images_per_prompt": 2, "t2i_steps": 2, "max_completion": 16}
        for name, value in small.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    if args.gpus not in (1, 2, 4):
        ap.error(f"--gpus {args.gpus}: the paper's 16 answers a step split over 1, 2 or 4 processes only")
    if args.gpus > 1 and "RANK" not in os.environ:
        return launch(args.gpus, tiny=args.tiny)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.gpus > 1 and not args.tiny:
        local_rank = own_gpu(local_rank)

    import numpy as np
    import torch
    from transformers import TrainerCallback

    from tools.image_store import get_image_store
    from tools.scorers.pixels import ClipQ16PixelScorer as ClipQ16Scorer
    from tools.t2i.settings import RenderSettings, render_kwargs
    from training.answers import Decision
    from training.config import GRPOSettings, build_settings
    from training.grpo import build_grpo_trainer
    from training.render import make_renderer

    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f"grpo-bench-{rank}-"))
    device = "cpu" if args.tiny else f"cuda:{local_rank}"
    if not args.tiny:
        torch.cuda.set_device(local_rank)  # the builders below put the models on the current device
    # Every rank (and the one-process run) builds the same random models: same seeds, comparable losses.
    torch.manual_seed(0)
    size = 32 if args.tiny else 512
    if args.tiny:
        from transformers import AutoModelForImageTextToText

        from tests.tiny import build_tiny_clip, build_tiny_sd
        from tests.tiny_vlm import build_tiny_qwen_vl

        model = AutoModelForImageTextToText.from_pretrained(build_tiny_qwen_vl(work / "qwen"))
        sd = build_tiny_sd(work / "sd")
        q16_clip = align_clip = build_tiny_clip(work / "clip")
    elif args.sampling_only:  # the policy alone: the reward models are never loaded
        model = build_qwen(work / "qwen")
        sd = q16_clip = align_clip = str(work / "unused")
    else:
        sd = build_sd(work)
        # The reward generator loads and compiles its buckets first, in this thread (`warm_up_first`: beside the
        # policy's build it broke three ways); the renderer made below finds it warm (same pipeline).
        from tools.t2i import get_generator
        from training.render import warm_up_first

        warm_up_first(get_generator(f"diffusers:{sd}", device=device, max_batch=args.max_batch, accel=args.accel))
        torch.manual_seed(0)  # the policy's random weights as when it was built first
        model = build_qwen(work / "qwen")
        q16_clip, align_clip = build_clip(work, "L14"), build_clip(work, "B32")
    np.save(work / "q16.npy", np.random.RandomState(0).randn(2, 768).astype("float16"))
    store = get_image_store(str(work / "store"))
    from PIL import Image

    rng = np.random.RandomState(0)
    records = []
    for i in range(args.prompts):
        img = Image.fromarray(rng.randint(0, 255, (size, size, 3), dtype=np.uint8))
        records.append(
            {
                "id": str(i),
                "prompt": f"a detailed painting of scene number {i}, dramatic light, 4k",
                "image_id": store.put_pil(img).id,
            }
        )
    settings = build_settings(
        GRPOSettings,
        {
            "model": str(work / "qwen"),
            "output_dir": str(work / "out"),
            "max_steps": args.warmup + args.steps + 2,
            "gradient_accumulation_steps": 4 // args.gpus,
            "logging_steps": 1,
            "max_completion_length": args.max_completion,
            "steps": args.t2i_steps,
            "generator": f"diffusers:{sd}",
            "clip_model": align_clip,
            "q16_model": q16_clip,
            "q16_embeddings": str(work / "q16.npy"),
            "image_store": str(work / "store"),
            "width": size,
            "height": size,
            "cpu": args.tiny,
            "reward": {"images_per_prompt": args.images_per_prompt, "scale": "authors"},
        },
    )
    renderer = make_renderer(
        settings.generator,
        store=store,
        device=device,
        render=RenderSettings(**render_kwargs(settings)),
        max_batch=args.max_batch,
        accel=args.accel,
    )
    if args.scheduler == "dpm":
        from diffusers import DPMSolverMultistepScheduler

        pipe = renderer.generator.pipeline
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
    scorer: Any = object()  # never called with --sampling-only
    if not args.sampling_only:
        scorer = ClipQ16Scorer(
            q16_model=q16_clip, clip_model=align_clip, q16_embeddings=work / "q16.npy", device=device
        )

    import training.grpo as grpo_mod
    import training.models as models_mod

    def load_random(s):  # the random 3B model built above, with the paper's new LoRA
        return model, models_mod.lora_config(s)

    grpo_mod.load_model = load_random
    trainer, reward = build_grpo_trainer(
        settings,
        renderer=renderer,
        scorer=scorer,
        store=store,
        records=records,
        fast_sampling=not args.no_fast_sampling and not args.tiny,
    )
    sampling = {}
    if args.sampling_bench or args.sampling_only:
        sampling = sampling_bench(trainer, records, store, n=16, tokens=args.max_completion, device=device)
        if args.sampling_only:
            print(
                json.dumps(
                    {
                        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                        "sampling_16_answers_s": sampling,
                    },
                    indent=1,
                )
            )
            return 0
    # Every answer of the random policy counts as a refined prompt (the worst case for rendering).
    import hashlib

    def parse(text: str) -> Decision:
        if args.keep_frac and int(hashlib.sha256(text.encode()).hexdigest(), 16) % 1000 < args.keep_frac * 1000:
            return Decision("keep")
        return Decision("refine", prompt=" ".join(text.split())[:300] or "empty")

    reward.parse = parse
    timer = Timer(device)
    timer.wrap(trainer, "_generate_single_turn", "generation")
    timer.wrap(trainer, "_get_per_token_logps_and_entropies", "forward (policy, old, ref)")
    timer.wrap(trainer.accelerator, "backward", "backward")
    build_s = time.perf_counter() - t_start
    gate = {"s": 0.0 if args.warmup else bench_gate(rank)}

    steps: list[dict[str, float]] = []
    state = {"t0": None, "timer": {}, "reward": reward.timings.as_dict()}

    class StepTimes(TrainerCallback):
        # A step is timed from the end of the previous one (so the batch fetch counts), the first from its start.
        def on_step_begin(self, a, s, c, **k):
            if state["t0"] is None:
                timer.sync()
                state["t0"] = time.perf_counter()

        def on_step_end(self, a, s, c, **k):
            timer.sync()
            now_t = time.perf_counter()
            rec = {"step_s": now_t - state["t0"]}
            for key, val in timer.t.items():
                rec[key] = val - state["timer"].get(key, 0.0)
            now = reward.timings.as_dict()
            rec["rendering (SD)"] = now["render_s"] - state["reward"]["render_s"]
            rec["scoring (Q16+CLIP)"] = now["score_s"] - state["reward"]["score_s"]
            rec["pool (store renders)"] = now["pool_s"] - state["reward"]["pool_s"]
            rec["images"] = now["images_rendered"] - state["reward"]["images_rendered"]
            state.update(t0=now_t, timer=dict(timer.t), reward=now)
            steps.append(rec)
            phase = f"fast-{args.fast_steps}" if len(steps) > args.warmup + args.steps else "measured"
            print(
                f"rank {rank} step {len(steps)} [{phase}]: " + ", ".join(f"{k}={v:.2f}" for k, v in rec.items()),
                flush=True,
            )
            if args.warmup and len(steps) == args.warmup:
                # The suite's gate comes after the warm-up steps (every compilation done), so the job sharing
                # these GPUs waits for a prepared job only; the wait is not part of the next step's time.
                gate["s"] = bench_gate(rank)
                timer.sync()
                state["t0"] = time.perf_counter()
            if len(steps) == args.warmup + args.steps:
                if args.fast_steps:
                    from diffusers import DPMSolverMultistepScheduler

                    pipe = renderer.generator.pipeline
                    pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
                    renderer.steps = args.fast_steps
                    reward.refined_cache.clear()
                else:
                    c.should_training_stop = True
            if len(steps) >= args.warmup + args.steps + (2 if args.fast_steps else 0):
                c.should_training_stop = True

    trainer.add_callback(StepTimes())
    trainer.train()

    def summary(rows):
        keys = [k for k in rows[0] if k != "images"]
        return {k: sum(r[k] for r in rows) / len(rows) for k in keys} | {"images": rows[0]["images"]}

    paper = summary(steps[args.warmup : args.warmup + args.steps])
    from training.data import refiner_conversation

    conv = refiner_conversation(records[0]["prompt"])
    text = trainer.processing_class.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    encoded = trainer.processing_class(text=[text], images=[store.open(records[0]["image_id"])])
    prompt_tokens = len(encoded["input_ids"][0])
    history = trainer.state.log_history
    result = {
        "device": torch.cuda.get_device_name(0) if device != "cpu" else "cpu (tiny models)",
        "build_s": build_s,
        "gate_s": gate["s"],
        "processes": args.gpus,
        # Trainer logs gather over ranks: the loss and mean reward of each step, across all processes.
        "losses": [h["loss"] for h in history if "loss" in h],
        "rewards": [h["reward"] for h in history if "reward" in h],
        "prompt_tokens": prompt_tokens,
        "prompt_chars": len(text),
        "settings": {
            "per_device_batch": 4,
            "grad_accum": 4 // args.gpus,
            "group": 4,
            "images_per_prompt": args.images_per_prompt,
            "max_completion": args.max_completion,
            "steps": args.t2i_steps,
            "size": size,
            "scheduler": args.scheduler,
            "keep_frac": args.keep_frac,
            "max_batch": args.max_batch,
            "accel": args.accel,
            "fast_sampling": not args.no_fast_sampling,
        },
        "sampling_16_answers_s": sampling,
        # The reward generator's warm-up (every bucket compiled before the first step) and any compilation after.
        "compile": getattr(renderer.generator, "compile_stats", dict)(),
        "measured": paper,
        "steps": steps,
    }
    if args.fast_steps and len(steps) > args.warmup + args.steps + 1:
        result["fast_config"] = summary(steps[args.warmup + args.steps + 1 :])
    if rank != 0:  # rank 0 reports (its step times include waiting for the others)
        return 0
    print("\n== GRPO step on", result["device"], f"x{args.gpus}", "==")
    for name in ("measured", "fast_config"):
        if name in result:
            r = result[name]
            parts = "  ".join(f"{k}: {v:.1f}" for k, v in r.items() if k != "step_s")
            print(f"{name}: {r['step_s']:.1f} s/step  " + parts)
    print(json.dumps(result, indent=1, default=float))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=float))
    for label, sec in sampling.items():
        print(f"policy sampling 16 x {args.max_completion} tokens, {label}: {sec:.2f} s")
    r = result["measured"]
    print(
        f"GRPO step, {args.gpus} process(es): {r['step_s']:.1f} s (target 40 s on 1 GPU, 12 s on 4); "
        + ", ".join(f"{k} {v:.1f} s ({v / r['step_s']:.0%})" for k, v in r.items() if k not in ("step_s", "images"))
    )
    return 0


def own_gpu(local_rank: int) -> int:
    """Give this rank its GPU alone (before torch starts CUDA): `CUDA_VISIBLE_DEVICES` narrowed to it, so it is
    `cuda:0` here as in every other process of the machine. Compiled graphs name their device, so with all GPUs
    visible rank k compiled its own `cuda:k` graphs, cold, instead of loading the ones the machine's cache holds
    (`tools.t2i.warmup`). Returns the local rank to use (0); accelerate reads `LOCAL_RANK` for its device."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        import subprocess

        found = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
        visible = [str(i) for i in range(len(found.strip().splitlines()))]
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[local_rank]
    os.environ["LOCAL_RANK"] = "0"
    return 0


def bench_gate(rank: int) -> float:
    """The GPU suite's gate (`bench/gpu_suite.py`, `GATES`): once every rank has built its models and taken its
    warm-up steps (every compilation done), say so (`UNVEIL_BENCH_PREPARED_FILE`), then wait until the suite opens
    the gate (`UNVEIL_BENCH_GO_FILE`: the job sharing these GPUs has ended) before the timed steps. The seconds
    waited (0 outside the suite)."""
    prepared, go = os.environ.get("UNVEIL_BENCH_PREPARED_FILE"), os.environ.get("UNVEIL_BENCH_GO_FILE")
    if not (prepared or go):
        return 0.0
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    if prepared and rank == 0:
        Path(prepared).touch()
    started = time.perf_counter()
    while go and not Path(go).exists() and time.perf_counter() - started < GATE_TIMEOUT_S:
        time.sleep(0.5)
    print(f"rank {rank}: gate open after {time.perf_counter() - started:.0f} s", flush=True)
    return time.perf_counter() - started


GATE_TIMEOUT_S = 600.0  # a gate the suite never opens (it was stopped) does not hold the job for ever


def finish_ranks() -> None:
    """Every rank waits for the others, then ends its process group. Rank 1 used to return while rank 0 still
    printed, with the group's threads alive: rank 0 then aborted at exit now and then ("terminate called without an
    active exception"), and the launcher reported the whole run as failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    code = main()
    finish_ranks()
    raise SystemExit(code)
