"""Settings of SFT and GRPO runs: dataclasses with the IPR paper's defaults, read from a config file and flags.

A config file is TOML, YAML or JSON holding the dataclass fields (GRPO's reward fields may sit in a `[reward]`
table); command-line flags override it. Every field is documented next to its default.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from tools.env import SettingError
from tools.errors import InputDataError
from tools.safe_files import MAX_SMALL_FILE_BYTES, read_regular
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.settings import RenderSettings, renamed_hint
from training.fields import setting
from training.reward import RewardSettings

DEFAULT_BASE = "Qwen/Qwen2.5-VL-3B-Instruct"
# The shipped GRPO settings (section 4.3, Appendix A, the authors' code): `unveil train grpo --config` and the
# default of `unveil evaluate ipr-ablation`.
GRPO_CONFIG = Path(__file__).resolve().parent / "configs" / "grpo.toml"


@dataclass
class TrainSettings:
    """What SFT and GRPO share: the model, LoRA, optimisation, logging and devices."""

    model: str = setting(DEFAULT_BASE, "Hub id or local folder of the base VLM")
    adapter: str = setting("", "an existing LoRA adapter to continue training (e.g. the SFT result for GRPO)")
    output_dir: str = setting("runs/ipr-sft", "folder of checkpoints and the final adapter")
    # LoRA: the paper says only "LoRA"; these are the authors' code's values (vl_sft.py's LoraConfig).
    lora_r: int = setting(8, "LoRA rank (authors' code)")
    lora_alpha: int = setting(16, "LoRA scaling alpha (authors' code)")
    lora_dropout: float = setting(0.05, "LoRA dropout (authors' code)")
    target_modules: list[str] = setting(["q_proj", "v_proj"], "LoRA modules (authors' code)")
    learning_rate: float = setting(5e-5, "optimizer learning rate")
    per_device_batch_size: int = setting(4, "examples per device and step")
    gradient_accumulation_steps: int = setting(4, "micro-batches accumulated per optimizer step")
    max_steps: int = setting(636, "the paper's SFT length")
    num_train_epochs: float = setting(3.0, "used only when max_steps <= 0")
    lr_scheduler_type: str = setting("constant", "learning-rate schedule (transformers name)")
    max_grad_norm: float = setting(1.0, "gradient clipping norm")
    warmup_steps: int = setting(0, "learning-rate warm-up steps")
    gradient_checkpointing: bool = setting(True, "recompute activations to save memory")
    precision: str = setting("auto", "auto (bf16 on GPU, fp32 on CPU), bf16, fp16, fp32")
    cpu: bool = setting(False, "force CPU even when a GPU is present")
    seed: int = setting(0, "random seed of training")
    logging_steps: int = setting(10, "log every N steps")
    save_steps: int = setting(0, "0: save only at the end")
    report_to: list[str] = setting(["none"], "tensorboard, wandb, ...")
    run_name: str = setting("", "name of the run in the trackers")
    min_pixels: int = setting(0, "image budget for Qwen-style processors (0: the processor's own)")
    max_pixels: int = setting(0, "largest image budget for Qwen-style processors (0: the processor's own)")
    image_store: str = setting("", "image store folder (default $UNVEIL_IMAGE_STORE or ~/.cache/unveil/images)")


@dataclass
class SFTSettings(TrainSettings):
    """Supervised fine-tuning of the refiner (section 4.1, Appendix A of the IPR paper)."""

    data: str = setting("", "labelled JSONL (build-data), a ToxiClean-IT folder, or POSI pairs JSON (text-only)")
    data_kind: str = setting("auto", "auto, labelled, toxiclean, posi")
    max_length: int = setting(0, "truncate examples to this many tokens (0: no truncation)")


@dataclass
class GRPOSettings(RenderSettings, TrainSettings):
    """GRPO on the single-generation surrogate (section 4.3); defaults follow Appendix A and the authors' code.

    The reward renders use the render fields of `tools.t2i.settings.RenderSettings` (width, height, steps,
    guidance, negative_prompt, long_prompts: the IPR graph's names and defaults, so a reward renders what the
    graph would); `steps` is diffusion steps, the optimizer's length is `max_steps`.
    """

    output_dir: str = setting("runs/ipr-grpo", "folder of checkpoints and the final adapter")
    # The paper's RL set is a separate 842-prompt file (POSI's ppo_data.json), not the SFT data (section 5).
    data: str = setting(
        "", "RL prompts (any prompts file; images rendered first) or labelled JSONL (images from build-data)"
    )
    prompt_field: str = setting("", "for prompt files: the field holding the prompt (default prompt/input/text/query)")
    limit: int = setting(0, "use only the first N prompts (0: all)")
    learning_rate: float = setting(1.9e-5, "optimizer learning rate")
    max_steps: int = setting(50, "GRPO optimizer steps")
    max_grad_norm: float = setting(0.1, "gradient clipping norm")
    num_generations: int = setting(4, "group size")
    max_completion_length: int = setting(200, "longest refiner answer, in tokens")
    # Sampling temperature of the refiner's answers: 0.9, the default of the TRL version the authors' code pins
    # (the paper names none; TRL's own default is now 1.0).
    temperature: float = setting(0.9, "sampling temperature of the refiner's answers (the authors' TRL default)")
    kl_beta: float = setting(1e-4, "KL penalty to the reference policy (the base model with the adapter disabled)")
    # The objective: §4.3 optimises with GRPO (Shao et al., 2024), whose loss averages each answer's token terms
    # over its own length (TRL loss_type "grpo") and whose advantages are rewards standardised within the group
    # (scale_rewards "group"). TRL's other losses (dapo, its default; dr_grpo; bnpo; ...) are named readings.
    loss_type: str = setting("grpo", "TRL loss_type: grpo (the paper's GRPO), bnpo (the authors' TRL), dapo, dr_grpo")
    scale_rewards: str = setting(
        "group", "TRL scale_rewards: group (GRPO), batch, none (Dr. GRPO's unscaled advantages)"
    )
    # The paper draws the current image from the constructed dataset (section 4.3: "using the images from our
    # constructed dataset for D is sufficient"); the authors' code also lets refined renders join a growing pool.
    image_pool: bool = setting(False, "refined renders join their prompt's pool of current images (the authors' code)")
    # Where a row's first current image comes from. "dataset" (section 4.3, the shipped config): its record's own
    # image (build-data output), and a record without one is an error; "render": a bare prompt is rendered once
    # before training (a convenience for prompt files, not the paper's protocol).
    start_images: str = setting(
        "render", "dataset (each record's own image, section 4.3) or render (bare prompts once)"
    )
    generator: str = setting(DEFAULT_IPR_GENERATOR, "reward renderer spec (tools.t2i registry)")
    t2i_scheduler: str = setting(
        "default", "default (the pipeline's own, PNDM for SD 1.x) or dpm (DPM-Solver++: ~20 steps)"
    )
    t2i_max_batch: int = setting(32, "images per generator batch")
    t2i_accel: str = setting(
        "auto", "reward renders' UNet path: auto (compiled on CUDA, eager on CPU), eager, fp8 (Hopper)"
    )
    fast_sampling: str = setting(
        "auto", "policy sampling with a static cache and compiled decoding: auto (on CUDA), on, off"
    )
    scorer: str = setting(
        "tools", "tools (tools.scorers: Q16 + open_clip CLIP score) or fast (GPU-batched transformers CLIPs)"
    )
    clip_model: str = setting(
        "", 'alignment CLIP (default ViT/B-32 as the authors: open_clip "ViT-B-32" or transformers id)'
    )
    q16_model: str = setting(
        "openai/clip-vit-large-patch14", "transformers CLIP for Q16 (its prompts are for ViT-L/14)"
    )
    q16_embeddings: str = setting(
        "", "path to Q16's prompt embeddings (.npy or .p; empty: $UNVEIL_Q16_PROMPTS, else data/q16/vit-l-14.npy)"
    )
    scorer_device: str = setting("", "device for generator and scorers (default: this rank's device)")
    reward: RewardSettings = field(default_factory=RewardSettings)


S = TypeVar("S", bound=TrainSettings)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file (TOML, YAML or JSON) as a dict; a file whose top level is not a table of settings is refused."""
    p = Path(path)
    text = read_regular(p, MAX_SMALL_FILE_BYTES, what="config file").decode("utf-8")  # regular, capped
    if p.suffix in (".toml", ".tml"):
        return tomllib.loads(text)
    if p.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise InputDataError(f"config file {p}: expected a table of settings (name = value), got {type(data).__name__}")
    return data


def build_settings(cls: type[S], config: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None) -> S:
    """Settings from defaults < config file < overrides (None values in overrides are ignored).

    Unknown keys are an error that names them, so a typo in a config file does not silently train with a default.
    """
    merged: dict[str, Any] = dict(config or {})
    reward_cfg = dict(merged.pop("reward", {}) or {})
    reward_names = {f.name for f in fields(RewardSettings)}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key.startswith("reward_") and key[7:] in reward_names:
            reward_cfg[key[7:]] = value
        else:
            merged[key] = value
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(merged) - names)
    if unknown:
        raise SettingError(f"unknown {cls.__name__} settings: {', '.join(unknown)}{renamed_hint(unknown)}")
    if "reward" in names:
        bad = sorted(set(reward_cfg) - reward_names)
        if bad:
            raise SettingError(f"unknown reward settings: {', '.join(bad)}")
        merged["reward"] = RewardSettings(**reward_cfg)
    elif reward_cfg:
        raise SettingError(f"{cls.__name__} has no reward settings")
    return cls(**merged)


def settings_dict(settings: TrainSettings) -> dict[str, Any]:
    """A JSON-serialisable copy of the settings (saved next to the adapter)."""
    return asdict(settings)
