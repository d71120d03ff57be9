"""The source of the detection page kind: a TAG detection results file (`unveil detect --output` or `unveil
evaluate detection` output), as a filtered table and one result with its trees."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.metrics import MTC_BIN_LABELS, MTC_BINS, mtc_bin
from graphs.tag.tree_check import TreeError, check_trees
from unveil.ui.index import JsonlIndex
from unveil.ui.sources.common import ImageIndex, OpenOptions, usage_cost, usage_rows

RECORD_KEYS = ("mtc", "toxic", "trees")  # a record with one of these is a detection result
__all__ = ["DetectionSource", "MTC_BINS", "MTC_BIN_LABELS", "is_detection_record", "open_detection"]


def is_detection_record(rec: dict[str, Any]) -> bool:
    """Whether a results file's record is a detection result (it carries `mtc`, `toxic` or `trees`)."""
    return any(k in rec for k in RECORD_KEYS)


def _method_category(rec: dict[str, Any], finding: dict[str, Any]) -> str:
    """The category the method named: TAG's finding's, else a batch record's `predicted_category` (a batch record
    keeps its input's ground truth in `category`: `runner.detect.with_ground_truth`, the evaluation's run files),
    else the `category` of a record without one (a single pair's, an older output's)."""
    own = rec.get("predicted_category") if "predicted_category" in rec else rec.get("category")
    return str(finding.get("category") or own or "")


def _detection_row(rec: dict[str, Any]) -> dict[str, Any]:
    """One detection result's table row (its image is looked up when the row is shown)."""
    mtc = rec.get("mtc")
    finding = rec.get("finding") or {}
    usage = rec.get("usage") or {}
    verdict = "failed" if rec.get("status") == "failed" else ("toxic" if rec.get("toxic") else "not toxic")
    value = float(mtc) if isinstance(mtc, (int, float)) and not isinstance(mtc, bool) and 0 <= mtc <= 1 else None
    return {
        "verdict": verdict,
        "mtc": value,
        "bin": mtc_bin(value) if value is not None else "",
        "category": _method_category(rec, finding),
        "label": rec.get("label"),
        "cost": usage_cost(usage),
        "calls": int((usage.get("total") or {}).get("calls", 0)),
        "error": rec.get("error"),
        "image_path": rec.get("image_path"),
        "image_sha": rec.get("image_id"),
        "finding": (
            f"{(finding.get('visual') or {}).get('concept', '')} ↔ {(finding.get('textual') or {}).get('concept', '')}"
        )
        if finding
        else "",
    }


@dataclass
class DetectionSource:
    """A detection results file (`unveil detect --output` or `unveil evaluate detection` output)."""

    path: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def __post_init__(self) -> None:
        self.index = JsonlIndex(self.path, self._row)
        self._roots_seen: set[str] = set()

    def _row(self, rec: dict[str, Any]) -> dict[str, Any]:
        row = _detection_row(rec)
        path = row["image_path"]
        if isinstance(path, str) and path:
            # Learn each store folder the results point at once, from its first image (not one check per row).
            root = str(Path(path).parent.parent)
            if root not in self._roots_seen:
                self._roots_seen.add(root)
                self.images.id_of(path, Path(self.path).parent, known_id=row["image_sha"], learn_root=True)
        return row

    def rows(self) -> list[dict[str, Any]]:
        """One row per record: verdict, MTC and its bin, category, label, cost (`bad` when unreadable)."""
        return self.index.rows()

    def image_of(self, row: dict[str, Any]) -> str | None:
        """The image id of a row, when its image is in an allowed store."""
        path = row.get("image_path")
        return (
            self.images.id_of(path, Path(self.path).parent, known_id=row.get("image_sha"))
            if isinstance(path, str)
            else None
        )

    def record(self, sample_id: str) -> dict[str, Any] | None:
        """One record with its trees, the toxic path's node ids, and its image id, or None."""
        rec = self.index.get(sample_id)
        if rec is None or self.index.problem(sample_id):
            return None
        try:
            return self._view(rec)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None

    def _view(self, rec: dict[str, Any]) -> dict[str, Any]:
        trees = rec.get("trees") or {"visual": rec.get("visual") or [], "textual": rec.get("textual") or []}
        try:
            check_trees(rec)
        except TreeError as exc:  # a parent cycle would spin the walk below for ever: show the record as bad
            rec, trees = {**rec, "error": str(exc), "tree_error": str(exc)}, {}
        finding = rec.get("finding") or None
        on_path: set[str] = set()
        for side in ("visual", "textual"):
            nodes = {n["id"]: n for n in trees.get(side) or []}
            node_id = ((finding or {}).get(side) or {}).get("id")
            while node_id is not None and node_id in nodes and f"{side}:{node_id}" not in on_path:
                on_path.add(f"{side}:{node_id}")
                node_id = nodes[node_id].get("parent")
        path = rec.get("image_path")
        image_id = (
            self.images.id_of(path, Path(self.path).parent, known_id=rec.get("image_id"), learn_root=True)
            if isinstance(path, str)
            else None
        )
        views = {side: _tree(trees.get(side) or [], side, on_path) for side in ("visual", "textual")}

        def text(key: str) -> str | None:
            value = rec.get(key)
            return value if isinstance(value, str) else None

        image = next((v for v in (text("image_id"), text("image"), text("image_path")) if v), None)
        return {
            **rec,
            "trees_view": views,
            "input": {"text": text("text"), "image_description": text("image_description"), "image": image},
            "image_view": image_id,
            "usage_rows": usage_rows(rec.get("usage")),
            "models_json": json.dumps(rec.get("models") or {}, indent=1, ensure_ascii=False),
        }


def _tree(nodes: list[dict[str, Any]], side: str, on_path: set[str]) -> list[dict[str, Any]]:
    """Nodes in depth-first order with their depth, for an indented list (the toxic path flagged); a node is
    shown once even where parents form a cycle."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    for n in nodes:
        children.setdefault(n.get("parent"), []).append(n)
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()

    def walk(parent: str | None, depth: int) -> None:
        for n in children.get(parent, []):
            if n["id"] in seen:
                continue
            seen.add(n["id"])
            out.append({**n, "depth": depth, "on_path": f"{side}:{n['id']}" in on_path})
            walk(n["id"], depth + 1)

    walk(None, 0)
    return out


def open_detection(path: Path, options: OpenOptions) -> DetectionSource:
    """The results file at `path`, indexed now (so the run's store folders are known before any image is asked
    for), its images looked up in the run's store too."""
    source = DetectionSource(path)
    source.images.add_root(options.store_root())
    source.rows()
    return source
