"""The CTD export beside its Parquet file: the same rows as JSONL and CSV, and a dataset card (`README.md`) that
makes the export folder loadable with `datasets.load_dataset(FOLDER, split="train")` (its YAML header names the
Parquet file) and says what the data is: rows per category, the review rule, the reviewers' agreement and the
models used.

The JSONL and CSV files hold every column of the Parquet file except the image bytes: `image` is the image's path
relative to the dataset folder (as `dataset.jsonl` has it). Written by `runner.ctd_dataset.export_hf`, each as a
new file renamed into place.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

from graphs.ctd.review import attempt_start, judged
from graphs.ctd.rules import fleiss_kappa
from tools.safe_files import atomic_write

JSONL = "data.jsonl"
CSV = "data.csv"
CARD = "README.md"
PARQUET = "data.parquet"


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
        writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    atomic_write(base, folder / CSV, out.getvalue().encode("utf-8"))
    atomic_write(base, folder / CARD, dataset_card(rows, records, reviewed).encode("utf-8"))


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
    per_cat = Counter((r.get("category") or "?", int(r.get("label", 1))) for r in rows)
    cats = sorted({c for c, _ in per_cat})
    table = "\n".join(f"| {c} | {per_cat[(c, 1)]} | {per_cat[(c, 0)]} |" for c in cats)
    rule, n_reviewers, settled = _review_facts(reviewed)
    labels = [list(judged(r.get("review_history") or [], attempt_start(r)).values()) for r in reviewed]
    kappa = fleiss_kappa(labels)
    multi = sum(1 for x in labels if len(x) >= 2)
    models = Counter(
        f"{role}: `{spec}`"
        for r in records
        for role, spec in sorted((r.get("models") or {}).items())
        if isinstance(spec, str) and spec
    )
    model_lines = "\n".join(f"- {m} ({n} samples)" for m, n in sorted(models.items())) or "- (not recorded)"
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

## Models

{model_lines}
"""
