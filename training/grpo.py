"""GRPO for the IPR refiner with TRL's `GRPOTrainer`, on the single-generation surrogate reward.

Each row is a prompt p0 shown with its current image i (drawn from the prompt's image pool); the trainer samples
`num_generations` answers per row and `training.reward.RefinementReward` scores them, rendering refined prompts
with the reward generator and scoring with Q16 + CLIP on this rank's device. Under `accelerate launch` every rank
loads its own generator and scorers on its own GPU and the pools are shared between ranks after each step.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.atomic_files import atomic_write_text
from tools.env import SettingError, env_int
from training.config import GRPOSettings, settings_dict
from training.models import common_trainer_args, load_model, load_processor, use_cuda
from training.reward import ImagePool, RefinementReward, Renderer, Scorer, seeds_for

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer

    from tools.image_store import ImageStore

log = logging.getLogger("unveil.training.grpo")


def local_device(settings: GRPOSettings) -> str:
    """This rank's device (`cuda:LOCAL_RANK` under accelerate), or `settings.scorer_device`."""
    if settings.scorer_device:
        return settings.scorer_device
    if not use_cuda(settings):
        return "cpu"
    return f"cuda:{env_int('LOCAL_RANK', 0, minimum=0)}"


def grpo_records(settings: GRPOSettings, *, store: ImageStore, renderer: Renderer) -> list[dict[str, Any]]:
    """Training rows from `settings.data`: labelled records keep their images; bare prompts are rendered once."""
    from training.data import check_rl_prompts, load_prompts

    records = load_prompts(settings.data, field=settings.prompt_field or None)
    if not any("image_id" in r or "image" in r for r in records):  # a prompt set, not build-data's labelled records
        check_rl_prompts(settings.data, records)
    records = records[: settings.limit] if settings.limit else records
    base = Path(settings.data).resolve().parent
    todo = []
    for rec in records:
        if rec.get("status", "ok") != "ok":
            continue
        if rec.get("image_id") and store.path_for(rec["image_id"]).exists():
            continue
        ref = rec.get("image")
        if isinstance(ref, str) and ref and (Path(ref) if Path(ref).is_absolute() else base / ref).is_file():
            path = Path(ref) if Path(ref).is_absolute() else base / ref
            rec["image_id"] = store.put_file(path).id
            continue
        todo.append(rec)
    if settings.start_images not in ("dataset", "render"):
        raise SettingError(f"start_images {settings.start_images!r}: use dataset or render")
    if todo and settings.start_images == "dataset":
        ids = ", ".join(str(r.get("id", r["prompt"][:40])) for r in todo[:3])
        raise SettingError(
            f"--data {settings.data}: {len(todo)} record(s) have no image of their own ({ids}...); "
            "start_images = dataset takes every current image from the constructed dataset (IPR "
            "section 4.3): build it with `unveil train build-data`, or pass --start-images render"
        )
    if todo:
        log.info("rendering the first image of %d prompts", len(todo))
        seeds = [seeds_for(r["prompt"], 1, settings.seed)[0] for r in todo]
        images = renderer.render([r["prompt"] for r in todo], seeds)
        for rec, img in zip(todo, images, strict=True):
            from tools.scorers.pixels import to_pil

            rec["image_id"] = store.put_pil(to_pil(img)).id
    return [r for r in records if r.get("image_id")]


def _sync_fn(accelerator: Any) -> Callable[[list[Any]], list[Any]] | None:
    """`gather_object` across the ranks of `accelerator` (None on one process: nothing to share)."""
    from accelerate.utils import gather_object

    if accelerator is None or accelerator.num_processes <= 1:
        return None
    return lambda items: gather_object(items)


