"""Hostile and bad inputs, table-driven, over every command and loader: `unveil detect` / `refine` / `generate`
/ `review` inputs, the evaluation loaders (`evaluation/datasets.py`) and the training data loaders
(`training/`). Each bad input gets an error that names the input and the field, and in a batch the other samples
go on."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

GOOD_PNG = "good.png"


def _png_header(width: int, height: int, idat: bytes) -> bytes:
    """A PNG whose header claims width x height, with the given (compressed) pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A dataset folder with one good image and every kind of bad one, and a file just outside it."""
    d = tmp_path / "data"
    d.mkdir()
    Image.new("RGB", (16, 16), "red").save(d / GOOD_PNG)
    (d / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 50)
    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, "JPEG")
    (d / "corrupt.jpg").write_bytes(buf.getvalue()[:40] + b"\x00" * 30)
    # A decompression bomb: 12,000 x 12,000 grey pixels of zeros in a 23 kB file.
    (d / "bomb.png").write_bytes(_png_header(12_000, 12_000, zlib.compress(b"\x00" * (12_001 * 2_000), 9)))
    (d / "huge.png").write_bytes(_png_header(20_000, 20_000, zlib.compress(b"\x00" * 20_001, 9)))
    (d / "empty.png").write_bytes(b"")
    (tmp_path / "secret.png").write_bytes((d / GOOD_PNG).read_bytes())
    return d


# Image references and the words their error must contain (the field is `image` in every detection input).
IMAGE_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    ("corrupt_png", "corrupt.png", ("corrupt.png", "not a readable image")),
    ("corrupt_jpeg", "corrupt.jpg", ("corrupt.jpg", "not a readable image")),
    ("bomb", "bomb.png", ("bomb.png",)),
    ("huge", "huge.png", ("huge.png", "pixels")),
    ("empty_image", "empty.png", ("empty.png", "empty file")),
    ("missing_image", "nope.png", ("nope.png", "file not found")),
    ("file_url", "file:///etc/passwd", ("file:///etc/passwd", "scheme 'file'")),
    ("ftp_url", "ftp://example.com/a.png", ("ftp://example.com/a.png", "scheme 'ftp'")),
    ("gopher_url", "gopher://example.com/a", ("scheme 'gopher'",)),
    ("loopback_url", "http://127.0.0.1:9/a.png", ("127.0.0.1", "loopback, private")),
    ("localhost_url", "http://localhost:9/a.png", ("localhost", "loopback, private")),
    ("private_url", "http://10.1.2.3/a.png", ("10.1.2.3", "loopback, private")),
    ("metadata_url", "http://169.254.169.254/latest/meta-data", ("169.254.169.254", "loopback, private")),
    ("ipv6_loopback_url", "http://[::1]:9/a.png", ("[::1]", "loopback, private")),
    ("escape_relative", "../secret.png", ("../secret.png", "escapes the dataset folder")),
    ("escape_absolute", "ABS_SECRET", ("secret.png", "escapes the dataset folder")),
]

# Detection records with bad text fields: (id, record without id, words of the error).
TEXT_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("long_text", {"image_description": "a room", "text": "a" * 100_000}, ("text", "100000 characters")),
    (
        "long_description",
        {"image_description": "b" * 100_000, "text": "hi"},
        ("image_description", "100000 characters"),
    ),
    ("text_list", {"image_description": "a room", "text": ["a", "b"]}, ("text", "expected a string, got list")),
    ("text_number", {"image_description": "a room", "text": 5}, ("text", "got int")),
    ("text_missing", {"image_description": "a room"}, ("text", "empty or missing")),
    ("image_number", {"image": 5, "text": "x"}, ("image", "got int")),
    ("no_image", {"text": "x"}, ("image", "image_description")),
]


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _records(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        assert rec["id"] not in out, f"{rec['id']} written twice"
        out[rec["id"]] = rec
    return out


# -- unveil detect ------------------------------------------------------------------------------------------------


def test_detect_batch_names_every_bad_input_and_goes_on(tmp_path: Path, data_dir: Path) -> None:
    from unveil.cli import main

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "ok"}}]}))
    rows: list[bytes] = [json.dumps({"id": "good", "image": GOOD_PNG, "text": "hello"}).encode()]
    for sid, ref, _ in IMAGE_CASES:
        ref = str(tmp_path / "secret.png") if ref == "ABS_SECRET" else ref
        rows.append(json.dumps({"id": sid, "image": ref, "text": "x"}).encode())
    for sid, rec, _ in TEXT_CASES:
        rows.append(json.dumps({"id": sid, **rec}).encode())
    rows += [
        b'{"id": "non_utf8", "text": "\xff\xfe"}',
        b"[1, 2]",
        b'"just a string"',
        b"{not json",
        b'{"id": {"nested": 1}, "text": "x"}',
        json.dumps({"id": "good", "text": "again", "image": GOOD_PNG}).encode(),
        json.dumps({"id": "good2", "image_description": "a room", "text": "fine"}).encode(),
    ]
    src = data_dir / "pairs.jsonl"
    _write_lines(src, rows)
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "detect",
                "--method",
                "vanilla",
                "--input",
                str(src),
                "--output",
                str(out),
                "--model",
                f"scripted:{script}",
                "--cache",
                "off",
                "--no-progress",
                "--image-store",
                str(tmp_path / "store"),
            ]
        )
        == 2
    )  # some failed
    recs = _records(out)
    assert recs["good"]["status"] == "ok" and recs["good2"]["status"] == "ok"  # the batch went on
    for sid, _, words in IMAGE_CASES:
        err = recs[sid]["error"]
        assert recs[sid]["status"] == "failed" and "image:" in err, (sid, err)
        assert all(w in err for w in words), (sid, err)
    for sid, _, words in TEXT_CASES:
        err = recs[sid]["error"]
        assert recs[sid]["status"] == "failed" and all(w in err for w in words), (sid, err)
    n = len(IMAGE_CASES) + len(TEXT_CASES) + 1
    line_errors = {
        f"line-{n + 1}": "not UTF-8",
        f"line-{n + 2}": "expected a JSON object, got list",
        f"line-{n + 3}": "got str",
        f"line-{n + 4}": "not valid JSON",
        f"line-{n + 5}": "field 'id'",
        f"good#dup-line-{n + 6}": "duplicate id 'good'",
    }
    for sid, words in line_errors.items():
        assert (
            recs[sid]["status"] == "failed" and "pairs.jsonl line" in recs[sid]["error"] and words in recs[sid]["error"]
        ), recs[sid]
    assert len(recs) == n + 7
    # The images that were refused never reached the store; only the good one is there.
    assert len(list((tmp_path / "store").rglob("*.png"))) == 1


@pytest.mark.parametrize("content,words", [(None, "file not found"), (b"", "0 done, 0 failed")])
def test_detect_missing_or_empty_input_file(tmp_path: Path, content: bytes | None, words: str, capsys) -> None:
    from unveil.cli import main

    src = tmp_path / "pairs.jsonl"
    if content is not None:
        src.write_bytes(content)
    args = [
        "detect",
        "--method",
        "vanilla",
        "--input",
        str(src),
        "--output",
        str(tmp_path / "out.jsonl"),
        "--model",
        "scripted:unused.json",
        "--cache",
        "off",
        "--no-progress",
    ]
    if content is None:
        # the CLI turns the error into one line naming the file, and a non-zero exit
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "MissingFileError" in err and "pairs.jsonl" in err and words in err and "Traceback" not in err
    else:
        assert main(args) == 0
        assert words in capsys.readouterr().err


# -- unveil refine ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


REFINE_CASES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("long", json.dumps({"id": "long", "prompt": "a" * 100_000}).encode(), ("100000 characters", "max_prompt_chars")),
    ("empty", json.dumps({"id": "empty", "prompt": ""}).encode(), ("empty",)),
    ("number", json.dumps({"id": "number", "prompt": 7}).encode(), ("prompt", "expected a string")),
    ("list", json.dumps({"id": "list", "prompt": ["a"]}).encode(), ("prompt", "expected a string")),
    (
        "bad_seed",
        json.dumps({"id": "bad_seed", "prompt": "a cat", "seed": "abc"}).encode(),
        ("seed", "'abc'", "integer"),
    ),
    ("seed_type", json.dumps({"id": "seed_type", "prompt": "a cat", "seed": [1]}).encode(), ("seed", "got list")),
    ("line-9", b'{"id": "x", "prompt": "\xff"}', ("prompts.jsonl line 9", "not UTF-8")),
    ("line-10", b"[1]", ("line 10", "expected a JSON object")),
    ("ok#dup-line-11", json.dumps({"id": "ok", "prompt": "again"}).encode(), ("line 11", "duplicate id 'ok'")),
]


def test_refine_batch_names_every_bad_input_and_goes_on(tmp_path: Path, sd_folder: str) -> None:
    from unveil.cli import main

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refiner": [{"when": "", "then": "keep"}]}))
    src = tmp_path / "prompts.jsonl"
    _write_lines(
        src,
        [
            json.dumps({"id": "ok", "prompt": "a kitten", "seed": 3}).encode(),
            json.dumps({"id": "ok2", "prompt": "a garden", "seed": 4.0}).encode(),
        ]
        + [line for _, line, _ in REFINE_CASES]
        # a JSON-escaped lone surrogate is valid JSON but cannot be written back as UTF-8
        + [b'{"id": "surrogate\\udcff", "prompt": "a cat \\udcff"}'],
    )
    out = tmp_path / "out.jsonl"
    rc = main(
        [
            "refine",
            "--input",
            str(src),
            "--output",
            str(out),
            "--refiner",
            f"scripted:{script}",
            "--generator",
            f"diffusers:{sd_folder}",
            "--size",
            "32",
            "--steps",
            "2",
            "--cache",
            "off",
            "--no-progress",
            "--image-store",
            str(tmp_path / "store"),
        ]
    )
    assert rc == 2  # some samples failed (the batch exit rule)
    recs = _records(out)
    assert recs["ok"]["status"] == "ok" and recs["ok2"]["status"] == "ok" and recs["ok2"]["settings"]["seed"] == 4
    for sid, _, words in REFINE_CASES:
        assert recs[sid]["status"] == "failed" and all(w in recs[sid]["error"] for w in words), recs[sid]
    assert "surrogate\udcff" in recs  # its record was written (escaped), and read back under the same id
    assert len(recs) == 3 + len(REFINE_CASES)


# -- unveil generate / review ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--category", "not-a-category"], "--category 'not-a-category'"),
        (["--scene", "s" * 100_000], "--scene: 100000 characters"),
        (["--erase-routine", "r" * 100_000], "--erase-routine: 100000 characters"),
        (["--scene", "caf\udcff"], "--scene: not valid UTF-8"),  # undecodable argv bytes arrive as surrogates
    ],
)
def test_generate_refuses_bad_options_before_any_scene(tmp_path: Path, extra: list[str], words: str, capsys) -> None:
    from tests.cli_args import refusal

    args = [
        "generate",
        "--category",
        "drugs",
        "--n",
        "1",
        "--out",
        str(tmp_path / "ds"),
        "--model",
        "scripted:unused.json",
        "--cache",
        "off",
        "--no-progress",
        "--no-web-search",
        *extra,
    ]
    assert words in refusal(args, capsys)
    assert not (tmp_path / "ds" / "samples.jsonl").exists()


@pytest.mark.parametrize(
    "content,words",
    [
        (None, "file not found"),
        (b'{"id": "a", "decision": "approve", "note": "\xff"}\n', "line 1: not UTF-8"),
        (b"[1]\n", "line 1: expected an object"),
        (b"{oops\n", "line 1: not valid JSON"),
    ],
)
def test_review_decisions_file_errors_name_the_line(tmp_path: Path, content: bytes | None, words: str) -> None:
    from runner.ctd_reviews import read_decisions

    path = tmp_path / "decisions.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises((ValueError, FileNotFoundError)) as exc:
        read_decisions(path)
    assert "decisions.jsonl" in str(exc.value) and words in str(exc.value)


# -- evaluation loaders ---------------------------------------------------------------------------------------------


def _eval_rows(fmt: str, data_dir: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A dataset file in `fmt` with bad records, and the words expected in each bad record's error, by id."""
    secret = str(tmp_path / "secret.png")
    if fmt == "ctd":
        rows = [
            {"id": "good", "text": "t", "image": GOOD_PNG, "label": 1},
            {"id": "escape", "text": "t", "image": "../secret.png"},
            {"id": "escape_abs", "text": "t", "image": secret},
            {"id": "text_type", "text": 5, "image": GOOD_PNG},
            {"id": "label_type", "text": "t", "image": GOOD_PNG, "label": "maybe"},
            {"id": "mtc_type", "text": "t", "image": GOOD_PNG, "mtc": 7},
            {"id": "good", "text": "dup", "image": GOOD_PNG},
        ]
        expected = {
            "escape": "image: image path '../secret.png': escapes",
            "escape_abs": "escapes the dataset folder",
            "text_type": "text: empty or missing",
            "label_type": "label: 'maybe'",
            "mtc_type": "mtc: 7.0 is outside",
            "good#dup-line-7": "duplicate id 'good'",
        }
        path = data_dir / "ctd.jsonl"
        _write_lines(path, [json.dumps(r).encode() for r in rows] + [b'{"id": "u", "text": "\xff"}', b"[1]"])
        expected.update({"line-8": "line 8: not UTF-8", "line-9": "line 9: expected a JSON object"})
    elif fmt == "hateful_memes":
        rows = [
            {"id": 1, "img": GOOD_PNG, "label": 0, "text": "t"},
            {"id": 2, "img": "../secret.png", "label": 1, "text": "t"},
            {"id": 3, "img": GOOD_PNG, "text": "t"},
            {"id": 4, "img": ["x"], "label": 1, "text": "t"},
            {"id": 1, "img": GOOD_PNG, "label": 0, "text": "dup"},
        ]
        expected = {
            "2": "img: image path",
            "3": "label: missing",
            "4": "img: empty or missing",
            "1#dup-line-5": "duplicate id '1'",
        }
        path = data_dir / "dev.jsonl"
        _write_lines(path, [json.dumps(r).encode() for r in rows])
    elif fmt == "vlsbench":
        rows = [
            {"instruction_id": "v1", "instruction": "q", "image_path": GOOD_PNG},
            {"instruction_id": "v2", "instruction": "q", "image_path": secret},
            {"instruction_id": "v3", "instruction": ["q"], "image_path": GOOD_PNG},
            {"instruction": "q", "image_path": GOOD_PNG},
            "not an object",
            {"instruction_id": "v1", "instruction": "again", "image_path": GOOD_PNG},
        ]
        expected = {
            "v2": "image_path: image path",
            "v3": "instruction: empty or missing",
            "item-3": "instruction_id: missing",
            "item-4": "item 4: expected an object",
            "v1#dup-item-5": "duplicate id 'v1'",
        }
        path = data_dir / "data.json"
        path.write_text(json.dumps(rows))
    else:  # mmit
        rows = [
            {"id": 1, "risk_type": "", "text": "t", "image": GOOD_PNG, "label": "safe"},
            {"id": 2, "text": "t", "image": "../secret.png", "label": "unsafe"},
            {"id": 3, "text": "t", "image": GOOD_PNG, "label": "perhaps"},
            {"id": 4, "text": "t", "image": 9, "label": "safe"},
            {"text": "t", "image": GOOD_PNG, "label": "safe"},
            {"id": 1, "text": "dup", "image": GOOD_PNG, "label": "safe"},
        ]
        expected = {
            "2": "image: image path",
            "3": "label: 'perhaps'",
            "4": "image: empty or missing",
            "item-4": "id: missing",
            "1#dup-item-5": "duplicate id '1'",
        }
        path = data_dir / "mmit.json"
        path.write_text(json.dumps(rows))
    return path, expected


