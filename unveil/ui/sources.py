"""What the web app shows, read from disk: a CTD dataset folder, a detection results file or an IPR results file.

Every image the app serves comes from a content-addressed store (`tools.image_store`): a record's image is shown
only when its path lies in a store folder as `ROOT/ab/<sha256>.png`, and a file is served only when its bytes hash
to its name. Anything else (a path outside the store, a renamed or edited file) is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evaluation.metrics import MTC_BIN_LABELS, MTC_BINS, mtc_bin
from graphs.ctd_labels import LabelSchema, load_schema
from graphs.ctd_review import disagreement
from graphs.ctd_rules import latest_by_reviewer
from graphs.tag_tree_check import TreeError, check_trees

# The app's only imports from the CLI layer's dataset code: repoint here if ctd_dataset/batch move.
from runner.ctd_dataset import (
    IMAGES,
    SAMPLES,
    DatasetBusyError,
    dataset_lock,
    record_problem,
    view_lines,
    write_view_texts,
)
from runner.ctd_export import export_hf
from runner.ctd_reviews import apply_reviews, default_reviewer
from tools.image_store import DEFAULT_MAX_BYTES, ImageInputError, ImageStore
from tools.jsonl_files import iter_lines, parse_json_line
from tools.reviewers import Assignment, load_assignment
from unveil.ui.agreement import judgements
from unveil.ui.index import JsonlIndex, NotARegularFileError, Problem, open_regular

Kind = Literal["ctd", "detection", "ipr"]
GUIDELINES = "guidelines.md"
GUIDELINES_MAX = 256 * 1024
STATUS_LABELS = {
    "pending_review": "pending",
    "accepted": "accepted",
    "rejected": "rejected",
    "sent_back": "sent back",
    "dropped": "dropped",
    "duplicate": "duplicate",
    "failed": "failed",
    "bad": "unreadable",
}
__all__ = [
    "Kind",
    "detect_kind",
    "ImageIndex",
    "CtdSource",
    "DetectionSource",
    "IprSource",
    "default_reviewer",
    "DatasetBusyError",
    "NotARegularFileError",
    "MTC_BINS",
    "MTC_BIN_LABELS",
    "STATUS_LABELS",
]


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
    try:
        open_regular(p).close()
    except NotARegularFileError as exc:
        raise ValueError(str(exc)) from exc
    seen = False
    for _, raw in iter_lines(p):  # the first record that says what it is decides (the page then indexes it once)
        try:
            rec = parse_json_line(raw) if raw is not None else None
        except ValueError:
            continue
        if not isinstance(rec, dict) or "id" not in rec:
            continue
        seen = True
        if any(k in rec for k in ("trajectory", "trajectories", "used_prompt")):
            return "ipr"
        if any(k in rec for k in ("mtc", "toxic", "trees")):
            return "detection"
    if not seen:
        raise ValueError(f"{p}: no JSONL records with an id (expected `unveil detect`/`refine` output)")
    raise ValueError(f"{p}: records are neither detection results (mtc/toxic) nor IPR results (trajectory)")


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

    def open_file(self, image_id: str) -> tuple[Any, int] | None:
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


def _usage_rows(usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per-role usage as rows (role, calls, cache hits, tokens, cost), the total last."""
    usage = usage or {}
    rows = [{"role": role, **(u or {})} for role, u in sorted((usage.get("by_role") or {}).items())]
    if usage.get("total"):
        rows.append({"role": "total", **usage["total"]})
    return rows


def _cost(usage: dict[str, Any] | None) -> float:
    return float(((usage or {}).get("total") or {}).get("cost_usd") or 0.0)


class ViewsWriter:
    """Rewrites a dataset's `dataset.jsonl` and `review_queue.jsonl` in a background thread after decisions (one
    rewrite covers every decision taken while it waited), from the view lines the index keeps per record, so
    neither a decision nor the rewrite re-reads the folder; `flush` finishes the pending rewrite (the app calls
    it when it stops)."""

    QUIET_S = 0.5

    def __init__(self, root: Path, index: JsonlIndex) -> None:
        self.root = root
        self.index = index
        self._cond = threading.Condition()
        self._due: float | None = None
        self._thread: threading.Thread | None = None
        self.last_error = ""

    def touch(self) -> None:
        """Ask for a rewrite once decisions pause for `QUIET_S`."""
        with self._cond:
            self._due = time.monotonic() + self.QUIET_S
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="unveil-views", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._due is not None and time.monotonic() < self._due:
                    self._cond.wait(self._due - time.monotonic())
                if self._due is None:
                    self._thread = None
                    return
                self._due = None
            self._write()

    def _write(self) -> None:
        try:
            with dataset_lock(self.root):
                rows = self.index.rows()  # read under the lock: no decision lands between reading and writing
                write_view_texts(
                    self.root,
                    "".join(r["views"][0] for r in rows if "views" in r),
                    "".join(r["views"][1] for r in rows if "views" in r),
                )
            self.last_error = ""
        except Exception as exc:  # noqa: BLE001 - kept for the page; the next decision tries again
            self.last_error = f"{type(exc).__name__}: {exc}"

    def flush(self) -> None:
        """Write now what is pending, and wait for it."""
        with self._cond:
            pending = self._due is not None
            self._due = None
            self._cond.notify_all()
        if pending:
            self._write()