def policy_compile_key(model: object) -> str:
    """What the policy's compiled decoding depends on, naming its artefacts in a cluster's shared compile folder
    (`tools.t2i.warmup.shared_compilation`): the model class, its configuration (not the folder it came from), dtype
    and device."""
    to_dict = getattr(getattr(model, "config", None), "to_dict", None)
    values = {k: v for k, v in (to_dict() if callable(to_dict) else {}).items() if not k.startswith("_")}
    dtype, device = str(getattr(model, "dtype", "")), str(getattr(model, "device", ""))
    parts = [type(model).__name__, values, dtype, device, "decode"]
    return json.dumps(parts, sort_keys=True, default=str)


def enable_fast_sampling(trainer: Any) -> None:
    """Policy sampling with a static KV cache and compiled decoding (transformers' own auto-compilation).

    TRL's transformers path samples with a dynamic cache and turns compilation off; decoding a 3B policy is then
    bound by Python and kernel launches (about 40 ms a token, 16 x 200 tokens in 8-21 s on an H100). With a
    static cache, `generate` compiles the one-token decoding step (CUDA graphs, `reduce-overhead`) once per cache
    size, into the machine's compile cache; with `UNVEIL_COMPILE_SHARED` set, the first sampling call loads what
    other machines compiled for this policy and saves what it compiled itself (`shared_compilation`). If that
    compilation fails, sampling falls back to the eager path with a warning.
    """
    import warnings

    from tools.t2i.fast import is_compile_error
    from tools.t2i.warmup import enable_compile_caches, shared_compilation

    enable_compile_caches()  # Inductor's cache survives the process, so later runs compile faster
    trainer.generation_config.cache_implementation = "static"
    trainer.generation_config.disable_compile = False
    if isinstance(getattr(trainer, "generation_kwargs", None), dict):
        trainer.generation_kwargs["cache_implementation"] = "static"
    original = trainer._generate_single_turn
    first = [True]

    def compiled(*args: Any, **kwargs: Any) -> Any:
        if not first:
            return original(*args, **kwargs)
        first.clear()
        with shared_compilation(policy_compile_key(getattr(trainer, "model", None))) as shared:
            out = original(*args, **kwargs)
        log.info("compiled policy sampling, shared compile folder: %s", shared)
        return out

    def generate(*args: Any, **kwargs: Any) -> Any:
        if trainer.generation_config.disable_compile:
            return original(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            warnings.warn(
                f"compiled policy sampling failed ({type(exc).__name__}: {str(exc)[:200]}); "
                "sampling eagerly with a dynamic cache",
                RuntimeWarning,
                stacklevel=2,
            )
            trainer.generation_config.disable_compile = True
            trainer.generation_config.cache_implementation = None
            if isinstance(getattr(trainer, "generation_kwargs", None), dict):
                trainer.generation_kwargs["cache_implementation"] = None
            return original(*args, **kwargs)

    trainer._generate_single_turn = generate


def default_renderer(settings: GRPOSettings, *, store: ImageStore, device: str) -> Renderer:
    """The reward's renderer: `settings.generator` on `device`, with the settings' render, batch and speed options."""
    from tools.t2i.settings import RenderSettings, render_kwargs
    from training.render import make_renderer

    return make_renderer(
        settings.generator,
        store=store,
        device=device,
        render=RenderSettings(**render_kwargs(settings)),
        max_batch=settings.t2i_max_batch,
        scheduler=settings.t2i_scheduler,
        accel=settings.t2i_accel,
    )


def default_scorer(settings: GRPOSettings, *, device: str) -> Scorer:
    """The reward's pixel scorer (Q16 + CLIP) on `device` (Q16's embeddings: the setting, else the shared default)."""
    from tools.scorers.q16 import resolve_q16_embeddings
    from tools.scorers.score import pixel_scorer

    q16_embeddings = resolve_q16_embeddings(settings.q16_embeddings)  # the default every command shares
    if not q16_embeddings:
        raise SettingError("GRPO needs the Q16 prompt embeddings file (--q16-embeddings)")
    return pixel_scorer(
        settings.scorer,
        q16_model=settings.q16_model,
        clip_model=settings.clip_model,
        q16_embeddings=q16_embeddings,
        device=device,
    )


def grpo_config(settings: GRPOSettings) -> GRPOConfig:
    """TRL's `GRPOConfig` from the settings (the arguments shared with SFT plus GRPO's sampling and loss)."""
    from trl import GRPOConfig

    return GRPOConfig(
        **common_trainer_args(settings),
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        beta=settings.kl_beta,
        loss_type=settings.loss_type,
        scale_rewards=settings.scale_rewards,
        log_completions=False,
    )


def build_grpo_trainer(
    settings: GRPOSettings,
    *,
    renderer: Renderer | None = None,
    scorer: Scorer | None = None,
    store: ImageStore | None = None,
    records: list[dict[str, Any]] | None = None,
    fast_sampling: bool | None = None,
) -> tuple[GRPOTrainer, RefinementReward]:
    """The configured `GRPOTrainer` and its reward (renderer/scorer/store built from settings unless given).

    `fast_sampling` (default: on CUDA) samples the policy with a static cache and compiled decoding
    (`enable_fast_sampling`); the reward's renders go through the generator's compiled UNet by default."""
    from trl import GRPOTrainer

    from tools.image_store import get_image_store
    from training.data import grpo_dataset

    # 1. The reward's parts: image store, renderer and scorer on this rank's device
    store = store or get_image_store(settings.image_store or None)
    device = local_device(settings)
    if renderer is None:
        renderer = default_renderer(settings, store=store, device=device)
    if scorer is None:
        scorer = default_scorer(settings, device=device)

    # 2. The training rows, each with its current image (and the shared image pool, when on)
    if records is None:
        if not settings.data:
            raise SettingError("GRPO needs data: labelled records or a prompts file (--data)")
        records = grpo_records(settings, store=store, renderer=renderer)
    pool = ImagePool(seed=settings.seed) if settings.image_pool else None
    dataset = grpo_dataset(records, store=store, pool=pool)

    # 3. The policy, its processor and the trainer
    args = grpo_config(settings)
    processor = load_processor(settings)
    model, peft_config = load_model(settings)
    reward = RefinementReward(settings.reward, renderer, scorer, pool=pool, store=store)
    # TRL types reward functions as plain callables; the reward object is one (with state: caches, pools).
    reward_funcs: list[Any] = [reward]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=processor,
        peft_config=peft_config,
    )

    # 4. Share the pools between ranks, and sample fast where asked
    reward.sync = _sync_fn(trainer.accelerator)
    if fast_sampling is None:
        fast_sampling = use_cuda(settings) if settings.fast_sampling == "auto" else settings.fast_sampling == "on"
    if fast_sampling:
        enable_fast_sampling(trainer)
    return trainer, reward


def run_grpo(settings: GRPOSettings, **kwargs: Any) -> dict[str, Any]:
    """Train, save the adapter, processor and settings to `output_dir`, and return metrics and timings."""
    trainer, reward = build_grpo_trainer(settings, **kwargs)
    result = trainer.train()
    out = Path(settings.output_dir)
    trainer.save_model(str(out))
    if trainer.accelerator.is_main_process:
        # a side file beside the model: replaced atomically, never written through a link planted at its name
        atomic_write_text(out / "unveil_settings.json", json.dumps(settings_dict(settings), indent=2))
    history = trainer.state.log_history
    # Every rank ends together and closes its process group: a rank that exits while another still uses the group
    # can abort at exit ("terminate called without an active exception"), failing a launch whose model was saved.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    return {
        "output_dir": str(out),
        "steps": trainer.state.global_step,
        "train_loss": result.training_loss,
        "losses": [h["loss"] for h in history if "loss" in h],
        "rewards": [h["reward"] for h in history if "reward" in h],
        "timings": reward.timings.as_dict(),
        "pool_images": reward.pool.size() if reward.pool else 0,
    }
