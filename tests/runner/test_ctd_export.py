"""The export beside its Parquet file (issue 34 item 11): the same rows as JSONL and CSV, and a dataset card that
makes the export folder loadable with `datasets.load_dataset(FOLDER)` and states the rows per category, the
review rule, the reviewers' agreement and the models used."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from runner.ctd_export import export_hf
from runner.ctd_reviews import apply_reviews
from tests.ui_data import make_ctd_dataset
from tools.reviewers import REVIEWERS, add_reviewer


def test_export_writes_jsonl_csv_and_a_card_that_datasets_loads(tmp_path: Path) -> None:
    import datasets

    root = tmp_path / "ds"
    pending = make_ctd_dataset(root)["pending"]
    add_reviewer(root / REVIEWERS, "ann"), add_reviewer(root / REVIEWERS, "bob")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    decisions = {"ann": ["approve", "approve", "reject", "approve"], "bob": ["approve", "reject", "reject", "approve"]}
    for who, words in decisions.items():
        apply_reviews(root, {sid: {"decision": d} for sid, d in zip(pending, words, strict=True)}, reviewer=who, **two)
    parquet = export_hf(root)
    folder = parquet.parent
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "data.csv", "data.jsonl", "data.parquet"]
    loaded = datasets.load_dataset(str(folder), split="train")
    lines = [json.loads(x) for x in (folder / "data.jsonl").read_text().splitlines()]
    with (folder / "data.csv").open(newline="") as fh:
        table = list(csv.DictReader(fh))
    ids = [r["id"] for r in lines]
    assert ids == loaded["id"] == [r["id"] for r in table]
    assert pending[0] in ids and pending[3] in ids and pending[1] not in ids  # accepted by both; rejected left out
    assert lines[0]["image"].startswith("images/") and table[0]["image"] == lines[0]["image"]
    assert loaded[0]["image"].size[0] > 0  # the image itself, from the Parquet file
    card = (folder / "README.md").read_text()
    assert "path: data.parquet" in card
    rows = {
        line.split("|")[1].strip(): line for line in card.splitlines() if line.startswith("| ") and "---" not in line
    }
    by_cat: dict[str, int] = {}
    for r in lines:
        by_cat[r["category"]] = by_cat.get(r["category"], 0) + 1
    assert all(f"| {c} | {n} | 0 |" == rows[c] for c, n in by_cat.items())
    assert "unanimous, 2 reviewer(s) per sample (4 samples)" in card
    assert "Reviewers who judged: 2" in card
    # 4 samples judged twice (bob's rejection of a sample ann's rejection decided counts too): Fleiss' kappa of
    # [a, a], [a, r], [r, r], [a, a] is 0.467.
    assert "Fleiss' kappa" in card and "over 4 samples" in card and "0.467" in card
    assert "- eraser: `scripted:" in card and "- generator: `diffusers:tiny-sd`" in card
    assert "1 samples accepted without review" in card


def test_export_keeps_the_annotations_of_the_label_schema_per_reviewer(tmp_path: Path) -> None:
    """Issue 45 item 4: the export dropped the ratings, rationales, notes, the reviewer of each judgement, the
    original category, the adjudication flag and `image_description` (which text-only detectors need)."""
    import datasets

    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]
    (root / "labels.json").write_text(json.dumps({"category": True, "ratings": {"covertness": [1, 5]}}))
    for name in ("ann", "bob"):
        add_reviewer(root / REVIEWERS, name)
    add_reviewer(root / REVIEWERS, "judy", "adjudicator")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    ann = {"decision": "approve", "note": "well hidden", "category": "crimes", "ratings": {"covertness": 4}}
    apply_reviews(root, {first: ann, second: {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(root, {first: {"decision": "note", "note": "check the scale"}}, reviewer="bob", **two)
    bob = {"decision": "approve", "ratings": {"covertness": 2}}
    apply_reviews(root, {first: bob, second: {"decision": "reject", "note": "too plain"}}, reviewer="bob", **two)
    apply_reviews(root, {second: {"decision": "approve", "note": "hidden enough"}}, reviewer="judy", role="adjudicator")
    folder = export_hf(root).parent
    lines = {r["id"]: r for r in map(json.loads, (folder / "data.jsonl").read_text().splitlines())}
    with (folder / "data.csv").open(newline="") as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    # Its own cache: `datasets` may otherwise hand back another test's export of a folder with the same name.
    loaded = {r["id"]: r for r in datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "hf"))}
    for rows in (lines, table, loaded):
        assert sorted(rows) == sorted(lines)
        one, settled = rows[first], rows[second]
        assert one["category"] == "crimes" and one["category_generated"] == "fraud"
        assert one["image_description"].startswith("a kitchen table with a bowl of flour")
        assert str(settled["adjudicated"]) == "True" and str(one["adjudicated"]) == "False"
        notes = json.loads(one["annotations"])
        assert [(a["reviewer"], a["decision"]) for a in notes] == [
            ("ann", "approve"),
            ("bob", "note"),
            ("bob", "approve"),
        ]
        assert notes[0]["note"] == "well hidden" and notes[0]["category"] == "crimes"
        assert notes[0]["ratings"] == {"covertness": 4} and notes[2]["ratings"] == {"covertness": 2}
        assert notes[1]["note"] == "check the scale" and notes[0]["time"]
        judged = json.loads(settled["annotations"])
        assert [(a["reviewer"], a["decision"], a.get("adjudicated", False)) for a in judged] == [
            ("ann", "approve", False),
            ("bob", "reject", False),
            ("judy", "approve", True),
        ]
    card = (folder / "README.md").read_text()
    assert "`annotations` (JSON: one entry per" in card and "`image_description`" in card
    assert "ratings recorded: covertness" in card and "category corrected by the reviewers on 1 rows" in card
