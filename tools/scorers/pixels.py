"""Scoring images held in memory (the GRPO reward's renders): Q16 and CLIP alignment for many (prompt, image) pairs.

Two scorers with one interface (`score(prompts, images) -> [(q16, clip cosine)]`), built by
`tools.scorers.score.pixel_scorer`:
- `ToolsPixelScorer` (`tools`, the default): the same Q16 and open_clip CLIP-score scorers as evaluation and the IPR
  graph use, so training optimises exactly what evaluation measures;
- `ClipQ16PixelScorer` (`fast`): transformers CLIPs for both terms with preprocessing done as one tensor batch on
  the GPU, for when per-image PIL preprocessing shows up in the step time. Q16's rule (`q16_probabilities`) and its
  embeddings loader (`load_q16_prompts`) are the Q16 scorer's own.

The alignment term is the cosine between CLIP's text and image embeddings (the IPR authors' code used ViT-B/32).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tools.scorers.q16 import load_q16_prompts, q16_probabilities

if TYPE_CHECKING:
    import torch
    from PIL import Image


def to_pil(image: Image.Image | torch.Tensor) -> Image.Image:
    """A PIL image from a PIL image or a CHW float tensor in [0, 1]."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    arr = (image.detach().float().clamp(0, 1) * 255).round().byte().permute(1, 2, 0).cpu().numpy()
    return Image.fromarray(arr)


class ToolsPixelScorer:
    """Q16 and CLIP score through the project's scorers (process-wide cached models on `device`)."""

    def __init__(self, *, q16_model: str, clip_model: str, q16_embeddings: str | Path, device: str | None = None):
        from tools.scorers.clip_score import get_clip_scorer
        from tools.scorers.q16 import get_q16

        self.q16 = get_q16(prompts_path=str(q16_embeddings), clip_model=q16_model, device=device)
        self.clip = get_clip_scorer(model=clip_model, device=device)

    def score(self, prompts: Sequence[str], images: Sequence[Any]) -> list[tuple[float, float]]:
        """(Q16 P(inappropriate), CLIP cosine) per pair."""
        if not images:
            return []
        pil = [to_pil(im).convert("RGB") for im in images]
        q16 = [r.p_inappropriate for r in self.q16.score_pil(pil)]
        clip = self.clip.score_pil(pil, list(prompts))
        return list(zip(q16, clip, strict=False))


class BatchedClip:
    """A transformers CLIPModel with tensor preprocessing."""

    def __init__(self, name: str, device: str, dtype: torch.dtype):
        import torch
        from transformers import CLIPModel, CLIPProcessor

        loaded: Any = CLIPModel.from_pretrained(name, dtype=dtype)
        self.model = loaded.to(device).eval()
        processor = CLIPProcessor.from_pretrained(name)
        self.tokenizer = processor.tokenizer
        ip = processor.image_processor
        crop = ip.crop_size
        self.size = int(crop if isinstance(crop, int) else crop["height"])
        self.mean = torch.tensor(ip.image_mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(ip.image_std, device=device).view(1, 3, 1, 1)
        self.device, self.dtype = device, dtype

    def pixels(self, images: Sequence[Any]) -> torch.Tensor:
        """A normalised (N, 3, S, S) batch: shorter side resized to S (bicubic, antialiased), centre-cropped."""
        import torch
        import torch.nn.functional as F

        out = []
        for img in images:
            if hasattr(img, "convert"):
                t = torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1)
                t = t.to(self.device, non_blocking=True).float().div_(255.0)
            else:
                t = img.to(self.device).float()
            h, w = t.shape[-2:]
            scale = self.size / min(h, w)
            nh, nw = max(self.size, round(h * scale)), max(self.size, round(w * scale))
            t = F.interpolate(t[None], size=(nh, nw), mode="bicubic", antialias=True, align_corners=False)[0]
            top, left = (nh - self.size) // 2, (nw - self.size) // 2
            out.append(t[:, top : top + self.size, left : left + self.size])
        batch = torch.stack(out).clamp_(0, 1)
        return ((batch - self.mean) / self.std).to(self.dtype)

    def image_embeds(self, pixels: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings."""
        out = self.model.get_image_features(pixel_values=pixels)
        e: torch.Tensor = getattr(out, "pooler_output", out)  # a tensor, or an output object holding it
        return e.div(e.norm(dim=-1, keepdim=True))  # `e / ...` is the same division; torch types it as Any

    def text_embeds(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text embeddings (texts cut at CLIP's 77 tokens)."""
        tok = self.tokenizer(list(texts), padding=True, truncation=True, max_length=77, return_tensors="pt").to(
            self.device
        )
        out = self.model.get_text_features(**tok)
        e: torch.Tensor = getattr(out, "pooler_output", out)
        return e.div(e.norm(dim=-1, keepdim=True))


class ClipQ16PixelScorer:
    """(Q16 P(inappropriate), CLIP cosine(prompt, image)) for batches of pairs; one model when both names match."""

    def __init__(
        self,
        *,
        q16_model: str,
        clip_model: str,
        q16_embeddings: str | Path | Any,
        device: str | None = None,
        batch_size: int = 64,
    ):
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.q16_clip = BatchedClip(q16_model, device, dtype)
        self.align_clip = self.q16_clip if clip_model == q16_model else BatchedClip(clip_model, device, dtype)
        rows = load_q16_prompts(q16_embeddings) if isinstance(q16_embeddings, (str, Path)) else q16_embeddings
        self.q16_rows = torch.as_tensor(np.asarray(rows, dtype=np.float32), device=device).to(dtype)
        self.batch_size = batch_size

    def score(self, prompts: Sequence[str], images: Sequence[Any]) -> list[tuple[float, float]]:
        """Scores of each (prompt, image) pair; repeated prompts are encoded once."""
        import torch

        if not images:
            return []
        q16: list[float] = []
        align: list[float] = []
        uniq = list(dict.fromkeys(prompts))
        with torch.inference_mode():
            text = self.align_clip.text_embeds(uniq)
            index = {p: i for i, p in enumerate(uniq)}
            for start in range(0, len(images), self.batch_size):
                chunk = images[start : start + self.batch_size]
                chunk_prompts = prompts[start : start + self.batch_size]
                pix = self.q16_clip.pixels(chunk)
                emb = self.q16_clip.image_embeds(pix)
                probs = q16_probabilities(emb, self.q16_rows)[:, 1]
                q16.extend(probs.tolist())
                if self.align_clip is not self.q16_clip:
                    emb = self.align_clip.image_embeds(self.align_clip.pixels(chunk))
                t = text[[index[p] for p in chunk_prompts]]
                align.extend((emb * t).sum(dim=-1).float().tolist())
        return list(zip(q16, align, strict=False))
