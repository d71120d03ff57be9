"""The IPR evaluation's caches: a generator that renders each (request, seed) once and a scorer that scores each
(image, prompt) once, both kept in the evaluation's `EvalStore`, so a rerun recomputes nothing and the IPR
graph's step 0 reuses the plain run's image.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any, Protocol

from evaluation.store import EvalStore
from tools.t2i.base import GenerationRequest, ImageGenerator


class ImageScorer(Protocol):
    """Scores one image against a prompt: `q16` (P(inappropriate)), `nudenet` (detected labels), `blip`."""

    name: str

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """The image's scores."""
        ...


# Images rendered (not found in the store) by the trajectory running in this context: the IPR graph's nodes run in
# tasks that copy the caller's context, so they add to the caller's counter.
RENDERED: ContextVar[list[int] | None] = ContextVar("ipr_eval_rendered", default=None)


class CachedGenerator:
    """Renders through a generator, one stored image per (request, seed); counts real generator calls. It is an
    `ImageGenerator` itself, so the IPR graph can render through it (see `register_generator`)."""

    def __init__(self, generator: ImageGenerator, spec: str, store: EvalStore):
        self.generator, self.spec, self.store = generator, spec, store
        self.name = getattr(generator, "name", spec)
        self.calls = 0

    def _payload(self, req: GenerationRequest, seed: int) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "prompt": req.prompt,
            "negative": req.negative_prompt,
            "seed": seed,
            "w": req.width,
            "h": req.height,
            "steps": req.steps,
            "guidance": req.guidance,
        }

    async def generate(self, request: GenerationRequest) -> list[str]:
        """The image ids of the request (stored ones, else rendered now)."""
        ids, fresh = await self.generate_counted(request)
        counter = RENDERED.get()
        if counter is not None:
            counter[0] += fresh
        return ids

    async def generate_counted(self, req: GenerationRequest) -> tuple[list[str], int]:
        """(image ids, how many were rendered now rather than found)."""
        seeds = [req.seed + k for k in range(req.num_images)]
        found = [await asyncio.to_thread(self.store.get, "gen", self._payload(req, s)) for s in seeds]
        if all(found):
            return list(found), 0
        self.calls += 1
        ids = await self.generator.generate(req)
        if len(ids) != req.num_images:
            raise RuntimeError(f"generator {self.spec}: asked for {req.num_images} images, got {len(ids)}")
        for s, image_id in zip(seeds, ids, strict=True):  # lengths checked just above
            await asyncio.to_thread(self.store.put, "gen", self._payload(req, s), image_id)
        return list(ids), req.num_images


class CachedScorer:
    """Scores each (image, prompt) once."""

    def __init__(self, scorer: ImageScorer, store: EvalStore):
        self.scorer, self.store = scorer, store
        self.name = getattr(scorer, "name", type(scorer).__name__)
        self.calls = 0

    async def score(self, image_id: str, prompt: str) -> dict[str, Any]:
        """Stored scores, else the scorer's."""
        payload = {"scorer": self.name, "image": image_id, "prompt": prompt}
        # The "score" namespace holds only the rows this method stores below.
        hit: dict[str, Any] | None = await asyncio.to_thread(self.store.get, "score", payload)
        if hit is not None:
            return hit
        self.calls += 1
        raw = await self.scorer.score(image_id, prompt)
        value = {
            "q16": _num(raw.get("q16")),
            "nudenet": [str(x) for x in raw.get("nudenet") or []],
            "blip": _num(raw.get("blip")),
        }
        if raw.get("mhsc") is not None:  # MHSC, an extra metric column when the scorer has it
            value["mhsc"] = _num(raw["mhsc"])
        await asyncio.to_thread(self.store.put, "score", payload, value)
        return value


def _num(value: float | str | None) -> float | None:
    return None if value is None else float(value)
