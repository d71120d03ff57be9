"""Shared input handling for the detection graphs: validate the text and bring the image into the store.

Errors are `ValueError`s that name the input field, so a batch can record them against the sample.

A local image path is read only from an allowed folder (the image store and the context's `image_roots`), for
every caller: a sample sent to `langgraph dev` through the SDK must not read any file of the server. A sample's
`base_dir` only resolves its relative paths (and may not be escaped); it grants no access by itself.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.errors import UnveilError
from tools.image_input import load_image, resolve_path
from tools.image_store import ImageInputError, get_image_store

MAX_TEXT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 5_000


class SampleInputError(UnveilError, ValueError):
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


def _is_local_path(ref: str) -> bool:
    return "://" not in ref and not ref.startswith(("data:", "file:"))


def allowed_image_path(ref: str, base_dir: str | None, roots: Sequence[str | os.PathLike[str]]) -> Path:
    """The resolved file a local image reference names, or a `SampleInputError` when it lies outside `roots`.

    Blocking (it resolves links): call it in a thread from async code.
    """
    try:
        path = resolve_path(ref, base_dir).resolve()
    except ImageInputError as exc:
        raise SampleInputError(f"image: {exc}") from exc
    allowed = [Path(r).expanduser().resolve() for r in roots]
    if not any(root == path or root in path.parents for root in allowed):
        raise SampleInputError(
            f"image: {ref!r} is outside the allowed image folders ({', '.join(str(r) for r in allowed)}); "
            "add its folder to the image_roots setting"
        )
    return path


async def ingest_pair(
    state: Mapping[str, Any],
    *,
    store_root: str = "",
    base_dir: str | None = None,
    image_roots: Sequence[str | os.PathLike[str]] = (),
) -> dict[str, Any]:
    """Validated text and image fields of a detection sample: image_id, image_path and the description.

    A local image path must lie in the image store or one of `image_roots`."""
    text = check_text(state.get("text"), "text", required=True, limit=MAX_TEXT_CHARS)
    description = check_text(
        state.get("image_description"), "image_description", required=False, limit=MAX_DESCRIPTION_CHARS
    )
    image_ref = state.get("image")
    image_id = image_path = None
    if image_ref is not None and not isinstance(image_ref, str):
        raise SampleInputError(f"image: expected a path or URL string, got {type(image_ref).__name__}")
    if image_ref:
        store = get_image_store(store_root or None)
        ref = image_ref.strip()
        is_hex_id = len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)
        # An id of an image already in the store needs no folder; anything else local must pass the guard (a
        # 64-hex name that is not in the store would otherwise be read as a path).
        if _is_local_path(ref) and not (is_hex_id and await asyncio.to_thread(store.has, ref)):
            ref = str(await asyncio.to_thread(allowed_image_path, ref, base_dir, [store.root, *image_roots]))
        try:
            stored = await load_image(ref, store, base_dir=None)
        except ImageInputError as exc:
            raise SampleInputError(f"image: {exc}") from exc
        image_id, image_path = stored.id, stored.path
    if image_id is None and description is None:
        raise SampleInputError("image: give an image (path or URL) or an image_description")
    return {"text": text, "image_description": description, "image_id": image_id, "image_path": image_path}
