"""Every detection record keeps the input it judged: `text`, `image_description`, `image` (as the sample named it),
and `image_id` / `image_path` of the stored copy (null where the sample had no image), for TAG, vanilla and guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.unveil.test_detect_cli import SCRIPT
from unveil.cli import main

ANSWERS = {
    **SCRIPT,
    "vanilla_detector": [{"when": "", "then": {"toxic": True, "category": "drugs", "reason": "a sale"}}],
    "guard.llama-guard-4": [{"when": "", "then": "unsafe\nS2"}],
}
PAIRS = [
    {"id": "both", "image": "img/powder.png", "image_description": "white powder", "text": "text the usual number"},
    {"id": "image-only", "image": "img/powder.png", "text": "fresh batch"},
    {"id": "description-only", "image_description": "a bag of flour", "text": "for the party"},
]


@pytest.mark.parametrize("method", ["tag", "vanilla", "guard:llama-guard-4"])
def test_batch_records_keep_their_input(tmp_path: Path, monkeypatch, write_script, method: str) -> None:
    (tmp_path / "img").mkdir()
    Image.new("RGB", (32, 32), (240, 240, 240)).save(tmp_path / "img" / "powder.png")
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    monkeypatch.chdir(tmp_path)
    spec = write_script(ANSWERS)
    roles = ["--role-model", f"guard={spec}"] if method.startswith("guard:") else []
    rc = main(
        [
            "detect",
            "--method",
            method,
            "--model",
            spec,
            *roles,
            "--l-max",
            "2",
            "--input",
            "pairs.jsonl",
            "--output",
            "out.jsonl",
            "--no-progress",
        ]
    )
    assert rc == 0
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    for pair in PAIRS:
        rec = records[pair["id"]]
        assert rec["status"] == "ok" and "toxic" in rec
        assert rec["text"] == pair["text"]
        assert rec["image_description"] == pair.get("image_description")
        assert rec["image"] == pair.get("image")
        if "image" in pair:
            assert len(rec["image_id"]) == 64 and Path(rec["image_path"]).is_file()
        else:
            assert rec["image_id"] is None and rec["image_path"] is None


def test_a_single_pair_result_shows_its_input(tmp_path: Path, capsys, write_script) -> None:
    rc = main(
        [
            "detect",
            "--model",
            write_script(ANSWERS),
            "--image-description",
            "white powder",
            "--text",
            "text the usual number",
            "--l-max",
            "2",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["text"], out["image_description"], out["image"], out["image_id"]) == (
        "text the usual number",
        "white powder",
        None,
        None,
    )