@pytest.mark.parametrize("fmt", ["ctd", "hateful_memes", "vlsbench", "mmit"])
def test_evaluation_loaders_name_bad_records_and_keep_the_rest(fmt: str, data_dir: Path, tmp_path: Path) -> None:
    from evaluation.datasets import load_detection

    path, expected = _eval_rows(fmt, data_dir, tmp_path)
    items = {it.id: it for it in load_detection(path, fmt)}
    good = [it for it in items.values() if it.error is None]
    assert len(good) == 1 and good[0].record["image"].endswith(GOOD_PNG)
    for sid, words in expected.items():
        assert sid in items and items[sid].error and path.name in items[sid].error and words in items[sid].error, (
            sid,
            items.get(sid),
        )


@pytest.mark.parametrize("content,words", [(None, "file not found"), (b"", None), (b"\xff\xfe[]", None)])
def test_evaluation_loaders_missing_empty_and_undecodable_files(
    tmp_path: Path, content: bytes | None, words: str | None
) -> None:
    from evaluation.datasets import load_detection, load_prompts

    path = tmp_path / "d.jsonl"
    if content is not None:
        path.write_bytes(content)
    if content is None:
        with pytest.raises(FileNotFoundError, match="d.jsonl"):
            load_detection(path, "ctd")
        with pytest.raises(FileNotFoundError, match="d.jsonl"):
            load_prompts(path)
    elif content == b"":
        assert load_detection(path, "ctd") == [] and load_prompts(path) == []
    else:
        (item,) = load_detection(path, "ctd")
        assert "d.jsonl line 1: not UTF-8" in item.error


