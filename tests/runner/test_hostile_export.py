"""A hand-edited `samples.jsonl` cannot make `review --export` embed files from outside the dataset folder."""

from __future__ import annotations

import json
import os
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
