"""The start page (a redirect to the opened file's page) and the stored images every page shows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import BinaryIO

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, StreamingResponse

from unveil.ui.pages import UiDep

CHUNK_BYTES = 1 << 16

router = APIRouter()


@router.get("/", include_in_schema=False)
async def home(ui: UiDep) -> RedirectResponse:
    """The home page of the opened path's kind (its registry entry's `home`)."""
    return RedirectResponse(ui.page_kind.home, status_code=303)


def _chunks(fh: BinaryIO, size: int) -> Iterator[bytes]:
    """The first `size` bytes of an open file, in chunks; never more than was checked, even if the file grows
    meanwhile. Closes the file."""
    with fh:
        left = size
        while left > 0:
            data = fh.read(min(left, CHUNK_BYTES))
            if not data:
                return
            left -= len(data)
            yield data


@router.get("/images/{image_id}")
async def image(request: Request, image_id: str, ui: UiDep) -> StreamingResponse:
    """A stored image by its id, streamed; anything not a regular file in an allowed store, under the image
    size cap and hashing to its id, is 404. With a reviewers file, for a signed-in reviewer only (401)."""
    ui.require_reader(request)
    opened = await asyncio.to_thread(ui.images.open_file, image_id)
    if opened is None:
        raise HTTPException(404, "no such image in the store")
    fh, size = opened
    return StreamingResponse(_chunks(fh, size), media_type="image/png", headers={"Content-Length": str(size)})