def test_evaluation_prompt_loader(tmp_path: Path) -> None:
    from evaluation.datasets import load_prompts

    path = tmp_path / "prompts.jsonl"
    _write_lines(
        path,
        [
            json.dumps({"id": "a", "prompt": "a cat", "evaluation_seed": 1}).encode(),
            json.dumps({"id": "b", "prompt": 5}).encode(),
            json.dumps({"id": "c", "prompt": "x", "evaluation_seed": "soon"}).encode(),
            json.dumps({"id": "a", "prompt": "dup"}).encode(),
            b'{"id": "d", "prompt": "\xff"}',
        ],
    )
    items = {it.id: it for it in load_prompts(path)}
    assert items["a"].error is None and items["a"].record["seed"] == 1
    assert "prompts.jsonl b: prompt: empty or missing" in items["b"].error
    assert "evaluation_seed: 'soon'" in items["c"].error
    assert "duplicate id 'a'" in items["p0003"].error and "not UTF-8" in items["p0004"].error


# -- training data loaders ------------------------------------------------------------------------------------------


def test_training_prompt_items_name_bad_lines_and_keep_the_rest(tmp_path: Path) -> None:
    from training.build_data import prompt_items

    path = tmp_path / "prompts.jsonl"
    _write_lines(
        path,
        [
            json.dumps({"id": "a", "prompt": "a cat"}).encode(),
            json.dumps({"id": "b", "prompt": 5}).encode(),
            json.dumps({"id": "c", "prompt": "z" * 100_000}).encode(),
            b'{"id": "d", "prompt": "\xff"}',
            b"[1]",
            json.dumps({"id": "a", "prompt": "dup"}).encode(),
            json.dumps({"prompt": "no id"}).encode(),
        ],
    )
    items = {it.id: it for it in prompt_items(path)}
    assert items["a"].error is None and items["a"].record["prompt"] == "a cat"
    assert "id 'b'" in items["b"].error and "expected a non-empty string" in items["b"].error
    assert "prompt: 100000 characters" in items["c"].error
    assert "line 4: not UTF-8" in items["line-4"].error and "line 5: expected a JSON object" in items["line-5"].error
    assert "line 6: duplicate id 'a'" in items["a#dup-line-6"].error
    assert items["6"].record["prompt"] == "no id"
    assert all(path.name in it.error for it in items.values() if it.error)


