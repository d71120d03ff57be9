"""`unveil compare` through the real CLI on real `unveil detect` outputs: labelled inputs are scored, N runs as a
matrix, the HTML report, the gates and their exit code, and the refusals (disjoint files, a folder, a closed pipe).

Models are `scripted:` files; the vanilla detector answers toxic for a text with OVERT, so every count below can
be worked out by hand.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.unveil.test_workflow_cli import detect_args, main, write_pairs
from tools.jsonl_files import done_records

pytestmark = pytest.mark.usefixtures("no_pictures")


def detect(data: Path, out: Path, *extra: str) -> Path:
    """`unveil detect --input DATA --output OUT` (vanilla by default; `--method tag --l-max 2` in `extra`)."""
    assert main(detect_args(data, out, *extra)) == 0
    return out


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Vanilla and TAG detect outputs of four labelled pairs (two categories); vanilla misses `OVERT b` (benign)."""
    data = tmp_path / "d.jsonl"
    rows = [
        {"id": "s0", "text": "OVERT a", "image_description": "a street", "label": 1, "category": "violence"},
        {"id": "s1", "text": "a walk", "image_description": "a park", "label": 0, "category": "benign"},
        {"id": "s2", "text": "OVERT b", "image_description": "a park", "label": 0, "category": "benign"},
        {"id": "s3", "text": "quiet", "image_description": "a street", "label": 1, "category": "violence"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = detect(data, tmp_path / "a.jsonl")
    b = detect(data, tmp_path / "b.jsonl", "--method", "tag", "--l-max", "2")
    return a, b


def test_compare_of_two_detect_outputs_scores_their_input_labels(two_runs, capsys):
    a, b = two_runs
    rec = done_records(a)["s0"]
    # detect keeps the input's ground truth; the method's own category moves beside it
    assert (rec["label"], rec["category"], rec["predicted_category"]) == (1, "violence", "violence")
    assert not done_records(a)["s1"]["predicted_category"]  # a benign verdict names no category
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    overall = result["groups"][0]
    assert overall["n"] == 4 and result["labelled"] == 4
    assert overall["a_accuracy"] == pytest.approx(2 / 4)  # s0 right, s1 right, s2 wrong, s3 wrong
    assert {(g["group"], g["value"]) for g in result["groups"][1:]} == {
        ("category", "benign"),
        ("category", "violence"),
    }
    assert "vanilla" in result["a_name"] and "tag" in result["b_name"]


def test_compare_says_plainly_when_no_record_carries_a_label(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"s{k}", "text": t, "image_description": "x"}) + "\n"
            for k, t in enumerate(["OVERT", "b"])
        )
    )
    a, b = detect(data, tmp_path / "a.jsonl"), detect(data, tmp_path / "b.jsonl")
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    shown = capsys.readouterr().out
    assert "no shared sample carries a ground-truth label" in shown and "acc A" not in shown


def test_compare_of_disjoint_files_is_refused_naming_them(tmp_path, capsys):
    a = detect(write_pairs(tmp_path / "a_in.jsonl", ["OVERT", "b"]), tmp_path / "a.jsonl")
    rows = [{"id": "other", "text": "c", "image_description": "x", "label": 0}]
    (tmp_path / "b_in.jsonl").write_text(json.dumps(rows[0]) + "\n")
    b = detect(tmp_path / "b_in.jsonl", tmp_path / "b.jsonl")
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert "share no finished sample" in err and str(a) in err and str(b) in err


def test_compare_of_an_evaluation_folder_names_its_run_files(tmp_path, capsys):
    from tests.unveil.test_workflow_cli import evaluate_args

    data = write_pairs(tmp_path / "d.jsonl", ["OVERT a", "b"])
    out = tmp_path / "out"
    assert main(evaluate_args(data, out)) == 0
    capsys.readouterr()
    assert main(["compare", str(out), str(out)]) == 1
    err = capsys.readouterr().err
    (run_file,) = (out / "runs").rglob("*.jsonl")
    assert "is a folder" in err and str(run_file) in err


def flipped(src: Path, dst: Path, sample: str, **changes: object) -> Path:
    """A copy of a results file with one record's fields changed (another run's verdicts, without a model)."""
    recs = [json.loads(line) for line in src.read_text().splitlines()]
    for rec in recs:
        if rec["id"] == sample:
            rec.update(changes)
    dst.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return dst


