"""Erased Stable Diffusion (ESD, Gandikota et al. 2023): fine-tune a UNet so that it no longer renders a concept.

The IPR paper's ESD baseline (section 5) is ESD-u-1: only the UNet's non-cross-attention layers are trained
(`train_method = "noxattn"` in the ESD authors' code, which also leaves the time embedding and the output layers
(`out.`; diffusers' `conv_norm_out` and `conv_out`) frozen), with negative guidance eta = 1. The concept erased is
the negative prompt SD-NP uses (App. A: "the same negative prompt for both SD-NP and ESD"). Each iteration:

1. draws a step index `t_enc` in [0, ddim_steps) and samples a partly denoised latent `x_t` with the model being
   trained, conditioned on the concept, at `start_guidance` (DDIM from pure noise down to `t_enc`);
2. asks the frozen original model for its unconditional and concept-conditioned noise predictions `e_0`, `e_p`;
3. moves the trained model's concept-conditioned prediction `e_n` towards `e_0 - eta * (e_p - e_0)`, i.e. towards
   steering away from the concept, with an MSE loss.

The result is saved as a diffusers UNet state dict (`.safetensors`), which the `esd:<model>?unet=<file>`
generator loads (tools/t2i/registry.py). Defaults are the ESD authors' (lr 1e-5, 1000 iterations, 50 DDIM
steps, start guidance 3); the paper names only the method, the layers and eta.
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.atomic_files import atomic_write_text
from tools.env import SettingError
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT
from training.fields import setting

if TYPE_CHECKING:
    import torch

log = logging.getLogger("unveil.training.esd")

# The paper's ESD runs on SD v1.4, the same model as its other generators.
DEFAULT_ESD_BASE = DEFAULT_IPR_GENERATOR.split(":", 1)[1]

# Parameters of cross-attention layers in diffusers' UNet2DConditionModel: ESD-u leaves them untouched.
CROSS_ATTENTION = "attn2"
# What else the ESD authors' "noxattn" freezes (their `time_embed` and `out.`), under diffusers' names.
NOXATTN_FROZEN_PREFIXES = ("time_embedding.", "conv_norm_out.", "conv_out.")


@dataclass
class ESDSettings:
    """Settings of one ESD fine-tuning run (source of each default in the comment)."""

    model: str = setting(DEFAULT_ESD_BASE, "base SD 1.x pipeline (Hub id or local folder); the paper's")
    # The concept to erase: App. A's negative prompt, the one SD-NP uses (any other text, e.g. "nudity", is a
    # setting).
    concept: str = setting(SAFETY_NEGATIVE_PROMPT, "the concept to erase (the paper's negative prompt unless set)")
    output: str = setting("runs/esd-u-1.safetensors", "where the UNet state dict is written")
    # noxattn = ESD-u (the paper's): all but cross-attention, the time embedding and the output layers;
    # xattn = ESD-x (cross-attention only)
    train_method: str = setting("noxattn", "noxattn (ESD-u, the paper's) or xattn (ESD-x: cross-attention only)")
    negative_guidance: float = setting(1.0, 'eta (the paper\'s "negative guidance strength of 1")')
    start_guidance: float = setting(3.0, "guidance used to sample x_t (the ESD authors' code)")
    iterations: int = setting(1000, "fine-tuning iterations (the ESD authors' code)")
    learning_rate: float = setting(1e-5, "optimizer learning rate (the ESD authors' code)")
    ddim_steps: int = setting(50, "DDIM steps that x_t is sampled with (the ESD authors' code)")
    resolution: int = setting(512, "sampling size of x_t (SD 1.x)")
    seed: int = setting(0, "random seed of the sampled steps and latents")
    device: str = setting("", "default: cuda when available, else cpu")
    log_every: int = setting(50, "log the loss every N iterations (0: never)")

    def __post_init__(self) -> None:
        if self.train_method not in ("noxattn", "xattn"):
            raise SettingError(f"train_method {self.train_method!r}: expected noxattn (ESD-u) or xattn (ESD-x)")
        if not self.concept.strip():
            raise SettingError("concept: name the concept to erase, e.g. --concept nudity")
        for name in ("iterations", "ddim_steps", "resolution"):
            if getattr(self, name) < 1:
                raise SettingError(f"{name} must be at least 1")


def trainable(name: str, method: str) -> bool:
    """Whether a UNet parameter (diffusers name) is trained under ESD's `train_method`."""
    if method == "noxattn":
        return CROSS_ATTENTION not in name and not name.startswith(NOXATTN_FROZEN_PREFIXES)
    return CROSS_ATTENTION in name


def esd_target(e0: torch.Tensor, ep: torch.Tensor, negative_guidance: float) -> torch.Tensor:
    """The frozen model's prediction steered away from the concept: e_0 - eta * (e_p - e_0)."""
    return e0 - negative_guidance * (ep - e0)


def esd_loss(
    unet: torch.nn.Module,
    frozen: torch.nn.Module,
    x: torch.Tensor,
    t: torch.Tensor,
    emb_c: torch.Tensor,
    emb_u: torch.Tensor,
    negative_guidance: float,
) -> torch.Tensor:
    """MSE between the trained model's concept-conditioned prediction and `esd_target` at latent `x`, step `t`."""
    import torch

    with torch.no_grad():
        e0 = frozen(x, t, encoder_hidden_states=emb_u).sample
        ep = frozen(x, t, encoder_hidden_states=emb_c).sample
    en = unet(x, t, encoder_hidden_states=emb_c).sample
    return torch.nn.functional.mse_loss(en, esd_target(e0, ep, negative_guidance))


