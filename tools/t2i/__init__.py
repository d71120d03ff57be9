"""Text-to-image generators that write their images into the content-addressed store.

Use `get_generator(spec, **options)` (specs: `tools.t2i.registry`; options: `tools.t2i.options.GeneratorOptions`)
and `await generator.generate(GenerationRequest(...))`, which returns image ids.
"""

from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.errors import GenerationOOMError, ModelNotFoundError, PromptError, T2IError, UnsupportedOptionError
from tools.t2i.registry import clear_generator_cache, get_generator, parse_spec
from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT, SLD_CONFIGS

__all__ = [
    "GenerationOOMError",
    "GenerationRequest",
    "ImageGenerator",
    "ModelNotFoundError",
    "PromptError",
    "SAFETY_NEGATIVE_PROMPT",
    "SLD_CONFIGS",
    "T2IError",
    "UnsupportedOptionError",
    "clear_generator_cache",
    "get_generator",
    "parse_spec",
]
