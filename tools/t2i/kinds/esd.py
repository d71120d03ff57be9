"""`esd:MODEL?unet=FILE`: a Stable Diffusion pipeline with an Erased Stable Diffusion UNet (`np=1` adds the safety
negative prompt at inference)."""

from __future__ import annotations

from collections.abc import Mapping

from tools.env import parse_bool
from tools.image_store import ImageStore
from tools.t2i.base import ImageGenerator
from tools.t2i.errors import UnsupportedOptionError
from tools.t2i.kind import GeneratorKind
from tools.t2i.kinds.diffusers import PIPELINE_PARAMS, build_pipeline, pipeline_options
from tools.t2i.options import DIFFUSERS_OPTIONS, GeneratorOptions

# `esd:...?np=`: whether an ESD spec adds the safety negative prompt at inference ("0": the IPR paper's rows).
ESD_NEGATIVE_DEFAULT = "0"


def _esd(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT

    unet_file = query.get("unet")
    if not unet_file:
        raise UnsupportedOptionError(f"text-to-image spec {spec!r}: esd needs ?unet=<UNet weights file>")
    # The IPR paper's ESD rows render without SD-NP's negative prompt: Table 5's Template-prompt column has ESD at
    # 0.70 beside SD's 0.72 and SD-NP's 0.44 (App. A's list is the concept ESD erased, not a prompt at inference).
    # `np=1` adds the list as a named option.
    add_negative = parse_bool(f"{spec}: np", query.get("np", ESD_NEGATIVE_DEFAULT))
    opts = pipeline_options(query, options, SAFETY_NEGATIVE_PROMPT if add_negative else None)
    return build_pipeline(spec, model, store, opts, variant="esd", unet_file=unet_file)


ESD = GeneratorKind(
    name="esd",
    help="Stable Diffusion with an Erased Stable Diffusion UNet (?unet=FILE; ?np=1 adds the negative prompt)",
    options=DIFFUSERS_OPTIONS,
    params=("unet", "np", *PIPELINE_PARAMS),
    build=_esd,
)
