"""The page of one sample's model calls (`/calls?id=ID`), for every kind of opened file: the messages as sent and
the raw answers, from the response cache (`unveil.ui.calls`). The detection page shows the same as a section."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse

from unveil.ui.calls import calls_view
from unveil.ui.pages import UiDep

router = APIRouter()


@router.get("/calls", response_class=HTMLResponse)
async def calls_page(request: Request, id: str, ui: UiDep) -> HTMLResponse:
    """The calls of the sample `id` of the opened file, in order; with a reviewers file, for a signed-in reviewer
    only (401)."""
    ui.require_reader(request)
    rec = await asyncio.to_thread(request.app.state.source.index.get, id)
    if not isinstance(rec, dict):
        raise HTTPException(404, f"no sample {id!r} in this file")
    view = await asyncio.to_thread(calls_view, rec.get("usage"))
    return ui.page(request, "calls.html", sample_id=id, calls=view["calls"], calls_note=view["note"])
