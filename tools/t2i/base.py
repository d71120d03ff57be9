"""The one generator interface every text-to-image backend implements.

A backend takes a `GenerationRequest` and returns the ids of the images it stored (one per seed and image
index, in order), so graph state only ever holds ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tools.t2i.defaults import REQUEST_GUIDANCE, REQUEST_SIZE, REQUEST_STEPS


@dataclass(frozen=True)
class GenerationRequest:
    """What to render. `seed` is the first seed; image k of the request uses `seed + k`."""

    prompt: str
    negative_prompt: str | None = None
    seed: int = 0
    num_images: int = 1
    width: int = REQUEST_SIZE
    height: int = REQUEST_SIZE
    steps: int = REQUEST_STEPS
    guidance: float = REQUEST_GUIDANCE


@runtime_checkable
class ImageGenerator(Protocol):
    """A text-to-image backend."""

    name: str

    async def generate(self, request: GenerationRequest) -> list[str]:
        """Render the request and return the stored image ids."""
        ...
