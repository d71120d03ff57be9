"""The source of the CTD page kind: a dataset folder written by `unveil generate`, its samples as review cards,
and the review actions (`unveil review`'s, under the folder's lock)."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.categories import CATEGORIES, normalize_category
from graphs.ctd.labels import LabelSchema, load_schema
from graphs.ctd.review import attempt_start, disagreement
from graphs.ctd.rules import latest_by_reviewer

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
from tools.review_policy import FolderPolicy, load_policy, record_policy, resolve_policy
from tools.reviewers import Assignment, load_assignment, load_reviewers, require_reviewers_file, reviewers_path
from unveil.ui.agreement import adjudicators, attempt_judgements, decision_seconds, judgements
from unveil.ui.index import JsonlIndex, Problem
from unveil.ui.sources.common import ImageIndex, OpenOptions, PageSource, usage_cost

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
    "CtdSource",
    "DatasetBusyError",
    "STATUS_LABELS",
    "default_reviewer",
    "flush_views",
    "is_dataset_folder",
    "open_ctd",
]


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


def judges_category(rec: dict[str, Any]) -> str:
    """The category the judges of the sample's last round named most often (of those who found the risk), as the
    suggestion the category correction is pre-filled with; the sample's own category when no judge named one of
    the vocabulary."""
    last = rec.get("rounds") or 0
    named = Counter(
        normalize_category(str(v["category"]))
        for v in rec.get("votes") or []
        if v.get("round") == last and v.get("has_risk") and v.get("category")
    )
    found = [c for c, _ in named.most_common() if c in CATEGORIES]
    return found[0] if found else str(rec.get("category") or "")


def comments(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The comments on a sample: its `note` entries (a note decides nothing) not undone, oldest first, each with
    its reviewer, time, text and history position."""
    history = rec.get("review_history") or []
    undone = {h.get("undoes") for h in history if h.get("decision") == "undo"}
    return [
        {"k": k, "reviewer": h.get("reviewer") or "?", "time": h.get("time") or "", "text": h.get("note") or ""}
        for k, h in enumerate(history)
        if h.get("decision") == "note" and k not in undone and h.get("note")
    ]


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
        "judgements": judgements(rec.get("review_history") or [], attempt_start(rec)),
        "attempts": attempt_judgements(rec),
        "adjudicators": adjudicators(rec.get("review_history") or []),
        "adjudicated": bool(review.get("adjudicated")),
        "timings": decision_seconds(rec.get("review_history") or []),
    }


@dataclass
class CtdSource:
    """A CTD dataset folder: its samples as review cards, and the review actions (under the folder's review
    policy, `tools.review_policy`, as `unveil review` and Studio read it)."""

    root: Path
    images: ImageIndex = field(default_factory=ImageIndex)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.images.add_root(self.root / IMAGES)
        self.index = JsonlIndex(self.root / SAMPLES, _ctd_summary)
        self.views = ViewsWriter(self.root, self.index)
        # apply_reviews imports the review rules from the graphs layer: load them now, not on the first click.
        import graphs.ctd.review  # noqa: F401

    def policy(self) -> FolderPolicy:
        """The folder's review policy, read now (`unveil reviewers policy` may change it while the app runs)."""
        return load_policy(self.root)

    @property
    def min_reviewers(self) -> int:
        """Reviewers needed per sample, by the folder's policy."""
        return self.policy().min_reviewers

    @property
    def rule(self) -> str:
        """How the reviewers' judgements combine, by the folder's policy."""
        return self.policy().rule

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
            "cost": usage_cost(rec.get("usage")) or float(rec.get("cost_usd") or 0.0),
            "review": rec.get("review") or {"status": "none"},
            "undone": {h.get("undoes") for h in rec.get("review_history") or [] if h.get("decision") == "undo"},
            "judgements": judgements(rec.get("review_history") or [], attempt_start(rec)),
            "n_reviews": len(latest_by_reviewer((rec.get("review") or {}).get("reviews") or [])),
            "disagree": disagreement(rec),
            "judges_category": judges_category(rec),
            "comments": comments(rec),
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
        others: str = "",
        assignment: Assignment | None = None,
    ) -> bool:
        """Whether a sample passes the filters (empty filter = any; a bad record matches its status or
        'bad'). `q` finds words in the id, category, text, image description and the judges' reasons (every
        word must occur, case-insensitive); `todo` keeps the samples that reviewer has not judged (and, with an
        `assignment` naming them, only those assigned to them, unless `others` asks for the samples assigned to
        others too); `disagree` keeps the samples where reviewers
        disagree that no adjudicator settled."""
        judged = row.get("judgements") or {}
        if todo and todo in judged:
            return False
        assigned = assignment.of(row["id"]) if todo and not others and assignment is not None else None
        if assigned is not None and assignment is not None and todo in assignment.reviewers and todo not in assigned:
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
        """The folder's `guidelines.md` as text (shown beside the sample as a safe subset of Markdown, every other
        character escaped: `unveil.ui.markdown`), or ""; a
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
            appended=appended,  # the policy: the folder's own, as apply_reviews reads it
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
        shown: str | None = None,
    ) -> dict[str, int]:
        """Apply one decision as `actor` with its labels (a corrected `category`, `ratings`: checked against the
        folder's label schema) and the time the sample was shown to them (`shown`, kept with a judgement);
        `appended` receives the history entry it added."""
        answer = {"decision": decision, "note": note, **(labels or {}), **({"shown": shown} if shown else {})}
        return self._apply({sample_id: answer}, actor, appended)

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


def is_dataset_folder(path: Path) -> bool:
    """Whether a folder is a CTD dataset folder (it holds `samples.jsonl`)."""
    return (path / SAMPLES).is_file()


def open_ctd(path: Path, options: OpenOptions) -> CtdSource:
    """The dataset folder at `path`, indexed now, under its review policy: the values `options` asks for are
    checked against the folder's stored ones (another is a `ReviewPolicyError` naming them) and stored where the
    folder has none; a rule of two reviewers or more needs the folder's reviewers file that tells them apart
    (`ReviewerAuthError` otherwise)."""
    policy, new = resolve_policy(path, min_reviewers=options.min_reviewers, rule=options.review_rule)
    require_reviewers_file(policy.min_reviewers, load_reviewers(reviewers_path(path)), str(path))
    if new:
        record_policy(path, new)
    source = CtdSource(path)
    source.rows()
    return source


def flush_views(source: PageSource) -> None:
    """Write the views every decision left pending (the app calls it when it stops)."""
    if isinstance(source, CtdSource):
        source.views.flush()
