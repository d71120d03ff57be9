"""SIUO, MSSBench and HoliSafe loaders on fixtures written in each benchmark's published layout."""

import json
from pathlib import Path

import pytest

from evaluation.datasets import detect_format, load_detection

FIX = Path(__file__).parent.parent / "fixtures" / "eval"


def _ok(items):
    return {it.id: it.record for it in items if it.error is None}


def _bad(items):
    return {it.id: it.error for it in items if it.error is not None}


def test_siuo_pairs_are_unsafe_together_and_images_resolve_under_images():
    items = load_detection(FIX / "siuo" / "siuo_gen.json", "siuo")
    ok, bad = _ok(items), _bad(items)
    assert set(ok) == {"siuo-1001", "siuo-1002", "siuo-4001"}
    assert all(r["label"] == 1 for r in ok.values())
    # categories in the project's vocabulary, the benchmark's spelling kept beside
    assert ok["siuo-4001"]["category"] == "privacy" and ok["siuo-4001"]["source_category"] == "privacy violation"
    assert Path(ok["siuo-1001"]["image"]) == (FIX / "siuo" / "images" / "S-01.png").resolve()
    assert ok["siuo-1001"]["text"].startswith("I want to go to a new world")
    # The record with an empty question is a failure naming the file, the record and the field.
    (msg,) = bad.values()
    assert "siuo_gen.json" in msg and "question_id 4002" in msg and "question" in msg


def test_mssbench_gives_a_safe_and_an_unsafe_sample_per_query():
    items = load_detection(FIX / "mssbench" / "combine.json", "mssbench")
    ok, bad = _ok(items), _bad(items)
    assert set(ok) == {
        "mss-chat-0-0-safe",
        "mss-chat-0-0-unsafe",
        "mss-chat-0-1-safe",
        "mss-chat-0-1-unsafe",
        "mss-emb-0-0-safe",
        "mss-emb-0-0-unsafe",
    }
    safe, unsafe = ok["mss-chat-0-1-safe"], ok["mss-chat-0-1-unsafe"]
    assert (safe["label"], unsafe["label"]) == (0, 1)
    assert safe["text"] == unsafe["text"] == "How hard should I swing to improve my drive?"
    assert Path(safe["image"]).name == "safe_1.jpg" and Path(unsafe["image"]).parent.name == "chat"
    assert unsafe["image_description"] == "a crowded subway platform" and unsafe["category"] == "violence"
    assert unsafe["source_category"] == "physical harm"
    emb = ok["mss-emb-0-0-unsafe"]
    assert emb["text"].startswith("Put the metal bowl") and Path(emb["image"]).name == "unsafe_kitchen.png"
    assert (emb["category"], emb["source_category"]) == ("crimes", "property damage")
    assert ok["mss-emb-0-0-safe"]["label"] == 0
    (msg,) = bad.values()
    assert "combine.json chat[1]" in msg and "queries" in msg
    toxic = _ok(load_detection(FIX / "mssbench" / "combine.json", "mssbench", include_benign=False))
    assert all(k.endswith("-unsafe") for k in toxic) and len(toxic) == 3


def test_holisafe_labels_come_from_the_type_and_images_from_images():
    items = load_detection(FIX / "holisafe" / "holisafe_bench.json", "holisafe")
    ok, bad = _ok(items), _bad(items)
    labels = {k: (r["holisafe_type"], r["label"]) for k, r in ok.items()}
    assert labels == {
        "holisafe-1": ("SUU", 1),
        "holisafe-3": ("UUU", 1),
        "holisafe-4": ("USU", 1),
        "holisafe-7": ("SSS", 0),
        "holisafe-6": ("SSU", 1),
    }
    assert ok["holisafe-3"]["category"] == "violence" and ok["holisafe-3"]["sub_category"] == "terrorism"
    assert Path(ok["holisafe-6"]["image"]).is_file()
    (msg,) = bad.values()
    assert "holisafe_bench.json id 8" in msg and "type" in msg and "SXS" in msg


def test_formats_are_recognised_without_being_named():
    assert detect_format(FIX / "siuo" / "siuo_gen.json") == "siuo"
    assert detect_format(FIX / "mssbench" / "combine.json") == "mssbench"
    assert detect_format(FIX / "holisafe" / "holisafe_bench.json") == "holisafe"
    assert detect_format(FIX / "vlsbench" / "data.json") == "vlsbench"  # the older layouts are still found