def test_three_runs_make_a_matrix_and_a_self_contained_escaped_html_report(two_runs, tmp_path, capsys):
    a, b = two_runs
    # a third run that finds s3, with markup in a category: it must reach the page as text
    c = flipped(a, tmp_path / "c.jsonl", "s3", toxic=True, category="<script>alert(1)</script>")
    page = tmp_path / "report.html"
    capsys.readouterr()
    assert main(["compare", str(c), str(a), str(b), "--html", str(page)]) == 0
    shown = capsys.readouterr().out
    assert "[1]" in shown and "[3]" in shown and "F2" in shown and "accuracy" in shown
    assert "category=<script>alert(1)</script> " in shown  # a long group name whole, not cut at 24 characters
    html = page.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http" not in html and "<script" not in html and "<link" not in html  # no CDN, no script
    assert html.count("class='differ'") == 1  # s3: toxic in c only
    assert "cache hits" in html and str(a) in html and "vanilla" in html

    assert main(["compare", str(a), str(b), str(c), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [len(g["runs"]) for g in result["groups"]] == [3] * len(result["groups"])
    assert [r["path"] for r in result["runs"]] == [str(a), str(b), str(c)]
    assert result["groups"][0]["runs"][2]["accuracy"] == pytest.approx(3 / 4)


def test_gates_per_group_and_against_a_baseline_fail_with_exit_3(two_runs, tmp_path, capsys):
    a, _ = two_runs
    worse = flipped(a, tmp_path / "worse.jsonl", "s0", toxic=False)  # misses s0: accuracy 1/4 against 2/4
    capsys.readouterr()
    assert main(["compare", str(worse), "--fail-if-worse-than", str(a), "--worse-on", "accuracy", "--by", "0.3"]) == 0
    assert main(["compare", str(worse), "--fail-if-worse-than", str(a), "--worse-on", "accuracy", "--by", "0.2"]) == 3
    err = capsys.readouterr().err
    assert "gate missed" in err and "accuracy = 0.2500 is worse than the baseline's 0.5000" in err
    page = tmp_path / "gates.html"
    argv = ["compare", str(a), str(worse), "--fail-if-worse-than", str(a), "--html", str(page)]
    assert main(argv) == 3  # the default: F2, overall
    assert "f2 = " in capsys.readouterr().err
    assert "1 gate(s) missed" in page.read_text() and "(baseline)" in page.read_text()  # the CI artifact says so

    # per category: the benign group's accuracy is 1/2 (s2 is a false alarm)
    assert main(["compare", str(a), str(worse), "--fail-under", "accuracy@category=benign=0.5"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(worse), "--fail-under", "accuracy@category=benign=0.75"]) == 3
    assert "accuracy@category=benign = 0.5000 is under 0.75" in capsys.readouterr().err
    assert main(["compare", str(a), str(worse), "--fail-under", "f2@category=drugs=0.7"]) == 3
    assert "no labelled shared sample" in capsys.readouterr().err
    assert main(["compare", str(a), str(worse), "--fail-under", "f2@colour=red=0.7"]) == 1
    assert "LEVEL one of category, bin" in capsys.readouterr().err
    assert main(["compare", str(a), str(worse), "--by", "0.1"]) == 1
    assert "need --fail-if-worse-than" in capsys.readouterr().err


def test_compare_json_into_a_closed_pipe_exits_quietly(two_runs, capsys, monkeypatch):
    a, b = two_runs
    read, write = os.pipe()
    os.close(read)  # the reader (`head`) is gone
    pipe = os.fdopen(write, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", pipe)
    try:
        rc = main(["compare", str(a), str(b), "--json"])
    finally:
        monkeypatch.undo()
        pipe.close()
    assert rc == 141
    assert "internal error" not in capsys.readouterr().err


def test_detect_writes_and_compare_lists_samples_in_the_inputs_order(tmp_path, capsys):
    data = write_pairs(tmp_path / "d.jsonl", ["OVERT a", "b", "OVERT c", "d"])
    first = tmp_path / "first.jsonl"
    first.write_text(data.read_text().splitlines()[2] + "\n")  # s2 alone: an earlier run wrote it first
    out = detect(first, tmp_path / "out.jsonl")
    detect(data, out)
    assert list(done_records(out)) == ["s0", "s1", "s2", "s3"]
    capsys.readouterr()
    assert main(["compare", str(out), str(out)]) == 0
    listed = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.startswith(" s")]
    assert listed == ["s0", "s1", "s2", "s3"]
