"""`diffusers:MODEL` (Stable Diffusion 1.x/2.x or SDXL as published) and `sd-np:MODEL` (the same with the safety
negative prompt, the IPR paper's SD-NP row): a local diffusers pipeline, a Hub id or a folder."""

from __future__ import annotations

from collections.abc import Mapping

from tools.image_store import ImageStore
from tools.t2i.base import ImageGenerator
from tools.t2i.kind import GeneratorKind
from tools.t2i.options import DIFFUSERS_OPTIONS, DiffusersOptions, GeneratorOptions

# `accel` may ride in the spec (`diffusers:MODEL?accel=eager`), so any graph context or command can pick the UNet
# path without a setting of its own.
PIPELINE_PARAMS = ("accel",)


def pipeline_options(query: Mapping[str, str], options: GeneratorOptions, negative: str | None) -> DiffusersOptions:
    """The options of a diffusers pipeline: the caller's (checked by the registry), the spec's `accel`, and the
    variant's negative prompt unless the caller gave one."""
    opts: DiffusersOptions = options.copy()  # the registry refused any other key
    if "accel" in query:
        opts["accel"] = query["accel"]
    opts.setdefault("negative_prompt", negative)
    return opts


def build_pipeline(
    spec: str,
    model: str,
    store: ImageStore | None,
    opts: DiffusersOptions,
    *,
    variant: str,
    unet_file: str | None = None,
) -> ImageGenerator:
    """A `DiffusersGenerator` of one variant (imported here: diffusers loads only when a pipeline is built)."""
    from tools.t2i.diffusers_backend import DiffusersGenerator

    return DiffusersGenerator(spec, model, variant=variant, unet_file=unet_file, store=store, **opts)


def _plain(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    return build_pipeline(spec, model, store, pipeline_options(query, options, None), variant="plain")


def _sd_np(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT

    opts = pipeline_options(query, options, SAFETY_NEGATIVE_PROMPT)
    return build_pipeline(spec, model, store, opts, variant="sd-np")


DIFFUSERS = GeneratorKind(
    name="diffusers",
    help="a diffusers text-to-image pipeline (Stable Diffusion 1.x/2.x, SDXL): a Hub id or a local folder",
    options=DIFFUSERS_OPTIONS,
    params=PIPELINE_PARAMS,
    build=_plain,
)
SD_NP = GeneratorKind(
    name="sd-np",
    help="the same pipeline with the safety negative prompt (the IPR paper's SD-NP)",
    options=DIFFUSERS_OPTIONS,
    params=PIPELINE_PARAMS,
    build=_sd_np,
)
