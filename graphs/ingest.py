"""Shared input handling for the detection graphs: validate the text and bring the image into the store.

Errors are `ValueError`s that name the input field, so a batch can record them against the sample.

A local image path is read only from an allowed folder, for every caller: a sample sent to `langgraph dev` through
the SDK must not read any file of the server. The folders that widen access come from the server's own
configuration, never from a run's context or input: `UNVEIL_IMAGE_ROOTS` in the server's environment (or in the
`env` of `langgraph.json`), the default image store, and folders that in-process code grants with
`grant_image_roots` (the run layer grants the dataset folder of a batch it reads). A context's `image_store` is an
allowed folder only when it is one of those. A sample's `base_dir` only resolves its relative paths (and may not be
escaped); it grants no access by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from langgraph.runtime import Runtime

from graphs.context import ModelsContext, check_context
from tools.env import env_list
from tools.errors import UnveilError
from tools.image_input import load_image, resolve_path
from tools.image_store import ImageInputError, default_store_root, get_image_store

MAX_TEXT_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 5_000


IMAGE_ROOTS_ENV = "UNVEIL_IMAGE_ROOTS"
# Folders granted by in-process code for the current task and the tasks it starts (a client cannot set this).
_GRANTED: ContextVar[tuple[str, ...]] = ContextVar("unveil_granted_image_roots", default=())


class SampleInputError(UnveilError, ValueError):
    """A sample's input is unusable; the message names the field."""


@contextlib.contextmanager
def grant_image_roots(roots: Iterable[str | os.PathLike[str]]) -> Iterator[None]:
    """Let samples read image files under `roots` within this block (and the graph runs it starts): for in-process
    callers that chose the folders themselves, such as a batch over the user's own dataset file."""
    token = _GRANTED.set((*_GRANTED.get(), *(str(r) for r in roots if r)))
    try:
        yield
    finally:
        _GRANTED.reset(token)


def server_image_roots() -> list[str]:
    """The folders a sample's local image path may lie in, besides the image store: `UNVEIL_IMAGE_ROOTS`
    (separated by the path separator, `:`) and the folders granted in this process."""
    env = env_list(IMAGE_ROOTS_ENV, os.pathsep)
    return [*env, *_GRANTED.get()]


def _within(path: Path, roots: Sequence[Path]) -> bool:
    return any(root == path or root in path.parents for root in roots)


def trusted_store_root(image_store: str) -> Path | None:
    """The image store folder as an allowed image folder: the default store, or one inside a server root; None for
    a store a run's context named elsewhere (it is still used to store images, but grants no reads)."""
    store = Path(image_store or default_store_root()).expanduser().resolve()
    trusted = [
        Path(default_store_root()).expanduser().resolve(),
        *(Path(r).expanduser().resolve() for r in server_image_roots()),
    ]
    return store if _within(store, trusted) else None


def check_text(value: object, field: str, *, required: bool, limit: int) -> str | None:
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
    if not _within(path, allowed):
        # The resolved path is named (a relative path is read against the server's folder, a link followed):
        # the folder to add is that file's, which the reference alone may not show.
        resolved = "" if str(path) == ref else f" (resolved to {str(path)!r})"
        raise SampleInputError(
            f"image: {ref!r}{resolved} is outside the allowed image folders "
            f"({', '.join(str(r) for r in allowed)}); add its folder ({str(path.parent)!r}) to the server's "
            f"{IMAGE_ROOTS_ENV} setting"
        )
    return path


class IngestedPair(TypedDict):
    """A detection sample's validated fields: its text, the image's description, and its id and path in the store
    (None without an image)."""

    text: str | None
    image_description: str | None
    image_id: str | None
    image_path: str | None


async def ingest_pair(
    state: Mapping[str, Any],
    *,
    store_root: str = "",
    base_dir: str | None = None,
    image_roots: Sequence[str | os.PathLike[str]] = (),
) -> IngestedPair:
    """Validated text and image fields of a detection sample: image_id, image_path and the description.

    A local image path must lie in the (trusted) image store, a server root (`server_image_roots`) or one of
    `image_roots`, which only in-process code passes."""
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
            trusted = await asyncio.to_thread(trusted_store_root, store_root)
            roots = [*([trusted] if trusted else []), *server_image_roots(), *image_roots]
            ref = str(await asyncio.to_thread(allowed_image_path, ref, base_dir, roots))
        try:
            stored = await load_image(ref, store, base_dir=None)
        except ImageInputError as exc:
            raise SampleInputError(f"image: {exc}") from exc
        image_id, image_path = stored.id, stored.path
    if image_id is None and description is None:
        raise SampleInputError("image: give an image (path or URL) or an image_description")
    return {"text": text, "image_description": description, "image_id": image_id, "image_path": image_path}


StateT = TypeVar("StateT", bound=Mapping[str, Any])
ContextT = TypeVar("ContextT", bound=ModelsContext)


async def ingest(state: StateT, runtime: Runtime[ContextT]) -> IngestedPair:
    """The first node of the detection graphs: check the settings and models, validate the sample and put its image
    into the store."""
    ctx = runtime.context
    await check_context(ctx)
    return await ingest_pair(state, store_root=ctx.image_store, base_dir=state.get("base_dir"))
