"""CLIP score: cosine similarity of the open_clip embeddings of the original prompt and the image.

This is the alignment term of IPR's reward (ViT-B/32 by default, OpenAI weights). The value is the raw cosine
in [-1, 1] (multiply by 100 and clip at 0 for the "CLIPScore" of Hessel et al. if needed). `model` accepts a
built-in open_clip name (with `pretrained` a tag or weights file), `hf-hub:<repo>`, `local-dir:<folder>`, or a
plain folder holding `open_clip_config.json` and weights.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import Any

from tools.errors import MissingFileError
from tools.extras import require_extra
from tools.image_store import ImageStore
from tools.scorers.common import PairScorer, cached, default_device
from tools.scorers.entry import ScorerEntry, ScoringSettings, build_in_thread, device_option


class ClipScorer(PairScorer):
    """open_clip image-text cosine similarity."""

    name = "clip"

    def __init__(
        self,
        *,
        model: str = "ViT-B-32",
        pretrained: str | None = "openai",
        device: str | None = None,
        batch_size: int = 32,
        max_wait_ms: float = 10,
    ):
        super().__init__(batch_size=batch_size, max_wait_ms=max_wait_ms)
        if os.path.isdir(os.path.expanduser(model)) and not model.startswith(("local-dir:", "hf-hub:")):
            model = "local-dir:" + os.path.expanduser(model)
        self.model_name = model
        self.pretrained = None if model.startswith(("local-dir:", "hf-hub:")) else pretrained
        self.device = device or default_device()
        # open_clip objects are loaded lazily and untyped: Any on purpose.
        self._model: Any = None
        self._preprocess: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            import open_clip

            try:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    self.model_name,
                    pretrained=self.pretrained,
                    device=self.device,
                )
                tokenizer = open_clip.get_tokenizer(self.model_name)
            except (OSError, RuntimeError, ValueError) as exc:
                raise MissingFileError(
                    f"CLIP-score model {self.model_name!r} (pretrained={self.pretrained!r}) could not be loaded: {exc}"
                ) from exc
            self._preprocess, self._tokenizer = preprocess, tokenizer
            self._model = model.eval()

    def _score_batch(self, items: list[tuple[Any, str]]) -> list[float]:
        import torch

        self._load()
        images = torch.stack([self._preprocess(im) for im, _ in items]).to(self.device)
        tokens = self._tokenizer([p for _, p in items]).to(self.device)
        # fp16 autocast on CUDA; open_clip's own fp16 mode keeps some parameters in fp32, which breaks inputs.
        cuda = self.device.startswith("cuda")
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=cuda):
            img = torch.nn.functional.normalize(self._model.encode_image(images).float(), dim=-1)
            txt = torch.nn.functional.normalize(self._model.encode_text(tokens).float(), dim=-1)
        return (img * txt).sum(dim=-1).tolist()


def get_clip_scorer(**settings: Any) -> ClipScorer:
    """The process-wide CLIP scorer for these settings (see `ClipScorer`); needs the 'scores' extra."""
    require_extra("scores", "the CLIP scorer", ("open_clip",))
    return cached(ClipScorer, **settings)


async def _start(
    settings: ScoringSettings, ids: list[str], prompt: str, store: ImageStore | None
) -> Awaitable[list[Any]]:
    kw = {**device_option(settings), **({"model": settings.clip_model} if settings.clip_model else {})}
    return (await build_in_thread(get_clip_scorer, **kw)).score(ids, [prompt] * len(ids), store=store)


SCORER = ScorerEntry(
    name="clip",
    help="CLIP score: the cosine of the image and the prompt (open_clip)",
    columns=("clip",),
    start=_start,
    row=lambda score: {"clip": float(score)},
    modules=("open_clip",),
)
