"""The page of an IPR results file: per prompt, every refinement step's images, prompt, answer and scores."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from unveil.ui.pages import UiDep, n_pages, page_no, source_of
from unveil.ui.sources.ipr import IprSource

IPR_PAGE_SIZE = 20

router = APIRouter()
IprDep = Annotated[IprSource, Depends(source_of(IprSource))]  # the opened IPR results (404 for another kind)


@router.get("/ipr", response_class=HTMLResponse)
async def ipr_page(request: Request, ui: UiDep, ipr: IprDep) -> HTMLResponse:
    """Per prompt, every step's images side by side with its prompt, the refiner's answer and the scores."""
    rows = await asyncio.to_thread(ipr.rows)
    action = request.query_params.get("stop", "")
    shown = [r for r in rows if not action or action in r.get("stops", ())]
    pages = n_pages(len(shown), IPR_PAGE_SIZE)
    n = page_no(request, pages)
    part = shown[(n - 1) * IPR_PAGE_SIZE : n * IPR_PAGE_SIZE]
    records = await asyncio.to_thread(lambda: [ipr.prompt(r["id"]) for r in part])
    return ui.page(
        request,
        "ipr.html",
        records=[r for r in records if r is not None],
        total=len(rows),
        page_no=n,
        pages=pages,
        stop=action,
        problems=ipr.index.all_problems(),
        stops=sorted({s for r in rows for s in r.get("stops", ())}),
    )
