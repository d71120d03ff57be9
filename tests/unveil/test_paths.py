"""Relative paths mean what users expect, and detection records keep their input.

On the command line a path is relative to the working directory (`img/x.png`, `../x.png`); inside a JSONL batch it is
relative to that file and may not leave the file's folder (README, docs/reliability.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from unveil.cli import main

VANILLA = {"vanilla_detector": [{"when": "", "then": {"toxic": True, "category": "drugs", "reason": "a sale"}}]}


def _png(path: Path, shade: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), (shade, 10, 200)).save(path)
    return path


@pytest.mark.parametrize(
    ("cwd", "ref"),
    [("work", "img/x.png"), ("work", "../x.png"), ("work/sub", "../img/x.png"), ("work", "./img/../img/x.png")],
)
def test_command_line_image_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch, capsys, write_script, cwd: str, ref: str
) -> None:
    _png(tmp_path / "work" / "img" / "x.png")
    _png(tmp_path / "x.png", 90)
    (tmp_path / cwd).mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path / cwd)
    rc = main(
        ["detect", "--method", "vanilla", "--model", write_script(VANILLA), "--image", ref, "--text", "t", "--json"]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    out = json.loads(captured.out)
    expected = (tmp_path / cwd / ref).resolve()
    assert out["image"] == str(expected)
    assert Path(out["image_path"]).read_bytes() == expected.read_bytes()


def test_a_missing_command_line_image_is_one_error_naming_it(tmp_path: Path, monkeypatch, capsys, write_script) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(
        ["detect", "--method", "vanilla", "--model", write_script(VANILLA), "--image", "img/nope.png", "--text", "t"]
    )
    err = capsys.readouterr().err
    assert rc == 1 and str(tmp_path / "img" / "nope.png") in err and "img/img" not in err


def test_batch_image_paths_are_relative_to_the_batch_file(tmp_path: Path, monkeypatch, write_script) -> None:
    data = tmp_path / "data"
    _png(data / "img" / "a.png", 10)
    _png(data / "img" / "b.png", 20)
    _png(tmp_path / "outside.png", 30)
    (data / "pairs.jsonl").write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"id": "a", "image": "img/a.png", "text": "ta"},
                {"id": "b", "image": "img/../img/b.png", "text": "tb"},
                {"id": "up", "image": "../outside.png", "text": "tu"},
            ]
        )
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the file's folder nor its parent
    rc = main(
        [
            "detect",
            "--method",
            "vanilla",
            "--model",
            write_script(VANILLA),
            "--input",
            "../data/pairs.jsonl",
            "--output",
            "out.jsonl",
            "--no-progress",
        ]
    )
    assert rc == 2  # one sample failed, the others ran
    records = {r["id"]: r for r in map(json.loads, (elsewhere / "out.jsonl").read_text().splitlines())}
    assert records["a"]["status"] == "ok" and records["b"]["status"] == "ok"
    assert Path(records["a"]["image_path"]).read_bytes() == (data / "img" / "a.png").read_bytes()
    assert Path(records["b"]["image_path"]).read_bytes() == (data / "img" / "b.png").read_bytes()
    assert records["a"]["image"] == "img/a.png"  # as the sample named it
    # A batch may not reach out of its folder (docs/reliability.md): one failure naming the path and the folder.
    assert records["up"]["status"] == "failed"
    assert "../outside.png" in records["up"]["error"] and str(data) in records["up"]["error"]


@pytest.mark.usefixtures("no_pictures")
def test_evaluation_datasets_resolve_images_against_the_dataset_file(tmp_path: Path, monkeypatch, write_script) -> None:
    data = tmp_path / "data"
    _png(data / "img" / "a.png", 10)
    _png(data / "img" / "b.png", 20)
    (data / "ds.jsonl").write_text(
        json.dumps({"id": "a", "image": "img/a.png", "text": "ta", "label": 1})
        + "\n"
        + json.dumps({"id": "b", "image": "img/../img/b.png", "text": "tb", "label": 1})
        + "\n"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    rc = main(
        [
            "evaluate",
            "detection",
            "--dataset",
            "d=../data/ds.jsonl",
            "--format",
            "ctd",
            "--methods",
            "vanilla",
            "--detectors",
            write_script(VANILLA),
            "--out",
            "ev",
            "--no-progress",
        ]
    )
    assert rc == 0
    runs = (tmp_path / "elsewhere" / "ev").rglob("*.jsonl")
    rows = [json.loads(line) for p in runs for line in p.read_text().splitlines()]
    got = {r["id"]: r for r in rows if "image_path" in r}
    assert Path(got["a"]["image_path"]).read_bytes() == (data / "img" / "a.png").read_bytes()
    assert Path(got["b"]["image_path"]).read_bytes() == (data / "img" / "b.png").read_bytes()
