"""Loading Stable Diffusion pipelines through diffusers, once per process: plain SD 1.x/2.x/SDXL, SLD and ESD.

A model is a local folder or a Hugging Face hub id; its `model_index.json` picks the pipeline class, and a missing
folder, a folder that is no diffusers pipeline or an id that cannot be reached is a `ModelNotFoundError`. Pipelines
are loaded once per process and shared: the SLD pipeline and an ESD pipeline reuse the text encoder, VAE, tokenizer
and scheduler of the base pipeline of the same model, so `diffusers:X`, `sd-np:X` and `sld-max:X` together cost one
model in memory (ESD adds one UNet). On CUDA the weights are fp16, attention runs through PyTorch SDPA and the UNet
runs on the fast path named by the `accel` option (`tools.t2i.fast`: compiled by default, `eager` for parity
checks, `fp8` on Hopper); on CPU everything is fp32 and eager. The generator that renders with these pipelines is
`tools.t2i.diffusers_backend`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from tools.safe_files import MAX_SMALL_FILE_BYTES, read_regular, require_regular
from tools.t2i.errors import ModelNotFoundError, UnsupportedOptionError
from tools.t2i.fast import apply_fast_path, disable_compile, resolve_accel

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class Pipeline(Protocol):
    """What Unveil uses of a diffusers text-to-image pipeline. diffusers sets a pipeline's modules at run time and
    leaves most of its methods unannotated, so the modules are `Any` here."""

    unet: Any
    vae: Any
    image_processor: Any

    @property
    def components(self) -> dict[str, Any]:
        """The pipeline's modules by name (`vae`, `text_encoder`, `tokenizer`, `unet`, `scheduler`, ...)."""
        ...

    def to(self, device: str) -> Pipeline:
        """The pipeline with its modules moved to `device`."""
        ...

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """Configure (here: turn off) the per-step progress bar."""
        ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Render: the pipeline output (its `images`)."""
        ...


# Guards the pipeline caches; held while a pipeline loads, so that two threads asking for one model load it once.
_LOCK = threading.RLock()
_BASE_PIPES: dict[tuple[str, ...], Pipeline] = {}
_DERIVED_PIPES: dict[tuple[str, ...], Pipeline] = {}


def default_device() -> str:
    """`cuda` when a GPU is visible, else `cpu`."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _dtype_for(device: str, dtype: str) -> torch.dtype:
    import torch

    if dtype == "auto":
        return torch.float16 if device.startswith("cuda") else torch.float32
    table = {
        "fp16": torch.float16,
        "float16": torch.float16,
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp32": torch.float32,
        "float32": torch.float32,
    }
    if dtype not in table:
        raise UnsupportedOptionError(f"dtype {dtype!r} is not supported; use one of auto, {', '.join(table)}")
    return table[dtype]


def looks_like_path(model: str) -> bool:
    """Whether a text-to-image model names a local folder (else a Hugging Face Hub id)."""
    return model.startswith(("/", "./", "../", "~")) or os.path.exists(model) or model.count("/") > 1


def _model_class_name(model: str) -> str:
    """The pipeline class recorded in model_index.json (local folder, HF cache, or hub)."""
    if looks_like_path(model):
        folder = Path(model).expanduser()
        index = folder / "model_index.json"
        if not folder.is_dir():
            raise ModelNotFoundError(f"text-to-image model {model!r} not found: no such folder")
        if not index.is_file():
            raise ModelNotFoundError(
                f"text-to-image model {model!r}: folder has no model_index.json (not a diffusers pipeline)"
            )
        raw = read_regular(index, MAX_SMALL_FILE_BYTES, what="model_index.json")
        name: str = json.loads(raw.decode("utf-8")).get("_class_name", "")
        return name
    from diffusers import DiffusionPipeline

    from tools.hub import HubUnavailableError, hub_access

    try:
        # Fails at once, with the reason, when the id is neither cached nor downloadable (no minute of retries).
        hub_access(model, "model_index.json", what="text-to-image model")
    except HubUnavailableError as exc:
        raise ModelNotFoundError(str(exc)) from exc
    try:
        config = DiffusionPipeline.load_config(model)
    except Exception as exc:  # OSError / HTTP errors: offline, wrong id, gated model
        raise ModelNotFoundError(
            f"text-to-image model {model!r} could not be found locally or in the Hugging Face cache/hub: {exc}"
        ) from exc
    class_name: str = config.get("_class_name", "")
    return class_name


