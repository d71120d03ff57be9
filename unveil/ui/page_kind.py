"""What a page kind of the web app is (`PageKind`: how a path of that kind is recognised and opened, its pages and
its templates) and how a path finds its kind (`sniff`). The registry of the kinds is `unveil.ui.kinds.KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter

from tools.errors import UnveilError
from tools.jsonl_files import iter_lines, parse_json_line
from unveil.ui.index import open_regular
from unveil.ui.sources.common import OpenOptions, PageSource


class PageKindError(UnveilError, ValueError):
    """A path that no page kind of the web app opens: gone, an unknown folder, or records of no known kind."""


@dataclass(frozen=True)
class PageKind:
    """One kind of path the web app shows. A kind claims a folder (`folder`) or a JSONL results file by its first
    record that tells (`record`); the first kind of the registry that claims a path opens it."""

    name: str  # the `kind` every template gets (the page's CSS class) and what `unveil ui` says it opened
    describes: str  # what such a path is, for the error of a path no kind claims
    home: str  # the page `/` leads to
    router: APIRouter  # the kind's pages; a page of another kind than the opened path answers 404
    open: Callable[[Path, OpenOptions], PageSource]  # the path's source, indexed once
    templates: tuple[str, ...]  # the kind's own templates in `unveil/ui/templates/`
    sample_page: str  # the address of one sample's page, `{id}` standing for its id
    folder: Callable[[Path], bool] | None = None  # claims a folder
    record: Callable[[dict[str, Any]], bool] | None = None  # claims a results file by one of its records
    reviewers: bool = False  # the folder may hold a reviewers file (people sign in to the kind's pages)
    stop: Callable[[PageSource], None] | None = None  # what the app does with the source when it stops


def sniff(path: str | Path, kinds: Sequence[PageKind]) -> PageKind:
    """The first of `kinds` that claims `path`: a folder by its contents, a file by its first record with an id
    that some kind claims (the page then indexes it once). `PageKindError` naming the path when none does."""
    p = Path(path)
    if p.is_dir():
        kind = next((k for k in kinds if k.folder is not None and k.folder(p)), None)
        if kind is None:
            expected = " or ".join(k.describes for k in kinds if k.folder is not None)
            raise PageKindError(f"{p}: a folder no page opens (expected {expected})")
        return kind
    if not p.is_file():
        raise PageKindError(f"{p}: no such file or folder")
    open_regular(p).close()  # a FIFO or a device is refused before it is read
    claims = [(k, k.record) for k in kinds if k.record is not None]
    expected = " or ".join(k.describes for k, _ in claims)
    seen = False
    for _, raw in iter_lines(p):
        try:
            rec = parse_json_line(raw) if raw is not None else None
        except ValueError:
            continue
        if not isinstance(rec, dict) or "id" not in rec:
            continue
        seen = True
        kind = next((k for k, claim in claims if claim(rec)), None)
        if kind is not None:
            return kind
    if not seen:
        raise PageKindError(f"{p}: no JSONL records with an id (expected {expected})")
    raise PageKindError(f"{p}: records of no page kind (expected {expected})")
