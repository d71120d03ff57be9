"""Shared input handling for the detection graphs: validate the text and bring the image into the store.

Errors are `ValueError`s that name the input field, so a batch can record them against the sample.
"""

from __future__ import annotations

from typing import Any

from tools.image_input import load_image
from tools.image_store import ImageInputError, get_image_store

MAX_TEXT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 5_000


class SampleInputError(ValueError):
    """A sample's input is unusable; the message names the field."""


def check_text(value: Any, field: str, *, required: bool, limit: int) -> str | None:
    """A stripped string, or a clear error naming the field."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise SampleInputError(f"{field}: empty or missing")
        return None
    if not isinstance(value, str):
        raise SampleInputError(f"{field}: expected a string, got {type(value).__name__}")
    if len(value) > limit:
        raise SampleInputError(f"{field}: {len(value)} characters is over the {limit}-character limit")
    return value.strip()


async def ingest_pair(state: dict[str, Any], *, store_root: str = "", base_dir: str | None = None) -> dict[str, Any]:
    """Validated text and image fields of a detection sample: image_id, image_path and the description."""
    text = check_text(state.get("text"), "text", required=True, limit=MAX_TEXT_CHARS)
    description = check_text(state.get("image_description"), "image_description", required=False, limit=MAX_DESCRIPTION_CHARS)
    image_ref = state.get("image")
    image_id = image_path = None
    if image_ref is not None and not isinstance(image_ref, str):
        raise SampleInputError(f"image: expected a path or URL string, got {type(image_ref).__name__}")
    if image_ref:
        try:
            stored = await load_image(image_ref, get_image_store(store_root or None), base_dir=base_dir)
        except ImageInputError as exc:
            raise SampleInputError(f"image: {exc}") from exc
        image_id, image_path = stored.id, stored.path
    if image_id is None and description is None:
        raise SampleInputError("image: give an image (path or URL) or an image_description")
    return {"text": text, "image_description": description, "image_id": image_id, "image_path": image_path}
