"""Shared plumbing for the scorers: devices, image loading by id or path, and per-scorer batching.

Every scorer takes image ids from the content-addressed store (or file paths, for evaluation of images made
elsewhere). A missing or unreadable image raises `ImageInputError` naming it. Scoring calls from concurrent
coroutines are merged into batches on a worker thread per scorer (the same `Batcher` the text-to-image
generators use), so twenty IPR runs scoring one image each cost one forward pass.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from PIL import Image

from tools.env import SettingError
from tools.image_store import ImageInputError, ImageStore, decode_image, get_image_store, read_file_capped, to_8bit
from tools.t2i.batching import Batcher, Job

T = TypeVar("T")

DEFAULT_BATCH = 32
DEFAULT_WAIT_S = 0.01


def default_device() -> str:
    """`cuda` when a GPU is visible, else `cpu`."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _is_id(ref: str) -> bool:
    return len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)


def read_image_bytes(ref: str, store: ImageStore | None = None) -> bytes:
    """Encoded bytes of an image id (from the store) or an image file path; raises naming the input."""
    if not isinstance(ref, str) or not ref:
        raise ImageInputError(f"image {ref!r}: expected an image id or a file path")
    if _is_id(ref):
        return (store or get_image_store()).read_bytes(ref)
    path = Path(ref)
    if not path.is_file():
        raise ImageInputError(f"image {ref!r}: not an image id and no such file")
    return read_file_capped(path)


def load_rgb(ref: str, store: ImageStore | None = None) -> Image.Image:
    """Decode an image id or path to RGB, refusing corrupt data with an error naming the input."""
    data = read_image_bytes(ref, store)
    return decode_image(data, name=ref).convert("RGB")


def resolve_local(model: str) -> str:
    """Expand `~` in a local folder setting; hub ids pass through unchanged."""
    expanded = os.path.expanduser(model)
    return expanded if os.path.exists(expanded) else model


class BatchedScorer:
    """Base class: subclasses implement `_score_batch(items) -> list[result]` on already-decoded inputs."""

    name = "scorer"

    def __init__(self, *, batch_size: int = DEFAULT_BATCH, max_wait_ms: float = DEFAULT_WAIT_S * 1000):
        if batch_size < 1:
            raise SettingError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self._batcher = Batcher(f"scorer-{self.name}")
        self._load_lock = threading.Lock()

    def _score_batch(self, items: list[Any]) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run_jobs(self, jobs: list[Job]) -> list[Any]:
        return self._score_batch([j.payload for j in jobs])

    def score_items(self, items: Sequence[Any]) -> list[Any]:
        """Score decoded inputs synchronously, in chunks of `batch_size`."""
        out: list[Any] = []
        for i in range(0, len(items), self.batch_size):
            out.extend(self._score_batch(list(items[i : i + self.batch_size])))
        return out

    async def _score_async(self, items: Sequence[Any]) -> list[Any]:
        return await self._batcher.run(
            self.name, list(items), self._run_jobs, max_batch=self.batch_size, max_wait_s=self.max_wait_s
        )


class ImageBatchScorer(BatchedScorer):
    """A scorer of single images: subclasses implement `_score_batch` on decoded RGB PIL images."""

    def score_pil(self, images: list[Any]) -> list[Any]:
        """Score PIL images synchronously."""
        from tools.image_store import to_8bit

        return self.score_items([to_8bit(im).convert("RGB") for im in images])

    async def score(self, image_ids: list[str], *, store: ImageStore | None = None) -> list[Any]:
        """Score stored images (ids, or file paths), batched with concurrent callers."""
        images = await asyncio.to_thread(lambda: [load_rgb(i, store) for i in image_ids])
        return await self._score_async(images)


_CACHE: dict[tuple[Callable[..., object], tuple[tuple[str, str], ...]], object] = {}
_CACHE_LOCK = threading.Lock()


def check_pairs(image_ids: Sequence[Any], prompts: Sequence[Any]) -> None:
    """One non-empty prompt per image, or a clear error."""
    if len(image_ids) != len(prompts):
        raise ValueError(
            f"{len(image_ids)} images but {len(prompts)} prompts; alignment scores need one prompt per image"
        )
    for p in prompts:
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"prompt {p!r} is empty; an alignment score needs the original prompt")


class PairScorer(BatchedScorer):
    """A scorer of (image, prompt) pairs; subclasses implement `_score_batch` on (PIL image, prompt) items."""

    def score_pil(self, images: list[Any], prompts: list[str]) -> list[float]:
        """The score of each PIL image with its prompt, synchronously."""
        check_pairs(images, prompts)
        return self.score_items([(to_8bit(im).convert("RGB"), p) for im, p in zip(images, prompts, strict=True)])

    async def score(self, image_ids: list[str], prompts: list[str], *, store: ImageStore | None = None) -> list[float]:
        """The score of each stored image with its prompt, batched with concurrent callers."""
        check_pairs(image_ids, prompts)
        images = await asyncio.to_thread(lambda: [load_rgb(i, store) for i in image_ids])
        return await self._score_async(list(zip(images, prompts, strict=True)))


def cached(factory: Callable[..., T], **settings: Any) -> T:
    """One instance per (factory, settings) per process, so models load once."""
    key = (factory, tuple(sorted((k, repr(v)) for k, v in settings.items())))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = factory(**settings)
        # The key holds the factory, so the entry is what this factory made.
        return cast(T, _CACHE[key])
