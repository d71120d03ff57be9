"""What the web app shows, read from disk: a CTD dataset folder, a detection results file or an IPR results file.

Every image the app serves comes from a content-addressed store (`tools.image_store`): a record's image is shown
only when its path lies in a store folder as `ROOT/ab/<sha256>.png`, and a file is served only when its bytes hash
to its name. Anything else (a path outside the store, a renamed or edited file) is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evaluation.metrics import MTC_BIN_LABELS, MTC_BINS, mtc_bin
from graphs.tag_tree_check import TreeError, check_trees

# The app's only imports from the CLI layer's dataset code: repoint here if ctd_dataset/batch move.
from runner.batch import done_records
from runner.ctd_dataset import (
    IMAGES,
    SAMPLES,
    DatasetBusyError,
    apply_reviews,
    default_reviewer,
    export_hf,
    load_samples,
)
from tools.image_store import ImageInputError, ImageStore

Kind = Literal["ctd", "detection", "ipr"]
STATUS_LABELS = {"pending_review": "pending", "accepted": "accepted", "rejected": "rejected", "dropped": "dropped",
                 "duplicate": "duplicate", "failed": "failed"}
__all__ = ["Kind", "detect_kind", "ImageIndex", "CtdSource", "DetectionSource", "IprSource", "default_reviewer",
           "DatasetBusyError", "MTC_BINS", "MTC_BIN_LABELS", "STATUS_LABELS"]


def detect_kind(path: str | os.PathLike[str]) -> Kind:
    """Which page a path opens: a folder with `samples.jsonl` is a CTD dataset; a JSONL whose records carry a
    `trajectory` (`unveil refine`) or `trajectories` / `used_prompt` (`unveil evaluate ipr`) is IPR output, one
    whose records carry `mtc`, `toxic` or `trees` is detection output."""
    p = Path(path)
    if p.is_dir():
        if (p / SAMPLES).is_file():
            return "ctd"
        raise ValueError(f"{p}: a folder without {SAMPLES} (not a dataset folder written by `unveil generate`)")
    if not p.is_file():
        raise ValueError(f"{p}: no such file or folder")
    records = list(done_records(p).values())
    if not records:
        raise ValueError(f"{p}: no JSONL records with an id (expected `unveil detect`/`refine` output)")
    if any("trajectory" in r or "trajectories" in r or "used_prompt" in r for r in records):
        return "ipr"
    if any(k in r for r in records for k in ("mtc", "toxic", "trees")):
        return "detection"
    raise ValueError(f"{p}: records are neither detection results (mtc/toxic) nor IPR results (trajectory)")


class ImageIndex:
    """The store folders a page may serve images from, and the check that a file belongs to one."""

    def __init__(self) -> None:
        self.roots: list[Path] = []
        self._verified: dict[str, tuple[Path, int, int]] = {}
        self._lock = threading.Lock()

    def add_root(self, root: str | os.PathLike[str]) -> None:
        """Allow one more store folder."""
        r = Path(root).resolve()
        if r not in self.roots:
            self.roots.append(r)

    def id_of(self, path: str | None, base: Path, *, known_id: str | None = None,
              learn_root: bool = False) -> str | None:
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
    def valid_id(image_id: Any) -> str | None:
        """An image id given without a path (`unveil evaluate ipr` records), if it is a SHA-256 digest; it is
        served only if an allowed store holds it."""
        if not isinstance(image_id, str):
            return None
        try:
            ImageStore(".").path_for(image_id)
        except ImageInputError:
            return None
        return image_id

    def file_for(self, image_id: str) -> Path | None:
        """The stored file of an id, if some allowed store holds it and its bytes hash to the id (re-hashed
        whenever the file's size or modification time changed)."""
        for root in self.roots:
            try:
                path = ImageStore(root).path_for(image_id)
                st = path.stat()
            except ImageInputError:
                return None
            except OSError:
                continue
            with self._lock:
                if self._verified.get(image_id) == (path, st.st_mtime_ns, st.st_size):
                    return path
            if hashlib.sha256(path.read_bytes()).hexdigest() == image_id:
                with self._lock:
                    self._verified[image_id] = (path, st.st_mtime_ns, st.st_size)
                return path
        return None


def _usage_rows(usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per-role usage as rows (role, calls, cache hits, tokens, cost), the total last."""
    usage = usage or {}
    rows = [{"role": role, **(u or {})} for role, u in sorted((usage.get("by_role") or {}).items())]
    if usage.get("total"):
        rows.append({"role": "total", **usage["total"]})
    return rows


def _cost(usage: dict[str, Any] | None) -> float:
    return float(((usage or {}).get("total") or {}).get("cost_usd") or 0.0)


@dataclass
class CtdSource:
    """A CTD dataset folder: its samples as review cards, and the review actions."""

    root: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.images.add_root(self.root / IMAGES)

    def cards(self) -> list[dict[str, Any]]:
        """Every sample of `samples.jsonl` as a card, in file order."""
        return [self.card(rec) for rec in load_samples(self.root).values()]

    def card(self, rec: dict[str, Any]) -> dict[str, Any]:
        """What the review page shows of one record."""
        last = rec.get("rounds") or 0
        votes = rec.get("votes") or []
        rounds: dict[int, list[dict[str, Any]]] = {}
        for v in votes:
            rounds.setdefault(int(v.get("round") or 0), []).append(v)
        blind_last = [v for v in votes if v.get("kind") == "blind" and v.get("round") == last]
        decision = rec.get("decision") or {}
        image_id = self.images.id_of(rec.get("image"), self.root, known_id=rec.get("image_sha256"))
        return {
            **rec,
            "image_id": image_id,
            "image_refused": bool(rec.get("image")) and image_id is None,
            "vote_rounds": sorted(rounds.items()),
            "blind_found": int(decision.get("blind_found", sum(1 for v in blind_last if v.get("has_risk")))),
            "n_blind": int(decision.get("n_blind", len(blind_last))),
            "cost": _cost(rec.get("usage")) or float(rec.get("cost_usd") or 0.0),
            "review": rec.get("review") or {"status": "none"},
        }

    @staticmethod
    def progress(cards: list[dict[str, Any]]) -> dict[str, int]:
        """Reviewed and total counts over the samples that entered human review."""
        reviewed = sum(1 for c in cards if c["review"].get("status") in ("approved", "rejected"))
        pending = sum(1 for c in cards if c.get("status") == "pending_review")
        return {"reviewed": reviewed, "total": reviewed + pending, "pending": pending}

    @staticmethod
    def matches(card: dict[str, Any], status: str, category: str, blind: str) -> bool:
        """Whether a card passes the filters (empty filter = any)."""
        if status and card.get("status") != status:
            return False
        if category and (card.get("category") or "") != category:
            return False
        return not (blind != "" and str(card["blind_found"]) != blind)

    def decide(self, sample_id: str, decision: str, note: str, reviewer: str) -> dict[str, int]:
        """Apply one decision with `unveil review`'s semantics (locked, appended, reviewer and time kept)."""
        return apply_reviews(self.root, {sample_id: {"decision": decision, "note": note, "reviewer": reviewer}})

    def export(self) -> Path:
        """Write the Parquet export of the usable samples."""
        return export_hf(self.root)


def _records(path: Path) -> list[dict[str, Any]]:
    return list(done_records(path).values())


@dataclass
class DetectionSource:
    """A detection results file (`unveil detect --output` or `unveil evaluate detection` output)."""

    path: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def rows(self) -> list[dict[str, Any]]:
        """One row per record: verdict, MTC and its bin, category, label, cost."""
        out = []
        for rec in _records(Path(self.path)):
            mtc = rec.get("mtc")
            image_id = self.images.id_of(rec.get("image_path"), Path(self.path).parent, known_id=rec.get("image_id"),
                                         learn_root=True)
            finding = rec.get("finding") or {}
            if rec.get("status") == "failed":
                verdict = "failed"
            else:
                verdict = "toxic" if rec.get("toxic") else "not toxic"
            out.append({
                "id": rec["id"], "verdict": verdict, "mtc": mtc,
                "bin": mtc_bin(mtc) if isinstance(mtc, (int, float)) and 0 <= mtc <= 1 else "",
                "category": finding.get("category") or rec.get("category") or "", "label": rec.get("label"),
                "cost": _cost(rec.get("usage")),
                "calls": int(((rec.get("usage") or {}).get("total") or {}).get("calls", 0)),
                "error": rec.get("error"), "image_id": image_id,
                "finding": (f"{(finding.get('visual') or {}).get('concept', '')} ↔ "
                            f"{(finding.get('textual') or {}).get('concept', '')}") if finding else "",
            })
        return out

    def record(self, sample_id: str) -> dict[str, Any] | None:
        """One record with its trees, the toxic path's node ids, and its image id, or None."""
        rec = done_records(Path(self.path)).get(sample_id)
        if rec is None:
            return None
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
            while node_id is not None and node_id in nodes:
                on_path.add(f"{side}:{node_id}")
                node_id = nodes[node_id].get("parent")
        image_id = self.images.id_of(rec.get("image_path"), Path(self.path).parent, known_id=rec.get("image_id"),
                                     learn_root=True)
        views = {side: _tree(trees.get(side) or [], side, on_path) for side in ("visual", "textual")}
        return {**rec, "trees_view": views,
                "image_view": image_id, "usage_rows": _usage_rows(rec.get("usage")),
                "models_json": json.dumps(rec.get("models") or {}, indent=1, ensure_ascii=False)}


def _tree(nodes: list[dict[str, Any]], side: str, on_path: set[str]) -> list[dict[str, Any]]:
    """Nodes in depth-first order with their depth, for an indented list (the toxic path flagged)."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    for n in nodes:
        children.setdefault(n.get("parent"), []).append(n)
    out: list[dict[str, Any]] = []

    def walk(parent: str | None, depth: int) -> None:
        for n in children.get(parent, []):
            out.append({**n, "depth": depth, "on_path": f"{side}:{n['id']}" in on_path})
            walk(n["id"], depth + 1)

    walk(None, 0)
    return out


@dataclass
class IprSource:
    """An IPR results file (`unveil refine --output` or `unveil evaluate ipr` output)."""

    path: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def prompts(self) -> list[dict[str, Any]]:
        """Every record as runs of steps (store images only, scalar scores): one run for `unveil refine`, one per
        seed for `unveil evaluate ipr`, and one step per image for its plain/rewriter baselines."""
        out = []
        for rec in _records(Path(self.path)):
            if "trajectory" in rec:
                runs = [{"label": "", "steps": [self._refine_step(st) for st in rec.get("trajectory") or []],
                         "keep_step": rec.get("keep_step")}]
            elif "trajectories" in rec:
                runs = [self._eval_run(tr) for tr in rec.get("trajectories") or []]
            else:
                runs = [{"label": "images", "keep_step": None, "steps": [
                    {"step": f"seed {im.get('seed')}", "prompt": rec.get("used_prompt") or rec.get("prompt"),
                     "shown": [self.images.valid_id(im.get("image_id"))], "score_rows": [_scalars(im)]}
                    for im in rec.get("images") or []]}]
            out.append({**rec, "runs": runs, "cost": _cost(rec.get("usage"))})
        return out

    def _refine_step(self, step: dict[str, Any]) -> dict[str, Any]:
        ids = step.get("image_ids") or []
        paths = step.get("image_paths") or []
        shown = [self.images.id_of(p, Path(self.path).parent, known_id=ids[k] if k < len(ids) else None,
                                   learn_root=True) for k, p in enumerate(paths)]
        return {**step, "shown": shown, "score_rows": [_scalars(sc) for sc in step.get("scores") or []]}

    def _eval_run(self, tr: dict[str, Any]) -> dict[str, Any]:
        steps = tr.get("steps") or []
        kept = tr.get("kept_at")
        view = []
        for k, st in enumerate(steps):
            # A step's action is how its prompt came about; the refiner's keep applies to the last image.
            action = "keep" if kept is not None and k == len(steps) - 1 else ("refine" if k < len(steps) - 1 else None)
            view.append({"step": st.get("t", k), "prompt": st.get("prompt"), "action": action,
                         "reason": steps[k + 1].get("reason") if k + 1 < len(steps) else "",
                         "shown": [self.images.valid_id(st.get("image_id"))],
                         "score_rows": [_scalars({x: v for x, v in st.items() if x not in ("t", "prompt", "action",
                                                                                             "reason", "image_id")})]})
        return {"label": f"seed {tr.get('seed')}", "steps": view,
                "keep_step": view[-1]["step"] if kept is not None and view else None}


def _scalars(scores: dict[str, Any] | None) -> dict[str, Any]:
    """The scalar entries of a score dict (lists such as NudeNet labels are left out of the table)."""
    return {k: v for k, v in (scores or {}).items() if isinstance(v, (int, float, bool, str)) and k != "image_id"}
