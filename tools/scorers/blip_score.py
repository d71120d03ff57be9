"""BLIP score: cosine similarity of BLIP's projected image and text features (the ITC head).

The IPR paper reports it as the alignment of the final image with the original prompt. It uses
`BlipForImageTextRetrieval` (default `Salesforce/blip-itm-base-coco`, or a local folder) with
`use_itm_head=False`, i.e. normalised image/text features from the contrastive head; captions longer than the
model's limit are truncated, as in BLIP's own evaluation.

The IPR authors' `eval.py` scores with LAVIS's `blip_feature_extractor` (`base`): the pre-trained BLIP ViT-B
checkpoint `model_base_capfilt_large.pth` at 224 px, with no retrieval fine-tuning and no transformers port. The
default here is the transformers port of BLIP ViT-B fine-tuned for COCO retrieval (384 px), so absolute BLIP
values are not comparable with the paper's; docs/evaluation.md ("Fidelity") names the difference.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from tools.errors import MissingFileError
from tools.image_store import ImageStore
from tools.scorers.common import PairScorer, cached, default_device, resolve_local
from tools.scorers.entry import ScorerEntry, ScoringSettings, build_in_thread, device_option

DEFAULT_BLIP = "Salesforce/blip-itm-base-coco"


class BlipScorer(PairScorer):
    """BLIP image-text feature cosine."""

    name = "blip"

    def __init__(
        self,
        *,
        model: str = DEFAULT_BLIP,
        device: str | None = None,
        max_text_tokens: int = 35,
        batch_size: int = 32,
        max_wait_ms: float = 10,
    ):
        super().__init__(batch_size=batch_size, max_wait_ms=max_wait_ms)
        self.model_name = model
        self.device = device or default_device()
        self.max_text_tokens = max_text_tokens
        # transformers' classes are loaded lazily (and their stubs are loose): typed as Any on purpose.
        self._model: Any = None
        self._processor: Any = None

    def _load(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            import torch
            from transformers import BlipForImageTextRetrieval, BlipProcessor

            source = resolve_local(self.model_name)
            try:
                dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
                loaded: Any = BlipForImageTextRetrieval.from_pretrained(source, dtype=dtype)
                model = loaded.to(self.device).eval()
                processor = BlipProcessor.from_pretrained(source)
            except OSError as exc:
                raise MissingFileError(f"BLIP model {self.model_name!r} could not be loaded: {exc}") from exc
            self._processor = processor
            self._model = model

    def _score_batch(self, items: list[tuple[Any, str]]) -> list[float]:
        import torch

        self._load()
        inputs = self._processor(
            images=[im for im, _ in items],
            text=[p for _, p in items],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_text_tokens,
        )
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        inputs["pixel_values"] = inputs["pixel_values"].to(self._model.dtype)
        with torch.inference_mode():
            # With use_itm_head=False the first output is the (images x texts) cosine matrix; pairs are its diagonal.
            sims = self._model(**inputs, use_itm_head=False, return_dict=False)[0]
        return torch.diagonal(sims.float()).tolist()


def get_blip_scorer(**settings: Any) -> BlipScorer:
    """The process-wide BLIP scorer for these settings (see `BlipScorer`)."""
    return cached(BlipScorer, **settings)


async def _start(
    settings: ScoringSettings, ids: list[str], prompt: str, store: ImageStore | None
) -> Awaitable[list[Any]]:
    kw = {**device_option(settings), **({"model": settings.blip_model} if settings.blip_model else {})}
    return (await build_in_thread(get_blip_scorer, **kw)).score(ids, [prompt] * len(ids), store=store)


SCORER = ScorerEntry(
    name="blip",
    help="BLIP score: the cosine of BLIP's projected image and text features (its ITC head)",
    columns=("blip",),
    start=_start,
    row=lambda score: {"blip": float(score)},
)
