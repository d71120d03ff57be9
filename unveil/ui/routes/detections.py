"""The pages of a TAG detection results file: the filtered table, one result, and its TAG picture."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from unveil.ui.calls import calls_view
from unveil.ui.pages import LIST_PAGE_SIZE, UiDep, n_pages, page_no, source_of
from unveil.ui.sources.detection import MTC_BIN_LABELS, MTC_BINS, DetectionSource

TAG_PICTURES_KEPT = 32

router = APIRouter()
DetectionDep = Annotated[DetectionSource, Depends(source_of(DetectionSource))]  # 404 for another kind


@router.get("/detections", response_class=HTMLResponse)
async def detections(request: Request, ui: UiDep, det: DetectionDep) -> HTMLResponse:
    """The table of detection results, filtered by verdict and MTC bin, one page at a time."""
    verdict, mbin = request.query_params.get("verdict", ""), request.query_params.get("bin", "")
    rows = await asyncio.to_thread(det.rows)
    shown = [r for r in rows if (not verdict or r.get("verdict") == verdict) and (not mbin or r.get("bin") == mbin)]
    pages = n_pages(len(shown), LIST_PAGE_SIZE)
    n = page_no(request, pages)
    part = [{**r, "image_id": det.image_of(r)} for r in shown[(n - 1) * LIST_PAGE_SIZE : n * LIST_PAGE_SIZE]]
    return ui.page(
        request,
        "detections.html",
        rows=part,
        n_shown=len(shown),
        total=len(rows),
        verdict=verdict,
        bin=mbin,
        bins=[(b, MTC_BIN_LABELS[b]) for b in MTC_BINS],
        page_no=n,
        pages=pages,
        problems=det.index.all_problems(),
    )


@router.get("/detections/view", response_class=HTMLResponse)
async def detection(request: Request, id: str, ui: UiDep, det: DetectionDep) -> HTMLResponse:
    """One detection: the TAG picture, both trees with the toxic path, the explanation, usage per role."""
    rec = await asyncio.to_thread(det.record, id)
    if rec is None:
        problem = det.index.problem(id)
        if problem is None:
            raise HTTPException(404, f"no result {id!r} in this file")
        return ui.page(request, "bad.html", problem=problem, back="/detections")
    calls = await asyncio.to_thread(calls_view, rec.get("usage"))
    return ui.page(request, "detection.html", rec=rec, calls=calls["calls"], calls_note=calls["note"])


@router.get("/detections/tag.{fmt}")
async def tag_picture(fmt: str, id: str, ui: UiDep, det: DetectionDep) -> Response:
    """The TAG picture of one result, as PNG or as SVG (zoomable without blur), drawn by `unveil.render` and
    kept in memory for the last few results."""
    if fmt not in ("png", "svg"):
        raise HTTPException(404)
    kept = ui.tag_pictures
    key = f"{fmt}:{id}"
    if key not in kept:
        rec = await asyncio.to_thread(det.record, id)
        if rec is None or rec.get("status") == "failed" or rec.get("tree_error"):
            raise HTTPException(404)
        try:
            kept[key] = await asyncio.to_thread(_render, rec, fmt)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise HTTPException(422, f"cannot draw result {id!r}: {exc}") from exc
        while len(kept) > TAG_PICTURES_KEPT:
            kept.popitem(last=False)
    kept.move_to_end(key)
    return Response(kept[key], media_type="image/png" if fmt == "png" else "image/svg+xml")


def _render(rec: dict[str, Any], fmt: str) -> bytes:
    """Draw a detection record with the project's TAG renderer and return the file's bytes (png or svg)."""
    from unveil.render import render_tag

    with tempfile.TemporaryDirectory() as tmp:
        return Path(render_tag(rec, Path(tmp) / f"tag.{fmt}")).read_bytes()
