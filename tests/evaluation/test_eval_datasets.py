"""Each evaluation loader on a small fixture in its dataset's own layout."""

from pathlib import Path

from evaluation.datasets import load_detection, load_prompts
from tools.datafiles import IPR_EVAL_PROMPTS, data_file

FIX = Path(__file__).parent.parent / "fixtures" / "eval"
SPLIT_300 = data_file(IPR_EVAL_PROMPTS)  # the repository's copy (data/README.md)


def _ok(items):
    return {it.id: it.record for it in items if it.error is None}


def _bad(items):
    return {it.id: it.error for it in items if it.error is not None}


def test_hateful_memes_layout_labels_and_bad_lines():
    items = load_detection(FIX / "hateful_memes" / "dev_seen.jsonl", "hateful_memes")
    ok, bad = _ok(items), _bad(items)
    assert set(ok) == {"42953", "23058", "13894"}
    assert ok["42953"]["label"] == 0 and ok["23058"]["label"] == 1
    assert Path(ok["23058"]["image"]) == (FIX / "hateful_memes" / "img" / "23058.png").resolve()
    assert Path(ok["23058"]["image"]).is_file()
    # The escaping path and the unlabelled line are listed as failures, not dropped.
    assert "escapes the dataset folder" in bad["99999"]
    assert "label" in bad["11111"]


def test_hateful_memes_toxic_only_drops_benign():
    ok = _ok(load_detection(FIX / "hateful_memes" / "dev_seen.jsonl", "hateful_memes", include_benign=False))
    assert set(ok) == {"23058", "13894"}


def test_vlsbench_layout():
    items = load_detection(FIX / "vlsbench" / "data.json", "vlsbench")
    ok = _ok(items)
    assert set(ok) == {"3", "17"}
    assert all(r["label"] == 1 for r in ok.values())
    assert ok["3"]["category"] == "crimes" and ok["3"]["sub_category"] == "Cybercrime"
    assert ok["3"]["source_category"] == "Illegal Activity"
    assert ok["17"]["image_description"].startswith("A folding knife")
    assert Path(ok["17"]["image"]).is_file()


def test_mmit_layout_images_per_risk_type_and_human_label():
    ok = _ok(load_detection(FIX / "mmit" / "all_content.json", "mmit"))
    assert set(ok) == {"content-0", "content-1"}
    assert ok["content-0"]["label"] == 1
    # human_safety_label wins over the generated label
    assert ok["content-1"]["label"] == 0
    assert Path(ok["content-1"]["image"]) == (FIX / "mmit" / "Illegal_Activities_and_Crimes" / "5.png").resolve()


def test_ctd_export_layout_with_reference_mtc_and_benign():
    ok = _ok(load_detection(FIX / "ctd" / "ctd_export.jsonl", "ctd"))
    assert ok["ctd-0001"]["mtc"] == 0.85 and ok["ctd-0001"]["label"] == 1
    assert ok["ctd-0003"]["label"] == 0 and ok["ctd-0003"]["image"] is None
    assert ok["ctd-0003"]["image_description"]


def test_auto_format_detection():
    assert set(_ok(load_detection(FIX / "hateful_memes" / "dev_seen.jsonl"))) == {"42953", "23058", "13894"}
    assert set(_ok(load_detection(FIX / "vlsbench" / "data.json"))) == {"3", "17"}
    assert set(_ok(load_detection(FIX / "mmit" / "all_content.json"))) == {"content-0", "content-1"}


def test_i2p_csv_prompts():
    items = load_prompts(FIX / "i2p" / "i2p_sample.csv")
    ok = _ok(items)
    assert len(ok) == 6
    first = ok["i2p-0"]
    assert first["prompt"].startswith("weird and disturbing portrait")
    assert first["category"] == "violence" and "self-harm" in first["i2p_categories"]
    assert first["seed"] == 4261553411 and first["guidance"] == 13.0 and first["width"] == 512


def test_ipr_split_jsonl_prompts_and_filters():
    ok = _ok(load_prompts(FIX / "i2p" / "ipr_eval_sample.jsonl"))
    assert [r["category"] for r in ok.values()] == [
        "self-harm",
        "self-harm",
        "shocking",
        "shocking",
        "sexual",
        "sexual",
    ]
    assert ok["p0000"]["seed"] == 2996388497
    only = _ok(
        load_prompts(FIX / "i2p" / "ipr_eval_sample.jsonl", categories=["sexual", "shocking"], limit_per_category=1)
    )
    assert [r["category"] for r in only.values()] == ["shocking", "sexual"]


def test_real_300_split_has_six_categories_of_50():
    ok = _ok(load_prompts(SPLIT_300))
    assert len(ok) == 300
    counts = {}
    for r in ok.values():
        counts[r["category"]] = counts.get(r["category"], 0) + 1
    assert set(counts.values()) == {50} and len(counts) == 6
