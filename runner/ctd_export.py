"""The CTD export beside its Parquet file: the same rows as JSONL and CSV, and a dataset card (`README.md`) that
makes the export folder loadable with `datasets.load_dataset(FOLDER, split="train")` (its YAML header names the
Parquet file) and says what the data is: rows per category, the review rule, the reviewers' agreement and the
models used.

`export_hf` writes the usable samples of a dataset folder (`runner.ctd_dataset`) as Parquet with the image bytes in
an `Image` column; the JSONL and CSV files beside it hold every column but the image bytes: `image` is the image's
path relative to the dataset folder (as `dataset.jsonl` has it). Each file is written new and renamed into place.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from graphs.ctd.review import attempt_start, judged
from graphs.ctd.rules import fleiss_kappa
from runner.ctd_dataset import EXPORT, dataset_rows, is_usable, load_samples, record_problem
from tools.export_text import csv_cell, markdown_inline
from tools.extras import require_extra
from tools.safe_files import atomic_write, atomic_writer

JSONL = "data.jsonl"
CSV = "data.csv"
CARD = "README.md"
PARQUET = "data.parquet"


def export_summary(folder: Path) -> str:
    """Where an export went and what it holds, as `unveil review --export` and the web app's Export say it."""
    return f"{folder}{os.sep} ({PARQUET}, {JSONL}, {CSV} and the dataset card {CARD})"


