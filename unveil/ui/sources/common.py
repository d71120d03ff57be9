"""What every page kind's source shares: the store folders images are served from, the usage helpers, the options
a source is opened with and the shape the app expects of a source (`PageSource`).

Every image the app serves comes from a content-addressed store (`tools.image_store`): a record's image is shown
only when its path lies in a store folder as `ROOT/ab/<sha256>.png`, and a file is served only when its bytes hash
to its name. Anything else (a path outside the store, a renamed or edited file) is refused.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import Any, Protocol

from tools.image_store import DEFAULT_MAX_BYTES, ImageInputError, ImageStore, default_store_root
from unveil.ui.index import JsonlIndex, NotARegularFileError, open_regular


class ImageIndex:
    """The store folders a page may serve images from, and the check that a file belongs to one."""

    def __init__(self) -> None:
        self.roots: list[Path] = []
        self._verified: dict[str, tuple[int, int, int, int]] = {}
        self._lock = threading.Lock()

    def add_root(self, root: str | os.PathLike[str]) -> None:
        """Allow one more store folder."""
        r = Path(root).resolve()
        if r not in self.roots:
            self.roots.append(r)

    def id_of(
        self, path: str | None, base: Path, *, known_id: str | None = None, learn_root: bool = False
    ) -> str | None:
        """The image id of a record's image path when it is a file of the form `ROOT/ab/<sha>.png` inside an
        allowed store (or, with `learn_root`, inside whatever store it names: results files of `detect`/`refine`
        point at the run's store); None when it is not."""
        if not path:
            return None
        p = Path(path)
        p = (p if p.is_absolute() else base / p).resolve()
        sha = p.stem
        if p.suffix != ".png" or p.parent.name != sha[:2] or (known_id and known_id != sha):
            return None
        try:
            ImageStore(p.parent.parent).path_for(sha)  # validates the digest
        except ImageInputError:
            return None
        root = p.parent.parent
        if learn_root and p.is_file():
            self.add_root(root)
        return sha if root in self.roots else None

    @staticmethod
    def valid_id(image_id: object) -> str | None:
        """An image id given without a path (`unveil evaluate ipr` records), if it is a SHA-256 digest; it is
        served only if an allowed store holds it."""
        if not isinstance(image_id, str):
            return None
        try:
            ImageStore(".").path_for(image_id)
        except ImageInputError:
            return None
        return image_id

    def open_file(self, image_id: str) -> tuple[BufferedReader, int] | None:
        """The open stored file of an id and its size, if some allowed store holds it as a regular file under
        the image size cap and its bytes hash to the id (hashed in chunks, again whenever the file changed); the
        caller closes it. A FIFO, a device, a folder or an oversized file is never read."""
        for root in self.roots:
            try:
                path = ImageStore(root).path_for(image_id)
            except ImageInputError:
                return None
            try:
                fh = open_regular(path)
            except NotARegularFileError:
                continue
            st = os.fstat(fh.fileno())
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            with self._lock:
                known = self._verified.get(image_id) == key
            if not known and st.st_size <= DEFAULT_MAX_BYTES:
                digest = hashlib.sha256()
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
                if digest.hexdigest() == image_id:
                    with self._lock:
                        self._verified[image_id] = key
                    known = True
                fh.seek(0)
            if known:
                return fh, st.st_size
            fh.close()
        return None


@dataclass(frozen=True)
class OpenOptions:
    """What `unveil ui` says about how to open a path: the run's store for results files whose records name images
    by id only, and the review policy a dataset folder is opened under (None: the folder's stored one, see
    `tools.review_policy`)."""

    image_store: str | Path | None = None
    min_reviewers: int | None = None
    review_rule: str | None = None

    def store_root(self) -> Path:
        """The store a results file's images are looked up in (default: `$UNVEIL_IMAGE_STORE` or the user's)."""
        return Path(self.image_store) if self.image_store else default_store_root()


class PageSource(Protocol):
    """What the app needs of every opened source: its line index (rows, one record, problems) and its images."""

    index: JsonlIndex
    images: ImageIndex

    def rows(self) -> list[dict[str, Any]]:
        """Every record's summary, in file order."""
        ...


def usage_rows(usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per-role usage as rows (role, calls, cache hits, tokens, cost), the total last."""
    usage = usage or {}
    rows = [{"role": role, **(u or {})} for role, u in sorted((usage.get("by_role") or {}).items())]
    if usage.get("total"):
        rows.append({"role": "total", **usage["total"]})
    return rows


def usage_cost(usage: dict[str, Any] | None) -> float:
    """The total cost in USD of a record's usage (0 when none is recorded)."""
    return float(((usage or {}).get("total") or {}).get("cost_usd") or 0.0)
