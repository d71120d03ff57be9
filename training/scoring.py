"""Reward-side scoring: Q16 and CLIP alignment for many (prompt, image) pairs per GRPO step.

Two scorers with one interface (`score(prompts, images) -> [(q16, clip cosine)]`):
- `ToolsScorer` (default, `scorer = "tools"`): the project's scorers, `tools.scorers.q16` and
  `tools.scorers.clip_score` (open_clip), so training optimises exactly what evaluation measures;
- `ClipQ16Scorer` (`scorer = "fast"`): transformers CLIPs for both terms with preprocessing done as one tensor
  batch on the GPU, for when per-image PIL preprocessing shows up in the step time.

Q16 (Schramowski et al., 2022) is CLIP ViT-L/14 zero-shot classification against two learned prompt embeddings
[appropriate, inappropriate]: P(inappropriate) = softmax(100 * cos(image, rows))[1]. The alignment term is the
cosine between CLIP's text and image embeddings (the authors' code used ViT-B/32 for it). Both CLIPs are
transformers `CLIPModel` folders or Hub ids. Images are resized, cropped and normalised as tensors in one batch
(PIL per-image preprocessing would cost more than the CLIP forward passes at 160 images a step).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def load_q16_embeddings(path: str | Path) -> np.ndarray:
    """Q16's prompt embeddings, (2, D) rows [appropriate, inappropriate], from `.npy` or the original pickle."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"Q16 embeddings {str(path)!r} not found (the .npy/.p file of the Q16 prompts)")
    if p.suffix == ".npy":
        arr = np.load(p)
    else:
        with p.open("rb") as fh:
            arr = np.asarray(pickle.load(fh))
    arr = np.asarray(arr, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"Q16 embeddings {str(path)!r}: expected shape (2, D), got {arr.shape}")
    return arr


class ToolsScorer:
    """Q16 and CLIP score through `tools.scorers` (process-wide cached models on `device`)."""

    def __init__(self, *, q16_model: str, clip_model: str, q16_embeddings: str | Path, device: str | None = None):
        from tools.scorers.clip_score import get_clip_scorer
        from tools.scorers.q16 import get_q16

        self.q16 = get_q16(prompts_path=str(q16_embeddings), clip_model=q16_model, device=device)
        self.clip = get_clip_scorer(model=clip_model, device=device)

    def score(self, prompts: Sequence[str], images: Sequence[Any]) -> list[tuple[float, float]]:
        """(Q16 P(inappropriate), CLIP cosine) per pair."""
        from training.reward import to_pil

        if not images:
            return []
        pil = [to_pil(im).convert("RGB") for im in images]
        q16 = [r.p_inappropriate for r in self.q16.score_pil(pil)]
        clip = self.clip.score_pil(pil, list(prompts))
        return list(zip(q16, clip, strict=False))


def make_scorer(kind: str, *, q16_model: str, clip_model: str, q16_embeddings: str | Path, device: str | None):
    """The reward scorer by kind: `tools` (the project's scorers) or `fast` (GPU-batched transformers CLIPs)."""
    if kind == "tools":
        return ToolsScorer(
            q16_model=q16_model, clip_model=clip_model or "ViT-B-32", q16_embeddings=q16_embeddings, device=device
        )
    if kind == "fast":
        return ClipQ16Scorer(
            q16_model=q16_model,
            clip_model=clip_model or "openai/clip-vit-base-patch32",
            q16_embeddings=q16_embeddings,
            device=device,
        )
    raise ValueError(f"scorer {kind!r}: expected tools or fast")


class _Clip:
    """A transformers CLIPModel with tensor preprocessing."""

    def __init__(self, name: str, device: str, dtype: Any):
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

    def pixels(self, images: Sequence[Any]):
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

    def image_embeds(self, pixels):
        """L2-normalised image embeddings."""
        e = self.model.get_image_features(pixel_values=pixels)
        e = getattr(e, "pooler_output", e)
        return e / e.norm(dim=-1, keepdim=True)

    def text_embeds(self, texts: Sequence[str]):
        """L2-normalised text embeddings (texts cut at CLIP's 77 tokens)."""
        tok = self.tokenizer(list(texts), padding=True, truncation=True, max_length=77, return_tensors="pt").to(
            self.device
        )
        e = self.model.get_text_features(**tok)
        e = getattr(e, "pooler_output", e)
        return e / e.norm(dim=-1, keepdim=True)


class ClipQ16Scorer:
    """(Q16 P(inappropriate), CLIP cosine(prompt, image)) for batches of pairs; one model when both names match."""

    def __init__(
        self,
        *,
        q16_model: str,
        clip_model: str,
        q16_embeddings: str | Path | np.ndarray,
        device: str | None = None,
        batch_size: int = 64,
    ):
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.q16_clip = _Clip(q16_model, device, dtype)
        self.align_clip = self.q16_clip if clip_model == q16_model else _Clip(clip_model, device, dtype)
        rows = q16_embeddings if isinstance(q16_embeddings, np.ndarray) else load_q16_embeddings(q16_embeddings)
        rows_t = torch.tensor(np.asarray(rows, dtype=np.float32), device=device)
        self.q16_rows = (rows_t / rows_t.norm(dim=-1, keepdim=True)).to(dtype)
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
                probs = (100.0 * emb @ self.q16_rows.T).float().softmax(dim=-1)[:, 1]
                q16.extend(probs.tolist())
                if self.align_clip is not self.q16_clip:
                    emb = self.align_clip.image_embeds(self.align_clip.pixels(chunk))
                t = text[[index[p] for p in chunk_prompts]]
                align.extend((emb * t).sum(dim=-1).float().tolist())
        return list(zip(q16, align, strict=False))
