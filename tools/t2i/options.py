"""The options a text-to-image generator is opened with: their one typed home, each documented once here.

`open_generator(spec, store=..., long_prompts=..., **options)` and `get_generator(spec, store=..., **options)` take
them as keywords typed by `GeneratorOptions`; each backend accepts its own set (`DIFFUSERS_OPTIONS`,
`OPENAI_OPTIONS`), and the registry refuses any other option with `UnsupportedOptionError`, since callers may also
pass a plain dict. The defaults live in the backends' constructors (`DiffusersGenerator`, `OpenAIImageGenerator`).
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from tools.image_store import ImageStore

# What a caller may give as `store`: an image store, its root folder, or None for the default store.
StoreLike = ImageStore | str | os.PathLike[str] | None


class DiffusersOptions(TypedDict, total=False):
    """The options of the diffusers kinds (`diffusers:`, `sd-np:`, `sld-*:`, `esd:`)."""

    # Where the pipeline runs (`cuda`, `cuda:1`, `cpu`); default: `cuda` when a GPU is visible, else `cpu`.
    device: str | None
    # The weights' dtype: `auto` (fp16 on CUDA, fp32 on CPU), `fp16`, `bf16` or `fp32`.
    dtype: str
    # Most images in one pipeline call; default `tools.t2i.batching.DEFAULT_MAX_BATCH` on CUDA and 1 on CPU (so
    # that CPU renders stay bit-reproducible).
    max_batch: int | None
    # How long the oldest waiting image may wait for batch mates, in milliseconds (default: `DEFAULT_MAX_WAIT_S`).
    max_wait_ms: float
    # False (the default here): a prompt over the text encoder's 77 tokens is an error; True cuts it as Stable
    # Diffusion does. `open_generator` sets it from its `long_prompts` policy.
    truncate_long_prompts: bool
    # Replaces the variant's default negative prompt (the safety list for `sd-np:` and `esd:...&np=1`, none otherwise).
    negative_prompt: str | None
    # The UNet's fast-path preset (`tools.t2i.fast`): `auto`, `eager`, `compile`, `fp8` or `PRESET+switch...`; a
    # spec's `?accel=` wins over it.
    accel: str


class OpenAIOptions(TypedDict, total=False):
    """The options of `openai:` (the OpenAI Images API)."""

    # An `openai.AsyncOpenAI`-like client (anything with `images.generate`); default: one built from the key below.
    client: Any
    # The API's `quality` (e.g. `hd` for dall-e-3); default: the API's.
    quality: str | None
    # One of the model's sizes; default: the size closest to the request's aspect ratio.
    size: str | None
    # The API key and base URL of the default client (default: the `openai` package's environment variables).
    api_key: str | None
    base_url: str | None


class GeneratorOptions(DiffusersOptions, OpenAIOptions, total=False):
    """Every generator option of every backend (a spec's kind decides which of them it accepts)."""


# `store` is a keyword of its own in the registry's functions, and every backend takes it.
DIFFUSERS_OPTIONS = frozenset(DiffusersOptions.__optional_keys__ | {"store"})
OPENAI_OPTIONS = frozenset(OpenAIOptions.__optional_keys__ | {"store"})
