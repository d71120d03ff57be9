"""A hand-edited `samples.jsonl` cannot make `review --export` embed files from outside the dataset folder."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from PIL import Image

from runner.ctd_export import export_hf


def _dataset(root: Path, image: str) -> None:
    (root / "images").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (10, 20, 30)).save(root / "images" / "ok.png")
    recs = [
        {"id": "good", "status": "accepted", "text": "t", "image": "images/ok.png", "category": "c"},
        {"id": "evil", "status": "accepted", "text": "t", "image": image, "category": "c"},
    ]
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET")
    return secret


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink_file", "symlink_dir"])
def test_export_refuses_paths_outside_the_folder(tmp_path: Path, kind: str) -> None:
    secret = _secret(tmp_path)
    root = tmp_path / "ds"
    root.mkdir()
    ref = {
        "absolute": str(secret),
        "dotdot": "../outside/secret.txt",
        "symlink_file": "images/link.png",
        "symlink_dir": "images/up/secret.txt",
    }[kind]
    _dataset(root, ref)
    if kind == "symlink_file":
        os.symlink(secret, root / "images" / "link.png")
    if kind == "symlink_dir":
        os.symlink(secret.parent, root / "images" / "up")
    with pytest.raises(ValueError, match="evil.*outside the dataset folder"):
        export_hf(root)
    assert not (root / "export" / "data.parquet").exists()


def test_export_of_a_clean_folder_embeds_its_images(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    _dataset(root, "images/ok.png")
    out = export_hf(root)
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == ["good", "evil"]
    assert all(r["image"]["bytes"] == (root / "images" / "ok.png").read_bytes() for r in rows)


# Every first character a spreadsheet computes, with the payloads the class allows.
FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(1)", "\t=1+1", "\r=1+1"]


@pytest.mark.parametrize("formula", FORMULAS)
def test_no_exported_cell_is_a_formula_and_the_card_keeps_its_lines(tmp_path: Path, formula: str) -> None:
    """Samples whose text, id and category start with a formula character, and whose model spec and category hold
    line breaks, `|` and backticks: the CSV holds no cell a spreadsheet computes, and the card's table and model
    list keep one line per row."""
    import csv

    root = tmp_path / "ds"
    _dataset(root, "images/ok.png")
    recs = [json.loads(x) for x in (root / "samples.jsonl").read_text().splitlines()]
    for n, rec in enumerate(recs):
        rec.update(
            id=f"{formula}{n}",
            text=formula,
            category=f"{formula}\n\n# Injected | heading",
            models={"eraser": "scripted:x`\n\n![](http://evil.example/track.png)\n- owned: `y", "judge|x": "m"},
        )
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    folder = export_hf(root).parent
    with (folder / "data.csv").open(newline="") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert cells and not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert "'" + formula in cells  # the text is kept, shown as text
    card = (folder / "README.md").read_text()
    assert "\n![](" not in card and "\n- owned" not in card and "\n# Injected" not in card
    table = [line for line in card.splitlines() if line.startswith("| ") and "---" not in line]
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 4 for line in table), table  # 3 cells, each in its column
    models = [line for line in card.splitlines() if line.startswith("- ") and "samples)" in line]
    assert len(models) == 2 and all(line.count("`") == 2 for line in models), models