def _blind(rec: dict[str, Any]) -> tuple[int, int]:
    """How many blind judges of the last round found the risk, and how many there were."""
    last = rec.get("rounds") or 0
    blind_last = [v for v in rec.get("votes") or [] if v.get("kind") == "blind" and v.get("round") == last]
    decision = rec.get("decision") or {}
    return (
        int(decision.get("blind_found", sum(1 for v in blind_last if v.get("has_risk")))),
        int(decision.get("n_blind", len(blind_last))),
    )


SEARCH_CHARS = 8000


def _ctd_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """What lists, filters, progress and search need of one sample (the card is read when it is shown)."""
    problem = record_problem(rec)
    if problem:
        raise ValueError(problem)
    found, n_blind = _blind(rec)
    review = rec.get("review") or {}
    reasons = " ".join(str(v.get("reason") or "") for v in rec.get("votes") or [])
    words = " ".join(
        str(x or "")
        for x in (
            rec.get("id"),
            rec.get("category"),
            rec.get("subcategory"),
            rec.get("text"),
            rec.get("image_description"),
            reasons,
        )
    )
    return {
        "status": rec.get("status"),
        "category": rec.get("category") or "",
        "blind_found": found,
        "n_blind": n_blind,
        "review_status": review.get("status") or "none",
        "search": words.casefold()[:SEARCH_CHARS],
        "views": view_lines(rec),
        "judgements": judgements(rec.get("review_history") or []),
        "adjudicated": bool(review.get("adjudicated")),
    }