def plain_rows(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The export's rows without the image bytes (the image as its path), for JSONL and CSV."""
    return [
        {c: (v[i]["path"] if c == "image" else v[i]) for c, v in columns.items()} for i in range(len(columns["id"]))
    ]


def write_extras(
    base: Path,
    folder: Path,
    columns: dict[str, list[Any]],
    records: list[dict[str, Any]],
    reviewed: list[dict[str, Any]],
) -> None:
    """Write `data.jsonl`, `data.csv` and the dataset card into `base/folder` (the Parquet file's folder);
    `records` are the exported samples, `reviewed` every sample of the folder (the review statistics)."""
    rows = plain_rows(columns)
    atomic_write(base, folder / JSONL, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c for c in columns], extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        # No cell a spreadsheet would compute: samples and categories come from models and editable files.
        writer.writerow({k: csv_cell(json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()})
    atomic_write(base, folder / CSV, out.getvalue().encode("utf-8"))
    atomic_write(base, folder / CARD, dataset_card(rows, records, reviewed).encode("utf-8"))


COLUMNS_DOC = """\
- `id`, `label` (1: a covert toxic pair, 0: its benign counterpart, whose `counterpart_of` names the toxic one),
  `text`, `image` (the image; in the JSONL and CSV files its path in the dataset folder), `image_sha256`;
- `category` (after the reviewers' correction, if any), `category_generated` (the category the sample was
  generated for), `subcategory`;
- `image_description` (what the image was asked to show: for text-only detectors), `t2i_prompt`,
  `erasure_reason`, `rounds`, `votes` (every judge of every round, JSON), `models` (JSON), `seeds`, `cost_usd`,
  `mtc` (with an MTC reference);
- `review_status`, `adjudicated` (an adjudicator settled a disagreement), `annotations` (JSON: one entry per
  reviewer's judgement or note on the current attempt, in order: `reviewer`, `decision` approve/reject/note,
  `note` (the rationale), `category` (a correction), `ratings` (the label schema's, `labels.json`),
  `adjudicated`, `time`; undone entries and decisions not applied are left out)."""


def _review_facts(records: list[dict[str, Any]]) -> tuple[str, int, int]:
    """The review rule the records were decided under, how many distinct reviewers judged, and how many samples
    an adjudicator settled."""
    rules = Counter(
        f"{(r.get('review') or {}).get('rule', 'unanimous')}, {(r.get('review') or {}).get('min_reviewers', 1)} "
        "reviewer(s) per sample"
        for r in records
        if (r.get("review") or {}).get("status") in ("approved", "rejected")
    )
    skipped = sum(
        1 for r in records if r.get("status") == "accepted" and (r.get("review") or {}).get("status") == "skipped"
    )
    rule = "; ".join(f"{k} ({v} samples)" for k, v in rules.most_common()) or "no human review"
    if skipped:
        rule += f"; {skipped} samples accepted without review (`--review auto`)"
    names = {n for r in records for n in judged(r.get("review_history") or [])}
    settled = sum(1 for r in records if (r.get("review") or {}).get("adjudicated"))
    return rule, len(names), settled


def dataset_card(rows: list[dict[str, Any]], records: list[dict[str, Any]], reviewed: list[dict[str, Any]]) -> str:
    """The export's `README.md`: a YAML header for `datasets`, then the rows per category, the review rule and
    the agreement between reviewers (over every reviewed sample, rejected ones included) and the models of the
    exported samples."""
    # Categories, specs and rules come from records anyone may edit: each kept to its own line, cell or code span.
    per_cat = Counter((markdown_inline(str(r.get("category") or "?")), int(r.get("label", 1))) for r in rows)
    cats = sorted({c for c, _ in per_cat})
    table = "\n".join(f"| {c} | {per_cat[(c, 1)]} | {per_cat[(c, 0)]} |" for c in cats)
    rule, n_reviewers, settled = _review_facts(reviewed)
    rule = markdown_inline(rule)
    labels = [list(judged(r.get("review_history") or [], attempt_start(r)).values()) for r in reviewed]
    kappa = fleiss_kappa(labels)
    multi = sum(1 for x in labels if len(x) >= 2)
    models = Counter(
        f"{markdown_inline(str(role))}: `{markdown_inline(spec)}`"
        for r in records
        for role, spec in sorted((r.get("models") or {}).items())
        if isinstance(spec, str) and spec
    )
    model_lines = "\n".join(f"- {m} ({n} samples)" for m, n in sorted(models.items())) or "- (not recorded)"
    notes = [json.loads(str(r.get("annotations") or "[]")) for r in rows if r.get("counterpart_of") is None]
    rated = sorted({name for ann in notes for a in ann for name in a.get("ratings") or {}})
    corrected = sum(1 for r in rows if r.get("category_generated") and r.get("category_generated") != r.get("category"))
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: {PARQUET}
---

# CTD-style covert toxic image-text dataset

Written by `unveil` (CTD generation and human review). {len(rows)} rows: {sum(1 for r in rows if r.get("label", 1))}
toxic pairs (label 1) and {sum(1 for r in rows if not r.get("label", 1))} benign counterparts (label 0).

Load it with `datasets.load_dataset("path/to/this/folder", split="train")` (the Parquet file, images embedded);
`{JSONL}` and `{CSV}` hold the same rows without the image bytes (`image` is the path in the dataset folder).

## Rows per category

| category | toxic (label 1) | benign (label 0) |
| --- | --- | --- |
{table}

## Review

- Rule: {rule}.
- Reviewers who judged: {n_reviewers}; samples settled by an adjudicator: {settled}.
- Agreement (Fleiss' kappa over the samples judged by two or more reviewers, approve/reject): \
{"undefined" if kappa is None else f"{kappa:.3f}"} over {multi} samples.

- Annotations: {sum(len(a) for a in notes)} judgements and notes over {sum(1 for a in notes if a)} samples; \
ratings recorded: {", ".join(rated) or "none"}; category corrected by the reviewers on {corrected} rows.

## Columns

{COLUMNS_DOC}

## Models

{model_lines}
"""


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
    "category_generated",
    "subcategory",
    "text",
    "image_description",
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
    "adjudicated",
    "annotations",
)
# What each annotation keeps of a review history entry (`graphs.ctd.review.apply_decision`).
ANNOTATION_FIELDS = ("reviewer", "decision", "note", "category", "ratings", "adjudicated", "time")


def review_annotations(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """What the reviewers recorded on the sample's current attempt, one entry per judgement or note in history
    order: the reviewer, approve/reject/note, the note (the rationale), the corrected category and the ratings
    of the label schema (`labels.json`) where given, whether it was the adjudicator's settling decision, and the
    time. Undone entries and decisions kept as conflicts (not applied) are left out: they did not count."""
    history = rec.get("review_history") or []
    undone = {h.get("undoes") for h in history if h.get("decision") == "undo"}
    out = []
    for k, h in enumerate(history):
        counted = k not in undone and h.get("applied") is not False and k >= attempt_start(rec)
        if counted and h.get("decision") in ("approve", "reject", "note"):
            out.append({f: h[f] for f in ANNOTATION_FIELDS if h.get(f) not in (None, "", {})})
    return out


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

    root = Path(dataset_dir)
    every = [r for r in load_samples(root).values() if record_problem(r) is None]
    records = [r for r in every if is_usable(r, include_pending=include_pending)]
    columns = _export_columns(root, records)
    ds = Dataset.from_dict(columns, features=export_features())
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
        row = {
            **r,
            "review_status": (r.get("review") or {}).get("status", ""),
            "category_generated": r.get("category_generated") or r.get("category"),
            "image_description": r.get("image_description") or r.get("t2i_prompt"),
        }
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
        columns["adjudicated"].append(bool((r.get("review") or {}).get("adjudicated")))
        columns["annotations"].append(json.dumps(review_annotations(r), ensure_ascii=False))
    return columns


def export_features() -> Any:
    """The export's `datasets.Features`: the types of `_EXPORT_COLUMNS` (the Hub push reads the Parquet file
    back with them, `runner.ctd_publish`)."""
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
            "adjudicated": Value("bool"),
            "annotations": Value("string"),
        }
    )