def test_unreadable_file_and_wrong_shape_name_the_file_and_field(tmp_path):
    broken = tmp_path / "combine.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="combine.json: cannot be read as JSON"):
        load_detection(broken, "mssbench")
    broken.write_text(json.dumps({"chat": []}))
    with pytest.raises(ValueError, match="combine.json: field 'embodied' missing"):
        load_detection(broken, "mssbench")
    flat = tmp_path / "siuo_gen.json"
    flat.write_text(json.dumps({"question_id": 1}))
    with pytest.raises(ValueError, match="siuo_gen.json: expected a JSON list"):
        load_detection(flat, "siuo")


def test_image_paths_cannot_leave_the_dataset_folder(tmp_path):
    data = tmp_path / "holisafe.json"
    data.write_text(json.dumps([{"id": 1, "image": "../../etc/passwd", "query": "q", "type": "SSU"}]))
    (msg,) = _bad(load_detection(data, "holisafe")).values()
    assert "image" in msg and "id 1" in msg


@pytest.mark.parametrize("kind", ["holisafe", "siuo", "mssbench"])
def test_an_absolute_image_path_is_kept_as_given_or_refused_naming_the_file(tmp_path, kind):
    """An absolute path was rewritten under `images/` (`images//abs/...`): now one inside the dataset folder is
    kept as given and one outside it is refused, naming the file, the record and the field, as `../` is."""
    base = tmp_path / "bench"
    (base / "images").mkdir(parents=True)
    (base / "chat").mkdir()
    (base / "elsewhere").mkdir()
    inside, outside = base / "elsewhere" / "a.png", tmp_path / "outside.png"
    for path in (inside, outside):
        path.write_bytes(b"")  # only its path is checked here

    def write(image):
        if kind == "holisafe":
            rows, name, field = (
                [{"id": 1, "image": image, "query": "q", "type": "SSU", "category": "c"}],
                "h.json",
                "image",
            )
        elif kind == "siuo":
            rows = [
                {
                    "question_id": 1,
                    "image": image,
                    "question": "q",
                    "category": "self-harm",
                    "safety_warning": "w",
                    "reference_answer": "r",
                }
            ]
            name, field = "siuo_gen.json", "image"
        else:
            rows = {
                "chat": [
                    {"safe_image_path": image, "unsafe_image_path": image, "intent": "i", "Type": "t", "queries": ["q"]}
                ],
                "embodied": [],
            }
            name, field = "combine.json", "safe_image_path"
        path = base / name
        path.write_text(json.dumps(rows))
        return path, field

    path, field = write(str(inside))
    items = load_detection(path, kind)
    assert not _bad(items), _bad(items)
    assert {Path(r["image"]) for r in _ok(items).values()} == {inside.resolve()}

    path, field = write(str(outside))
    bad = _bad(load_detection(path, kind))
    assert bad and all(
        path.name in msg and field in msg and "escapes the dataset folder" in msg for msg in bad.values()
    )
    assert not _ok(load_detection(path, kind))


def _holisafe(tmp_path, rows):
    path = tmp_path / "holisafe.json"
    path.write_text(
        json.dumps(
            [
                {"id": rid, "image": "x.png", "query": f"q {k}", "type": "SSU", "category": "c"}
                for k, rid in enumerate(rows)
            ]
        )
    )
    (tmp_path / "x.png").write_bytes(b"")  # only its path is checked here
    return path


def test_repeated_ids_each_get_an_id_of_their_own_as_the_batch_reader_makes_them(tmp_path):
    # three records share an id, and the file also uses the id a naive scheme would make for a repeat
    path = _holisafe(tmp_path, [7, 7, 7, "7#dup-item-1"])
    items = load_detection(path, "holisafe")
    ids = [it.id for it in items]
    assert len(ids) == len(set(ids)) == 4  # one record per item in a run file, so no failure can hide
    bad = _bad(items)
    assert len(bad) == 2 and all("duplicate id 'holisafe-7'" in msg and "holisafe.json" in msg for msg in bad.values())
    assert "holisafe-7" in _ok(items)


@pytest.mark.parametrize(
    "body, what",
    [
        ('[\n{"id": 1,\n "query": ' + "9" * 5000 + "}]", "line 3"),
        ("[\n" + "[" * 100_000 + "]" * 100_000 + "\n]", "line 2"),
    ],
    ids=["huge-number", "deep-nesting"],
)
def test_huge_numbers_and_deep_nesting_are_one_error_naming_the_file_and_line(tmp_path, body, what):
    path = tmp_path / "holisafe.json"
    path.write_text(body)
    with pytest.raises(ValueError, match="holisafe.json") as exc:
        load_detection(path, "holisafe")
    assert what in str(exc.value)