def load_esd_models(settings: ESDSettings, device: str) -> tuple[Any, Any, Any]:
    """The pipeline on `device` (text encoder and VAE frozen), its DDIM scheduler, and a frozen copy of its UNet."""
    import copy

    from diffusers import DDIMScheduler, StableDiffusionPipeline

    # diffusers leaves `from_pretrained` and `from_config` unannotated.
    pipe = StableDiffusionPipeline.from_pretrained(settings.model, safety_checker=None)  # type: ignore[no-untyped-call, unused-ignore]
    pipe.to(device)
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)  # type: ignore[no-untyped-call, unused-ignore]
    scheduler.set_timesteps(settings.ddim_steps, device=device)
    frozen = copy.deepcopy(pipe.unet).eval().requires_grad_(False)
    pipe.text_encoder.requires_grad_(False)
    pipe.vae.requires_grad_(False)
    return pipe, scheduler, frozen


def select_trainable(unet: torch.nn.Module, method: str) -> list[torch.nn.Parameter]:
    """Mark the UNet's parameters trainable or frozen by `trainable` and return the trainable ones."""
    params = []
    for name, p in unet.named_parameters():
        p.requires_grad_(trainable(name, method))
        if p.requires_grad:
            params.append(p)
    return params


def embed_text(pipe: Any, text: str, device: str) -> torch.Tensor:
    """The pipeline's text-encoder embedding of `text` (padded to the tokenizer's length, no gradient)."""
    import torch

    ids = pipe.tokenizer(
        [text],
        padding="max_length",
        max_length=pipe.tokenizer.model_max_length,
        truncation=True,
        return_tensors="pt",
    ).input_ids.to(device)
    with torch.no_grad():
        embedding: torch.Tensor = pipe.text_encoder(ids)[0]
    return embedding


def sample_xt(
    unet: torch.nn.Module,
    scheduler: Any,
    x: torch.Tensor,
    t_enc: int,
    emb_u: torch.Tensor,
    emb_c: torch.Tensor,
    guidance: float,
) -> torch.Tensor:
    """DDIM from noise `x` down to step `t_enc` with the model being trained, guided towards the concept.

    ESD samples x_t with the trained model (not the frozen one), with classifier-free guidance `guidance`."""
    import torch

    with torch.no_grad():
        for t in scheduler.timesteps[:t_enc]:
            both = unet(torch.cat([x, x]), t, encoder_hidden_states=torch.cat([emb_u, emb_c])).sample
            eu, ec = both.chunk(2)
            x = scheduler.step(eu + guidance * (ec - eu), t, x).prev_sample
    return x


def save_unet(unet: torch.nn.Module, out: Path) -> None:
    """Write the UNet's state dict to `out` (safetensors) through a temporary file."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous() for k, v in unet.state_dict().items()}
    # A new temporary file of a name no one could plant a link at (mkstemp: O_EXCL), renamed over the real name, so
    # a killed run never leaves a half-written weights file there and nothing is written through a link.
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(state, tmp)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_esd(settings: ESDSettings) -> dict[str, Any]:
    """Fine-tune the UNet of `settings.model` to erase `settings.concept`; returns a summary with the loss curve."""
    import torch

    # 1. Seed, load the pipeline and freeze all but the layers `train_method` trains
    device = settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(settings.seed)
    torch.manual_seed(settings.seed)
    pipe, scheduler, frozen = load_esd_models(settings, device)
    unet = pipe.unet
    params = select_trainable(unet, settings.train_method)
    opt = torch.optim.Adam(params, lr=settings.learning_rate)

    # 2. Embed the concept and the empty prompt once
    emb_c, emb_u = embed_text(pipe, settings.concept, device), embed_text(pipe, "", device)
    latent_size = settings.resolution // pipe.vae_scale_factor
    shape = (1, unet.config.in_channels, latent_size, latent_size)

    # 3. Each iteration: sample x_t at a random step, then move the prediction at x_t away from the concept
    losses: list[float] = []
    unet.train()
    for it in range(settings.iterations):
        t_enc = random.randrange(settings.ddim_steps)
        x = torch.randn(shape, device=device) * scheduler.init_noise_sigma
        x = sample_xt(unet, scheduler, x, t_enc, emb_u, emb_c, settings.start_guidance)
        loss = esd_loss(unet, frozen, x, scheduler.timesteps[t_enc], emb_c, emb_u, settings.negative_guidance)
        opt.zero_grad()
        torch.autograd.backward(loss)
        opt.step()
        losses.append(float(loss.detach()))
        if settings.log_every and (it + 1) % settings.log_every == 0:
            log.info("esd %d/%d loss %.5f", it + 1, settings.iterations, losses[-1])

    # 4. Save the UNet and a summary beside it
    out = Path(settings.output)
    save_unet(unet, out)
    summary = {
        "settings": asdict(settings),
        "output": str(out),
        "trained_parameters": sum(p.numel() for p in params),
        "losses": losses,
        "generator_spec": f"esd:{settings.model}?unet={out}",
    }
    atomic_write_text(out.with_suffix(".json"), json.dumps(summary, indent=1))  # never through a planted link
    return summary
