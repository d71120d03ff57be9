"""CLIP image embeddings for the classifiers built on them (Q16, MHSC): one loader and one forward pass.

Both classifiers read the projected, unnormalised image embedding of a transformers `CLIPModel` (what open_clip
calls `encode_image`), in float16 on a GPU and float32 on CPU.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tools.errors import MissingFileError
from tools.scorers.common import resolve_local

if TYPE_CHECKING:
    import torch


class ClipImageEncoder:
    """A lazily loaded `CLIPModel` + `CLIPImageProcessor` (hub id or local folder) on one device."""

    def __init__(self, clip_model: str, device: str, *, owner: str):
        self.clip_model, self.device, self.owner = clip_model, device, owner
        self.model: Any = None
        self.processor: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """The model, loaded once; a missing model raises `FileNotFoundError` naming the owner and the model."""
        with self._lock:
            if self.model is None:
                import torch
                from transformers import CLIPImageProcessor, CLIPModel

                source = resolve_local(self.clip_model)
                try:
                    dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
                    model = CLIPModel.from_pretrained(source, dtype=dtype)
                    self.processor = CLIPImageProcessor.from_pretrained(source)
                except OSError as exc:
                    msg = f"{self.owner} CLIP model {self.clip_model!r} could not be loaded: {exc}"
                    raise MissingFileError(msg) from exc
                self.model = model.to(self.device).eval()  # type: ignore[arg-type]
            return self.model

    def embeddings(self, images: list[Any]) -> torch.Tensor:
        """Projected, unnormalised image embeddings of PIL images, shape (N, projection_dim)."""
        import torch

        model = self.load()
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            out = model.get_image_features(pixel_values=pixels.to(self.device, model.dtype))
        return out if torch.is_tensor(out) else out.pooler_output