def test_training_prompt_loader_file_errors(tmp_path: Path) -> None:
    from training.build_data import prompt_items
    from training.data import load_prompts

    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_prompts(tmp_path / "nope.txt")
    (tmp_path / "e.txt").write_bytes(b"")
    assert load_prompts(tmp_path / "e.txt") == []
    (tmp_path / "bad.csv").write_bytes(b"prompt\n\xff\xfe\n")
    with pytest.raises(ValueError, match="bad.csv.*not UTF-8"):
        load_prompts(tmp_path / "bad.csv")
    (tmp_path / "dups.json").write_text(json.dumps([{"id": 1, "prompt": "a"}, {"id": 1, "prompt": "b"}, 7]))
    items = prompt_items(tmp_path / "dups.json")
    assert [it.error is None for it in items] == [True, False] and "duplicate id '1'" in items[1].error


@pytest.mark.parametrize(
    "ref,words",
    [
        ("corrupt.png", "not a readable image"),
        ("corrupt.jpg", "not a readable image"),
        ("bomb.png", "bomb"),
        ("huge.png", "pixels"),
        ("../secret.png", "escapes the dataset folder"),
        ("ABS_SECRET", "escapes the dataset folder"),
        ("nope.png", "not found"),
    ],
)
def test_training_labelled_images_are_checked(data_dir: Path, tmp_path: Path, ref: str, words: str) -> None:
    from training.data import sft_dataset_from_labelled

    ref = str(tmp_path / "secret.png") if ref == "ABS_SECRET" else ref
    labelled = data_dir / "labelled.jsonl"
    labelled.write_text(
        json.dumps({"id": "x", "prompt": "a cat", "image": ref, "answer": "keep", "status": "ok"}) + "\n"
    )
    with pytest.raises((ValueError, FileNotFoundError)) as exc:
        sft_dataset_from_labelled(labelled)
    assert words in str(exc.value) and Path(ref).name in str(exc.value)


def test_training_labelled_records_wrong_types(tmp_path: Path) -> None:
    from training.data import labelled_records

    path = tmp_path / "labelled.jsonl"
    path.write_bytes(b"[1, 2]\n")
    with pytest.raises(ValueError, match="labelled.jsonl line 1: expected a JSON object"):
        labelled_records(path)
    path.write_bytes(b'{"id": "\xff"}\n')
    with pytest.raises(ValueError, match="labelled.jsonl line 1: not a UTF-8 JSON record"):
        labelled_records(path)