def load_base_pipeline(model: str, *, device: str, dtype: str = "auto", accel: str = "auto") -> Pipeline:
    """Load (once per process) the plain text-to-image pipeline of `model` on `device`.

    `accel` names the UNet's fast-path preset (`tools.t2i.fast`; `auto`: `compile` on CUDA, `eager` on CPU). A
    compiled UNet pays a compilation on the first batch of each new shape, then runs faster.
    """
    preset = resolve_accel(accel, device)
    key = (model, device, dtype, preset.name)
    with _LOCK:
        if key in _BASE_PIPES:
            return _BASE_PIPES[key]
        # Imported under the lock: diffusers' lazy module import is not safe from several threads at once.
        from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline

        _follow_hub_progress_switch()
        class_name = _model_class_name(model)
        cls = StableDiffusionXLPipeline if "XL" in class_name else StableDiffusionPipeline
        kwargs: dict[str, Any] = {"dtype": _dtype_for(device, dtype)}
        if cls is StableDiffusionPipeline:
            # The safety checker blacks out images; the scorers judge safety here, so it is never loaded.
            kwargs.update(safety_checker=None, requires_safety_checker=False)
        try:
            # diffusers leaves from_pretrained unannotated; it returns the pipeline.
            pipe: Pipeline = cls.from_pretrained(model, **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"text-to-image model {model!r} could not be loaded: {exc}") from exc
        pipe = pipe.to(device)
        _prepare(pipe)
        apply_fast_path(pipe, preset)
        _BASE_PIPES[key] = pipe
        log.info("loaded %s (%s) on %s, UNet path %s", model, cls.__name__, device, preset.name)
        return pipe


def _follow_hub_progress_switch() -> None:
    """No "Loading pipeline components" bar where the Hub's bars are off (`--no-progress` turns them off, as does
    HF_HUB_DISABLE_PROGRESS_BARS): transformers reads that switch, diffusers has its own and reads no variable."""
    from diffusers.utils import logging as diffusers_logging
    from huggingface_hub.utils import are_progress_bars_disabled

    if are_progress_bars_disabled():
        diffusers_logging.disable_progress_bar()


def _prepare(pipe: Pipeline) -> None:
    """SDPA attention everywhere, no progress bars. The default NCHW layout is kept on CUDA too: channels_last
    measured 14% slower for the SD 1.5 UNet on an H100 (docs/tools.md)."""
    from diffusers.models.attention_processor import AttnProcessor2_0

    pipe.set_progress_bar_config(disable=True)
    pipe.unet.set_attn_processor(AttnProcessor2_0())  # type: ignore[no-untyped-call, unused-ignore]  # diffusers: unannotated


def load_sld_pipeline(model: str, *, device: str, dtype: str = "auto", accel: str = "auto") -> Pipeline:
    """`StableDiffusionPipelineSafe` sharing all modules with the base pipeline of `model` (same `accel`)."""
    key = ("sld", model, device, dtype, resolve_accel(accel, device).name)
    with _LOCK:
        if key in _DERIVED_PIPES:
            return _DERIVED_PIPES[key]
        from diffusers import StableDiffusionPipeline, StableDiffusionPipelineSafe

        # diffusers' pipeline classes are only partly typed (components, unet... are set dynamically): Any.
        base: Any = load_base_pipeline(model, device=device, dtype=dtype, accel=accel)
        if not isinstance(base, cast(Any, StableDiffusionPipeline)):  # no narrowing: the stubs lack attributes
            raise UnsupportedOptionError(
                f"SLD needs a Stable Diffusion 1.x/2.x model; {model!r} is a {type(base).__name__}"
            )
        parts = {k: base.components[k] for k in ("vae", "text_encoder", "tokenizer", "unet", "scheduler")}
        # diffusers leaves the constructor unannotated, and its classes declare none of the modules `Pipeline` names.
        safe = StableDiffusionPipelineSafe(  # type: ignore[no-untyped-call, unused-ignore]
            **parts,
            safety_checker=None,
            feature_extractor=base.components.get("feature_extractor"),
            requires_safety_checker=False,
        )
        pipe = cast(Pipeline, safe)
        pipe.set_progress_bar_config(disable=True)
        _DERIVED_PIPES[key] = pipe
        return pipe


