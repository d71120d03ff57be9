"""`sld-weak:` ... `sld-max:MODEL`: Safe Latent Diffusion at each of its published configurations
(`tools.t2i.variants.SLD_CONFIGS`), one kind each."""

from __future__ import annotations

from collections.abc import Mapping

from tools.image_store import ImageStore
from tools.t2i.base import ImageGenerator
from tools.t2i.kind import GeneratorKind
from tools.t2i.kinds.diffusers import PIPELINE_PARAMS, build_pipeline, pipeline_options
from tools.t2i.options import DIFFUSERS_OPTIONS, GeneratorOptions
from tools.t2i.variants import SLD_CONFIGS


def _sld(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    variant = spec.partition(":")[0]  # the kind names its configuration
    return build_pipeline(spec, model, store, pipeline_options(query, options, None), variant=variant)


KINDS: tuple[GeneratorKind, ...] = tuple(
    GeneratorKind(
        name=f"sld-{name}",
        help=f"Safe Latent Diffusion, its {name} configuration",
        options=DIFFUSERS_OPTIONS,
        params=PIPELINE_PARAMS,
        build=_sld,
    )
    for name in SLD_CONFIGS
)
