"""The registry of the web app's page kinds: what `unveil ui PATH` can open.

The start page (`/`), the routes the app serves and the recognition of a path (`detect_kind`) all read `KINDS`;
adding a kind is a source module in `unveil/ui/sources/`, a router in `unveil/ui/routes/`, its templates and one
entry here (CONTRIBUTING.md, "A page kind of the web app"). `tests/unveil/test_ui_kinds.py` runs every entry through the
same checks. The first kind that claims a path opens it, so a kind whose records are more specific comes first.
"""

from __future__ import annotations

from pathlib import Path

from unveil.ui.page_kind import PageKind, PageKindError, sniff
from unveil.ui.routes import detections, ipr, review
from unveil.ui.sources.ctd import flush_views, is_dataset_folder, open_ctd
from unveil.ui.sources.detection import is_detection_record, open_detection
from unveil.ui.sources.ipr import is_ipr_record, open_ipr

KINDS: tuple[PageKind, ...] = (
    PageKind(
        name="ctd",
        describes="a CTD dataset folder written by `unveil generate` (with samples.jsonl)",
        home="/review",
        router=review.router,
        open=open_ctd,
        templates=("review.html", "reviewers.html", "signin.html"),
        sample_page="/review?status=&id={id}",
        folder=is_dataset_folder,
        reviewers=True,
        stop=flush_views,
    ),
    PageKind(
        name="ipr",
        describes="IPR results of `unveil refine` or `unveil evaluate ipr` (records with trajectory, trajectories "
        "or used_prompt)",
        home="/ipr",
        router=ipr.router,
        open=open_ipr,
        templates=("ipr.html",),
        sample_page="/calls?id={id}",
        record=is_ipr_record,
    ),
    PageKind(
        name="detection",
        describes="detection results of `unveil detect` or `unveil evaluate detection` (records with mtc, toxic or "
        "trees)",
        home="/detections",
        router=detections.router,
        open=open_detection,
        templates=("detections.html", "detection.html"),
        sample_page="/detections/view?id={id}",
        record=is_detection_record,
    ),
)
__all__ = ["KINDS", "PageKind", "PageKindError", "detect_kind", "kind_named"]


def detect_kind(path: str | Path) -> PageKind:
    """The registered kind that opens `path` (`PageKindError` naming the path when none does)."""
    return sniff(path, KINDS)


def kind_named(name: str) -> PageKind:
    """The registered kind called `name` (a `KeyError` for a name no kind has)."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise KeyError(name)