def load_esd_pipeline(model: str, unet_file: str, *, device: str, dtype: str = "auto", accel: str = "auto") -> Pipeline:
    """The base pipeline of `model` with its UNet weights replaced by the ESD state dict in `unet_file`; the new
    UNet then gets the `accel` fast path."""
    import copy

    import torch

    preset = resolve_accel(accel, device)
    key = ("esd", model, os.path.abspath(unet_file), device, dtype, preset.name)
    with _LOCK:
        if key in _DERIVED_PIPES:
            return _DERIVED_PIPES[key]
        from diffusers import StableDiffusionPipeline

        if not os.path.isfile(unet_file):
            raise ModelNotFoundError(f"ESD UNet weights file {unet_file!r} not found")
        # Copied from the eager base: a fused or quantised UNet no longer has the state dict's layout.
        base: Any = load_base_pipeline(model, device=device, dtype=dtype, accel="eager")
        if not isinstance(base, cast(Any, StableDiffusionPipeline)):  # no narrowing: the stubs lack attributes
            raise UnsupportedOptionError(
                f"ESD needs a Stable Diffusion 1.x model; {model!r} is a {type(base).__name__}"
            )
        try:
            state: Any
            require_regular(unet_file, what="UNet file")
            if unet_file.endswith(".safetensors"):
                from safetensors.torch import load_file

                state = load_file(unet_file)
            else:
                state = torch.load(unet_file, map_location="cpu", weights_only=True)
            if isinstance(state, dict) and "state_dict" in state:
                state = state["state_dict"]
            unet = copy.deepcopy(base.unet)
            disable_compile(unet)
            unet.load_state_dict(state, strict=True)
        except Exception as exc:
            raise ModelNotFoundError(
                f"ESD UNet weights file {unet_file!r} could not be loaded as a diffusers UNet state dict: {exc}"
            ) from exc
        parts = dict(base.components)
        parts["unet"] = unet
        # diffusers leaves the constructor unannotated, and its classes declare none of the modules `Pipeline` names.
        esd_pipe = cast(Pipeline, StableDiffusionPipeline(**parts))  # type: ignore[no-untyped-call, unused-ignore]
        esd_pipe.set_progress_bar_config(disable=True)
        # The VAE is the eager base pipeline's own object: compiling it here would change that parity path.
        apply_fast_path(esd_pipe, replace(preset, compile_vae=False))
        _DERIVED_PIPES[key] = esd_pipe
        return esd_pipe


def load_pipeline(
    model: str, *, variant: str, unet_file: str | None, device: str, dtype: str = "auto", accel: str = "auto"
) -> Pipeline:
    """The shared pipeline of a generator variant: `plain` and `sd-np` use the base pipeline, `sld-*` the SLD
    pipeline and `esd` the base pipeline with the UNet weights of `unet_file`."""
    if variant.startswith("sld-"):
        return load_sld_pipeline(model, device=device, dtype=dtype, accel=accel)
    if variant == "esd":
        assert unet_file is not None
        return load_esd_pipeline(model, unet_file, device=device, dtype=dtype, accel=accel)
    return load_base_pipeline(model, device=device, dtype=dtype, accel=accel)


def clear_loaded_pipelines() -> None:
    """Forget every loaded pipeline (`tools.t2i.diffusers_backend.clear_pipeline_cache` also forgets the state its
    generators keep per pipeline)."""
    with _LOCK:
        _BASE_PIPES.clear()
        _DERIVED_PIPES.clear()
