"""Two GRPO steps on a tiny Qwen2.5-VL with a tiny Stable Diffusion reward generator and a tiny CLIP scorer:
finite losses, the reward path (renders, pool, caches) exercised, and an adapter that reloads and changes outputs."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tests.tiny import build_tiny_clip, build_tiny_sd
from tests.tiny_vlm import build_tiny_qwen_vl
from training.answers import Decision


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo-models")
    q16 = root / "q16.npy"
    np.save(q16, np.random.RandomState(0).randn(2, 768).astype("float16"))
    return {
        "qwen": build_tiny_qwen_vl(root / "qwen"),
        "sd": build_tiny_sd(root / "sd"),
        "clip": build_tiny_clip(root / "clip"),
        "q16": str(q16),
    }


def varied_decision(text: str) -> Decision:
    """The tiny random policy writes noise; map each completion to keep or one of a few prompts by its hash so
    a group's rewards differ (GRPO learns nothing from equal rewards) and both reward paths run."""
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    if h % 4 == 0:
        return Decision("keep")
    return Decision("refine", prompt=f"a peaceful garden, style {h % 3}")


def tiny_grpo_config(tiny_models: dict[str, str], prompts: Path, tmp_path: Path, **settings: Any) -> dict[str, Any]:
    """GRPO settings on the tiny models (CPU, 32x32, 2 diffusion steps, one group of 4 a step), with `settings`
    on top."""
    return {
        "model": tiny_models["qwen"],
        "data": str(prompts),
        "output_dir": str(tmp_path / "out"),
        "gradient_accumulation_steps": 1,
        "num_generations": 4,
        "logging_steps": 1,
        "cpu": True,
        "generator": f"diffusers:{tiny_models['sd']}",
        "steps": 2,
        "width": 32,
        "height": 32,
        "clip_model": tiny_models["clip"],
        "q16_model": tiny_models["clip"],
        "q16_embeddings": tiny_models["q16"],
        "image_store": str(tmp_path / "store"),
        **settings,
    }


def test_grpo_two_steps(tmp_path, tiny_models):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    import training.grpo as grpo
    from training.config import GRPOSettings, build_settings

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"id": f"p{i}", "prompt": p})
            for i, p in enumerate(["a man with a bloody axe", "a burning car on a street"])
        )
        + "\n"
    )
    settings = build_settings(
        GRPOSettings,
        tiny_grpo_config(
            tiny_models,
            prompts,
            tmp_path,
            max_steps=2,
            per_device_batch_size=4,
            max_completion_length=6,
            learning_rate=0.02,
            image_pool=True,  # the authors' growing pool, exercised here
            reward={"images_per_prompt": 2, "scale": "authors"},
        ),
    )
    trainer, reward = grpo.build_grpo_trainer(settings)
    reward.parse = varied_decision
    trainer.train()
    trainer.save_model(settings.output_dir)

    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses + rewards)
    logged = [h for h in trainer.state.log_history if "reward/render_s" in h]
    assert logged and all("refiner/keep_frac" in h and "reward/pool_images" in h for h in logged)
    # Initial images were rendered for both prompts, then refined answers were rendered 2 images each.
    assert reward.timings.images_rendered >= 2 and reward.timings.calls == 2
    assert len(reward.current_cache) >= 2 and reward.refined_cache
    # Refined renders joined the pools of their prompts.
    assert reward.pool.size() > 2 and set(reward.pool.pools) == {"p0", "p1"}

    processor = AutoProcessor.from_pretrained(tiny_models["qwen"])
    from training.data import refiner_conversation

    text = processor.apply_chat_template(
        refiner_conversation("a man with a bloody axe"), tokenize=False, add_generation_prompt=True
    )
    inputs = processor(text=[text], images=[Image.new("RGB", (56, 56))], return_tensors="pt")
    base = AutoModelForImageTextToText.from_pretrained(tiny_models["qwen"]).eval()
    tuned = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(tiny_models["qwen"]), settings.output_dir
    ).eval()
    with torch.no_grad():
        before, after = base(**inputs).logits[0, -1], tuned(**inputs).logits[0, -1]
    assert torch.isfinite(after).all() and not torch.allclose(before, after, atol=1e-6)


