"""The compare page of `unveil ui A --compare B`: two detection result files side by side
(`evaluation.compare_runs`), with a filter for the samples whose verdicts differ."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse

from unveil.ui.pages import UiDep

router = APIRouter()


@router.get("/compare", response_class=HTMLResponse)
async def compare(request: Request, ui: UiDep) -> HTMLResponse:
    """The metric deltas per group, the cost of each run and the shared samples (only the differing ones with
    `?only=1`)."""
    from evaluation.compare_runs import compare_runs

    other = getattr(request.app.state, "compare", None)
    if other is None:
        raise HTTPException(404, "no second run to compare: start the app with --compare FILE")
    result = await asyncio.to_thread(compare_runs, ui.target, other)
    only = request.query_params.get("only") == "1"
    samples = [s for s in result["samples"] if s["differ"] or not only]
    return ui.page(request, "compare.html", cmp=result, samples=samples, only=only)
