"""The CTD dataset folder: its layout, its scene records and the two views rewritten from them.

The folder's other jobs have a module each: duplicate dropping (`runner.ctd_duplicates`), reviewer decisions
(`runner.ctd_reviews`) and the Hugging Face export (`runner.ctd_export`).

Layout of a dataset folder `DIR`:

- `images/`: the content-addressed image store (PNG files named by their SHA-256);
- `samples.jsonl`: one record per scene, appended by the batch runner (accepted, pending review, rejected by a
  reviewer, dropped after `max_rounds`, duplicate, or failed with its error);
- `dataset.jsonl`: the usable samples (accepted; reviewed-and-approved or review skipped), in the form
  `evaluation.datasets` loads as `ctd` (`image` is relative to `DIR`), each with the `mtc` its generation's
  reference detector assigned (`unveil generate --mtc-reference`) and, after it, its benign counterpart when one
  was written (`--benign`: label 0, the same image, id `<id>-benign`, `counterpart_of` naming the toxic sample);
- `review_queue.jsonl`: samples waiting for a human decision (what the reviewer needs to see);
- `checkpoints.sqlite`: LangGraph's checkpoints, so a killed run resumes mid-scene;
- `decisions.jsonl`: every reviewer decision applied, in the `unveil review --decisions` format plus reviewer and time;
- `.lock`: the folder lock (`dataset_lock`) that serialises reviewers and the rewriting of the views;
- `export/`: the Hugging Face `datasets` export: `data.parquet` with the image bytes in an `Image` column, the
  same rows as `data.jsonl` and `data.csv`, and the dataset card `README.md` (`load_dataset("DIR/export")`);
- `reviewers.json`, `assignment.json`, `guidelines.md` (optional): who reviews, who reviews which sample, and the
  guidelines shown beside each sample (`tools.reviewers`, `unveil ui`).

Every write into the folder goes through `tools.safe_files` (the batch appender and the lock files through
`open_nofollow`): a symbolic link planted in the folder is refused or replaced, never written through, and the
views and the export are new files renamed into place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Re-exported (the `as` spelling marks them public): the runner shapes records with sample_record, and the review
# folder's names and lock live in tools.review_log.
from graphs.ctd.review import sample_record as sample_record
from tools.jsonl_files import done_records
from tools.review_log import DECISIONS as DECISIONS
from tools.review_log import LOCK as LOCK
from tools.review_log import LOCK_TIMEOUT_S as LOCK_TIMEOUT_S
from tools.review_log import SAMPLES as SAMPLES
from tools.review_log import ReviewBusyError
from tools.review_log import append_records as append_records
from tools.review_log import review_lock as review_lock
from tools.safe_files import atomic_write

DatasetBusyError = ReviewBusyError  # the name callers know

DATASET = "dataset.jsonl"
REVIEW_QUEUE = "review_queue.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
IMAGES = "images"
EXPORT = "export"

# Statuses of samples that may be part of the dataset; "pending_review" waits for a human decision.
CANDIDATE_STATUSES = ("accepted", "pending_review")


def dataset_rows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The dataset rows of one usable record: the toxic sample, then its benign counterpart if it has one (the
    same image and scene, label 0, no MTC: the innocent reading has no toxic path to measure)."""
    rows = [{**rec, "counterpart_of": None}]
    benign = rec.get("benign")
    if isinstance(benign, dict) and benign.get("text"):
        rows.append(
            {
                **rec,
                "id": benign["id"],
                "text": benign["text"],
                "label": 0,
                "mtc": None,
                "erasure_reason": None,
                "counterpart_of": rec["id"],
            }
        )
    return rows