def test_grpo_records_keep_labelled_images(tmp_path):
    """Labelled records start their pools from their own images; only bare prompts are rendered first."""
    from tools.image_store import get_image_store
    from training.config import GRPOSettings
    from training.grpo import grpo_records

    Image.new("RGB", (32, 32), "blue").save(tmp_path / "own.png")
    data = tmp_path / "mixed.jsonl"
    data.write_text(
        json.dumps({"id": "a", "prompt": "labelled one", "image": "own.png", "answer": "keep"})
        + "\n"
        + json.dumps({"id": "b", "prompt": "bare one"})
        + "\n"
    )

    class CountingRenderer:
        def __init__(self):
            self.prompts = []

        def render(self, prompts, seeds):
            self.prompts += list(prompts)
            return [Image.new("RGB", (32, 32), "red") for _ in prompts]

    store = get_image_store(tmp_path / "store")
    renderer = CountingRenderer()
    recs = grpo_records(GRPOSettings(data=str(data)), store=store, renderer=renderer)
    assert renderer.prompts == ["bare one"]
    by_id = {r["id"]: r for r in recs}
    assert store.open(by_id["a"]["image_id"]).getpixel((0, 0)) == (0, 0, 255)
    assert store.open(by_id["b"]["image_id"]).getpixel((0, 0)) == (255, 0, 0)


def test_fast_scorer_agrees_with_tools_q16(tiny_models):
    """The GPU-batched scorer gives the project's Q16 probabilities (same CLIP, same prompt embeddings)."""
    from tools.scorers.score import pixel_scorer

    images = [Image.new("RGB", (32, 32), c) for c in ("red", "green", "navy")]
    kw = dict(
        q16_model=tiny_models["clip"], clip_model=tiny_models["clip"], q16_embeddings=tiny_models["q16"], device="cpu"
    )
    tools_scores = pixel_scorer("tools", **kw).score(["a", "b", "c"], images)
    fast_scores = pixel_scorer("fast", **kw).score(["a", "b", "c"], images)
    for (q_tools, c_tools), (q_fast, c_fast) in zip(tools_scores, fast_scores, strict=False):
        assert q_fast == pytest.approx(q_tools, abs=0.02)
        assert -1.0 <= c_tools <= 1.0 and -1.0 <= c_fast <= 1.0
    assert len({round(q, 6) for q, _ in fast_scores}) > 1  # different images, different scores


RANK_SCRIPT = """
import json, os, sys
from pathlib import Path
import torch.distributed as dist
from training.config import GRPOSettings, build_settings
from training.grpo import run_grpo

result = run_grpo(build_settings(GRPOSettings, json.loads(sys.argv[1])))
done = {"steps": result["steps"], "group_open": dist.is_initialized()}
Path(sys.argv[2], "rank-" + os.environ["RANK"] + ".json").write_text(json.dumps(done))
"""


@pytest.mark.slow
def test_grpo_on_two_processes_ends_every_rank_together(tmp_path, tiny_models):
    """`run_grpo` under a 2-process launch (gloo on CPU): both ranks train, wait for each other and close their
    process group before returning. Before, a rank returned while the other still used the group, and a rank
    sometimes aborted at exit ("terminate called without an active exception"), failing a run whose adapter was
    saved."""
    import os
    import subprocess
    import sys

    from tests.runner.test_kill_support import ROOT

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"a burning car {i}"}) + "\n" for i in range(2)))
    config = tiny_grpo_config(
        tiny_models,
        prompts,
        tmp_path,
        max_steps=1,
        per_device_batch_size=2,
        max_completion_length=4,
        reward={"images_per_prompt": 1},
    )
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [*cmd, json.dumps(config), str(tmp_path)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # Each rank writes its own file: the two ranks' output interleaves on the shared pipe.
    results = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert results == [{"steps": 1, "group_open": False}] * 2
    assert (tmp_path / "out" / "unveil_settings.json").is_file()