@dataclass
class CtdSource:
    """A CTD dataset folder: its samples as review cards, and the review actions (under the review policy
    `min_reviewers` / `rule`, as `unveil review` takes them)."""

    root: Path
    images: ImageIndex = field(default_factory=ImageIndex)
    min_reviewers: int = 1
    rule: str = "unanimous"

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.images.add_root(self.root / IMAGES)
        self.index = JsonlIndex(self.root / SAMPLES, _ctd_summary)
        self.views = ViewsWriter(self.root, self.index)
        # apply_reviews imports the review rules from the graphs layer: load them now, not on the first click.
        import graphs.ctd_review  # noqa: F401

    def rows(self) -> list[dict[str, Any]]:
        """Every sample's summary (id, status, category, blind count, review status; `bad` when its record
        cannot be shown), in file order."""
        return self.index.rows()

    def problem(self, sample_id: str) -> Problem | None:
        """Why a sample's record cannot be shown, or None."""
        return self.index.problem(sample_id)

    def record(self, sample_id: str) -> dict[str, Any] | None:
        """One sample's record as a card, or None when unknown or bad (see `problem`)."""
        rec = self.index.get(sample_id)
        if rec is None or record_problem(rec):
            return None
        try:
            card = self.card(rec)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None
        twin_id = (rec.get("duplicate_of") or {}).get("of")
        if isinstance(twin_id, str) and twin_id != sample_id:
            twin = self.index.get(twin_id)
            if twin is not None and not record_problem(twin):
                card["twin"] = self.card(twin)
        return card

    def card(self, rec: dict[str, Any]) -> dict[str, Any]:
        """What the review page shows of one record."""
        votes = rec.get("votes") or []
        rounds: dict[int, list[dict[str, Any]]] = {}
        for v in votes:
            rounds.setdefault(int(v.get("round") or 0), []).append(v)
        found, n_blind = _blind(rec)
        image_id = self.images.id_of(rec.get("image"), self.root, known_id=rec.get("image_sha256"))
        return {
            **rec,
            "image_id": image_id,
            "image_refused": bool(rec.get("image")) and image_id is None,
            "vote_rounds": sorted(rounds.items()),
            "blind_found": found,
            "n_blind": n_blind,
            "cost": _cost(rec.get("usage")) or float(rec.get("cost_usd") or 0.0),
            "review": rec.get("review") or {"status": "none"},
            "undone": {h.get("undoes") for h in rec.get("review_history") or [] if h.get("decision") == "undo"},
            "judgements": judgements(rec.get("review_history") or []),
            "n_reviews": len(latest_by_reviewer((rec.get("review") or {}).get("reviews") or [])),
            "disagree": disagreement(rec),
        }

    @staticmethod
    def progress(rows: list[dict[str, Any]]) -> dict[str, int]:
        """Reviewed and total counts over the samples that entered human review."""
        reviewed = sum(1 for c in rows if c.get("review_status") in ("approved", "rejected"))
        pending = sum(1 for c in rows if c.get("status") == "pending_review")
        return {"reviewed": reviewed, "total": reviewed + pending, "pending": pending}

    @staticmethod
    def matches(
        row: dict[str, Any],
        status: str,
        category: str,
        blind: str,
        q: str = "",
        todo: str = "",
        disagree: str = "",
        assignment: Assignment | None = None,
    ) -> bool:
        """Whether a sample passes the filters (empty filter = any; a bad record matches its status or
        'bad'). `q` finds words in the id, category, text, image description and the judges' reasons (every
        word must occur, case-insensitive); `todo` keeps the samples that reviewer has not judged (and, with an
        `assignment` naming them, only those assigned to them); `disagree` keeps the samples where reviewers
        disagree that no adjudicator settled."""
        judged = row.get("judgements") or {}
        if todo and todo in judged:
            return False
        if todo and assignment is not None and todo in assignment.reviewers and todo not in assignment.of(row["id"]):
            return False
        if disagree and (len(set(judged.values())) < 2 or row.get("adjudicated")):
            return False
        if q and not all(w in row.get("search", "") for w in q.casefold().split()):
            return False
        if status == "bad":
            return bool(row.get("bad"))
        if status and row.get("status") != status:
            return False
        if category and (row.get("category") or "") != category:
            return False
        return not (blind != "" and str(row.get("blind_found")) != blind)

    def assignment(self) -> Assignment | None:
        """The folder's assignment of samples to reviewers (`unveil reviewers assign`), read now, or None."""
        return load_assignment(self.root)

    def guidelines(self) -> str:
        """The folder's `guidelines.md` as text (shown beside the sample, escaped like every text), or ""; a
        link, a FIFO or a device in its place is refused, and the text is cut at `GUIDELINES_MAX` bytes."""
        path = self.root / GUIDELINES
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return ""
            return fh.read(GUIDELINES_MAX).decode("utf-8", "replace")

    def _apply(
        self,
        decisions: dict[str, dict[str, Any]],
        actor: tuple[str, str],
        appended: list[tuple[str, int]] | None = None,
    ) -> dict[str, int]:
        """Apply decisions as `actor` (name, role) with `unveil review`'s semantics (locked, appended, reviewer
        and time kept); records are read through the index and the views follow in the background."""
        counts = apply_reviews(
            self.root,
            decisions,
            reviewer=actor[0],
            role=actor[1],
            records=self.index.mapping,
            views=False,
            min_reviewers=self.min_reviewers,
            rule=self.rule,
            appended=appended,
        )
        self.views.touch()
        return counts

    def decide(
        self,
        sample_id: str,
        decision: str,
        note: str,
        actor: tuple[str, str],
        appended: list[tuple[str, int]] | None = None,
        labels: dict[str, Any] | None = None,
    ) -> dict[str, int]:
        """Apply one decision as `actor` with its labels (a corrected `category`, `ratings`: checked against the
        folder's label schema); `appended` receives the history entry it added."""
        return self._apply({sample_id: {"decision": decision, "note": note, **(labels or {})}}, actor, appended)

    def label_schema(self) -> LabelSchema | None:
        """The folder's label schema (`labels.json`), read now, or None."""
        return load_schema(self.root)

    def decide_many(self, sample_ids: list[str], decision: str, note: str, actor: tuple[str, str]) -> dict[str, int]:
        """One decision for several samples, applied together (one lock, one append)."""
        return self._apply({sid: {"decision": decision, "note": note} for sid in sample_ids}, actor)

    def undo(
        self, sample_id: str, k: int, actor: tuple[str, str], appended: list[tuple[str, int]] | None = None
    ) -> dict[str, int]:
        """Take back entry `k` of a sample's review history as `actor` (the undo is appended, as every decision)."""
        return self._apply({sample_id: {"decision": "undo", "undoes": k}}, actor, appended)

    def export(self) -> Path:
        """Write the Parquet export of the usable samples."""
        self.views.flush()
        return export_hf(self.root)


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
        "category": str(finding.get("category") or rec.get("category") or ""),
        "label": rec.get("label"),
        "cost": _cost(usage),
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
            "usage_rows": _usage_rows(rec.get("usage")),
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


def _ipr_summary(rec: dict[str, Any]) -> dict[str, Any]:
    """Why each run of a record stopped (one for `unveil refine`, one per seed for `unveil evaluate ipr`)."""
    stops = [rec.get("stop_reason"), *(tr.get("stop_reason") for tr in rec.get("trajectories") or [])]
    return {"stops": sorted({s for s in stops if isinstance(s, str) and s})}