def load_samples(dataset_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Every scene record of a folder, by id."""
    return done_records(Path(dataset_dir) / SAMPLES)


def is_usable(rec: dict[str, Any], *, include_pending: bool = False) -> bool:
    """Whether a record belongs in the dataset."""
    if rec.get("status") == "accepted":
        return True
    return include_pending and rec.get("status") == "pending_review"


def review_item(rec: dict[str, Any]) -> dict[str, Any]:
    """What a reviewer sees for one queued sample, with empty decision fields to fill in."""
    last = rec.get("rounds")
    return {
        "id": rec["id"],
        "category": rec.get("category"),
        "subcategory": rec.get("subcategory"),
        "text": rec.get("text"),
        "image": rec.get("image"),
        "erasure_reason": rec.get("erasure_reason"),
        "votes": [
            {k: v.get(k) for k in ("judge", "has_risk", "category", "reason", *(("error",) if v.get("failed") else ()))}
            for v in rec.get("votes", [])
            if v.get("round") == last
        ],
        # the benign counterpart is approved or rejected with its pair, so the reviewer checks it too
        "benign_text": (rec.get("benign") or {}).get("text"),
        "mtc": rec.get("mtc"),
        "reviews_so_far": [
            {k: r.get(k) for k in ("reviewer", "status", "note")}
            for r in (rec.get("review") or {}).get("reviews") or []
        ],
        "decision": "",
        "note": "",
        "reviewer": "",
    }


_TEXT_FIELDS = (
    "status",
    "category",
    "subcategory",
    "text",
    "image",
    "image_sha256",
    "image_description",
    "t2i_prompt",
    "erasure_reason",
    "drop_reason",
)
_OBJECT_FIELDS = (
    "decision",
    "review",
    "models",
    "usage",
    "benign",
    "erasure",
    "scene",
    "modality",
    "duplicate_of",
    "send_back",
)


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why a `samples.jsonl` record cannot be used (a hand edit or a damaged line: a field of the wrong type), or
    None; a bad record is left out of the views and takes no decision, and the others go on."""

    def is_int(v: object) -> bool:
        return v is None or (isinstance(v, int) and not isinstance(v, bool))

    if not isinstance(rec.get("status"), str):
        return "no 'status' text"
    for k in _TEXT_FIELDS:
        if rec.get(k) is not None and not isinstance(rec[k], str):
            return f"{k!r} is {type(rec[k]).__name__}, not text"
    for k in _OBJECT_FIELDS:
        if rec.get(k) is not None and not isinstance(rec[k], dict):
            return f"{k!r} is {type(rec[k]).__name__}, not an object"
    lists = {k: rec.get(k) for k in ("votes", "feedback_history", "review_history", "sent_back")}
    lists["review.reviews"] = (rec.get("review") or {}).get("reviews")
    for k, v in lists.items():
        if v is not None and not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
            return f"{k!r} is not a list of objects"
    if not all(is_int(v.get("round")) for v in rec.get("votes") or []):
        return "a vote's 'round' is not a whole number"
    if not all(
        is_int(x)
        for x in [rec.get("rounds"), *((rec.get("decision") or {}).get(k) for k in ("round", "blind_found", "n_blind"))]
    ):
        return "'rounds' or a decision count is not a whole number"
    if not isinstance(rec.get("seeds") or [], list):
        return "'seeds' is not a list"
    return None


dataset_lock = review_lock  # the folder lock every reviewer takes (web app, `unveil review`, Studio)


def write_views(dataset_dir: str | os.PathLike[str]) -> dict[str, int]:
    """Rewrite `dataset.jsonl` and `review_queue.jsonl` from `samples.jsonl` (atomically, under the folder lock);
    returns counts by status."""
    with dataset_lock(dataset_dir):
        return write_views_locked(dataset_dir)


VIEW_KEYS = (
    "id",
    "category",
    "subcategory",
    "text",
    "image",
    "image_sha256",
    "label",
    "image_description",
    "erasure_reason",
    "rounds",
    "mtc",
    "mtc_reference",
    "counterpart_of",
)


def view_lines(rec: dict[str, Any]) -> tuple[str, str]:
    """The lines one record contributes to `dataset.jsonl` and to `review_queue.jsonl` ("" where it has none; a
    record that `record_problem` refuses has none, so one bad line spoils nothing)."""
    if record_problem(rec) is not None:
        return "", ""
    data = (
        "".join(json.dumps({k: row.get(k) for k in VIEW_KEYS}, ensure_ascii=False) + "\n" for row in dataset_rows(rec))
        if is_usable(rec)
        else ""
    )
    queue = json.dumps(review_item(rec), ensure_ascii=False) + "\n" if rec.get("status") == "pending_review" else ""
    return data, queue


def write_view_texts(dataset_dir: str | os.PathLike[str], dataset_text: str, queue_text: str) -> None:
    """Replace both views atomically (the caller holds the folder lock)."""
    root = Path(dataset_dir)
    # Written as new files inside the folder (tools.safe_files): a link planted at either name is replaced.
    atomic_write(root, DATASET, dataset_text.encode("utf-8"))
    atomic_write(root, REVIEW_QUEUE, queue_text.encode("utf-8"))


def write_views_locked(dataset_dir: str | os.PathLike[str]) -> dict[str, int]:
    """`write_views` for a caller that holds the folder lock already."""
    records = load_samples(dataset_dir)
    lines = [view_lines(r) for r in records.values()]
    write_view_texts(dataset_dir, "".join(d for d, _ in lines), "".join(q for _, q in lines))
    counts: dict[str, int] = {}
    for r in records.values():
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    return counts


def moderation_summary(dataset_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The paper's benign-modality statistic (§4.2) over the usable samples scored by the moderation API: the
    mean moderation score and flagged fraction of the images and of the texts (their last round's scores)."""
    from tools.moderation import mean_scores

    records = [r for r in load_samples(dataset_dir).values() if is_usable(r) and record_problem(r) is None]
    return mean_scores([(r.get("modality") or {}).get("moderation") or {} for r in records])
