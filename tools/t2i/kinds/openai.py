"""`openai:MODEL`: the OpenAI Images API (gpt-image-1, dall-e-3), or any server that speaks it (`base_url`)."""

from __future__ import annotations

from collections.abc import Mapping

from tools.image_store import ImageStore
from tools.t2i.base import ImageGenerator
from tools.t2i.kind import GeneratorKind
from tools.t2i.options import OPENAI_OPTIONS, GeneratorOptions, OpenAIOptions


def _openai(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    from tools.t2i.openai_backend import OpenAIImageGenerator

    openai_options: OpenAIOptions = options  # the registry refused any other key
    return OpenAIImageGenerator(model, store=store, **openai_options)


OPENAI = GeneratorKind(
    name="openai",
    help="the OpenAI Images API (gpt-image-1, dall-e-3) or a server that speaks it",
    options=OPENAI_OPTIONS,
    params=(),
    build=_openai,
    pipeline=False,
)