@dataclass
class IprSource:
    """An IPR results file (`unveil refine --output` or `unveil evaluate ipr` output)."""

    path: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def __post_init__(self) -> None:
        self.index = JsonlIndex(self.path, _ipr_summary)

    def rows(self) -> list[dict[str, Any]]:
        """Every record's summary (id, stop reason), in file order."""
        return self.index.rows()

    def learn_roots(self) -> None:
        """Learn the run's store folders from the first records' image paths (before any image is asked for)."""
        for row in self.rows()[:50]:
            self.prompt(row["id"])

    def prompt(self, sample_id: str) -> dict[str, Any] | None:
        """One record as runs of steps (store images only, scalar scores): one run for `unveil refine`, one per
        seed for `unveil evaluate ipr`, and one step per image for its plain/rewriter baselines; None when
        unknown or unreadable."""
        rec = self.index.get(sample_id)
        if rec is None or self.index.problem(sample_id):
            return None
        try:
            return self._view(rec)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None

    def _view(self, rec: dict[str, Any]) -> dict[str, Any]:
        if "trajectory" in rec:
            runs = [
                {
                    "label": "",
                    "steps": [self._refine_step(st) for st in rec.get("trajectory") or []],
                    "keep_step": rec.get("keep_step"),
                }
            ]
        elif "trajectories" in rec:
            runs = [self._eval_run(tr) for tr in rec.get("trajectories") or []]
        else:
            runs = [
                {
                    "label": "images",
                    "keep_step": None,
                    "steps": [
                        {
                            "step": f"seed {im.get('seed')}",
                            "prompt": rec.get("used_prompt") or rec.get("prompt"),
                            "shown": [self.images.valid_id(im.get("image_id"))],
                            "score_rows": [_scalars(im)],
                        }
                        for im in rec.get("images") or []
                    ],
                }
            ]
        return {**rec, "runs": runs, "cost": _cost(rec.get("usage"))}

    def _refine_step(self, step: dict[str, Any]) -> dict[str, Any]:
        ids = step.get("image_ids") or []
        paths = step.get("image_paths") or []
        shown = [
            self.images.id_of(p, Path(self.path).parent, known_id=ids[k] if k < len(ids) else None, learn_root=True)
            for k, p in enumerate(paths)
        ]
        return {**step, "shown": shown, "score_rows": [_scalars(sc) for sc in step.get("scores") or []]}

    def _eval_run(self, tr: dict[str, Any]) -> dict[str, Any]:
        if "keep_step" in tr or "stop_reason" in tr:
            return self._eval_run_steps(tr)
        # Run files of older versions: `kept_at`, and each step's action says how its prompt came about.
        steps = tr.get("steps") or []
        kept = tr.get("kept_at")
        view = []
        for k, st in enumerate(steps):
            # A step's action is how its prompt came about; the refiner's keep applies to the last image.
            action = "keep" if kept is not None and k == len(steps) - 1 else ("refine" if k < len(steps) - 1 else None)
            view.append(
                {
                    "step": st.get("t", k),
                    "prompt": st.get("prompt"),
                    "action": action,
                    "reason": steps[k + 1].get("reason") if k + 1 < len(steps) else "",
                    "shown": [self.images.valid_id(st.get("image_id"))],
                    "score_rows": [
                        _scalars(
                            {x: v for x, v in st.items() if x not in ("t", "prompt", "action", "reason", "image_id")}
                        )
                    ],
                }
            )
        return {
            "label": f"seed {tr.get('seed')}",
            "steps": view,
            "keep_step": view[-1]["step"] if kept is not None and view else None,
        }

    def _eval_run_steps(self, tr: dict[str, Any]) -> dict[str, Any]:
        """One trajectory of an `unveil evaluate ipr` run file as `unveil refine` shows one: each step with the
        refiner's action and reason on its image, the kept step, and why the run stopped."""
        hidden = ("t", "prompt", "action", "reason", "image_id", "seed", "error")
        view = [
            {
                "step": st.get("t", k),
                "prompt": st.get("prompt"),
                "action": st.get("action"),
                "reason": st.get("reason") or "",
                "error": st.get("error"),
                "shown": [self.images.valid_id(st.get("image_id"))],
                "score_rows": [_scalars({x: v for x, v in st.items() if x not in hidden})],
            }
            for k, st in enumerate(tr.get("steps") or [])
        ]
        stop = tr.get("stop_reason")
        return {
            "label": f"seed {tr.get('seed')}",
            "steps": view,
            "keep_step": tr.get("keep_step"),
            "stop_reason": stop if isinstance(stop, str) else "",
        }


def _scalars(scores: dict[str, Any] | None) -> dict[str, Any]:
    """The scalar entries of a score dict (lists such as NudeNet labels are left out of the table)."""
    return {k: v for k, v in (scores or {}).items() if isinstance(v, (int, float, bool, str)) and k != "image_id"}
