"""`unveil review --decisions FILE`: every unusable line is one error naming the file and the line, and nothing of
the file is applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unveil.cli import main


@pytest.mark.parametrize(
    "second_line, words",
    [
        ({"id": "s2", "decision": "maybe"}, "line 2: decision: 'maybe' is not approve, reject, note or undo"),
        ({"id": "s2", "decision": True}, "line 2: decision: expected a string"),
        ({"id": ["s2"], "decision": "approve"}, "line 2: id: expected a sample id"),
        ({"id": "s2", "decision": "reject", "note": 5}, "line 2: note: expected a string"),
        ({"decision": "approve"}, "line 2: expected an object with an id"),
        ("[]", "line 2: expected an object"),
    ],
)
def test_bad_decisions_name_the_file_and_line(tmp_path: Path, capsys, second_line, words: str) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    samples = "".join(
        json.dumps({"id": sid, "status": "pending_review", "category": "drugs"}) + "\n" for sid in ("s1", "s2")
    )
    (ds / "samples.jsonl").write_text(samples)
    decisions = tmp_path / "my-decisions.jsonl"
    line = second_line if isinstance(second_line, str) else json.dumps(second_line)
    decisions.write_text(json.dumps({"id": "s1", "decision": "approve"}) + "\n" + line + "\n")
    assert main(["review", str(ds), "--decisions", str(decisions)]) == 1
    err = capsys.readouterr().err
    assert "my-decisions.jsonl" in err and words in err, err
    assert (ds / "samples.jsonl").read_text() == samples  # the good first line was not applied either


def test_an_undecided_queue_line_is_skipped_and_a_note_is_valid(tmp_path: Path, capsys) -> None:
    from runner.ctd_reviews import read_decisions

    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"id": "a", "decision": ""})
        + "\n"
        + json.dumps({"id": "b", "decision": "note", "note": "check"})
        + "\n"
        + json.dumps({"id": 7, "decision": "Approved", "note": None})
        + "\n"
    )
    got = read_decisions(path)
    assert got["a"] == {"decision": "", "note": ""} and got["b"]["decision"] == "note"
    assert got["7"] == {"decision": "Approved", "note": ""}


@pytest.mark.parametrize("failing", ["decisions.jsonl", "samples.jsonl"])
def test_a_decision_is_never_applied_without_its_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """The log is written first: when `decisions.jsonl` cannot be written nothing changes; when `samples.jsonl`
    cannot, the decision is logged and the record keeps its state; the error says which (before, a full disk let
    the record change with no log line)."""
    import errno

    from runner.ctd_dataset import DECISIONS, SAMPLES, load_samples
    from runner.ctd_reviews import apply_reviews
    from tests.ui_data import make_ctd_dataset
    from tools import review_log

    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][0]
    real = review_log.append_lines

    def full(path: Path, data: bytes) -> None:
        if path.name == failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(review_log, "append_lines", full)
    logged = (ds / DECISIONS).read_text() if (ds / DECISIONS).exists() else ""
    with pytest.raises(review_log.ReviewWriteError, match=failing) as err:
        apply_reviews(ds, {sample: {"decision": "approve", "reviewer": "ann"}})
    assert load_samples(ds)[sample]["status"] == "pending_review"
    now = (ds / DECISIONS).read_text() if (ds / DECISIONS).exists() else ""
    if failing == DECISIONS:
        assert "nothing was saved" in str(err.value) and now == logged
    else:
        assert failing == SAMPLES and "are in decisions.jsonl" in str(err.value)
        assert json.loads(now.splitlines()[-1])["id"] == sample


def test_a_record_over_the_line_cap_is_refused_by_the_writer_and_shown_as_bad_by_the_web_app(tmp_path: Path) -> None:
    """Every reader skips a line over the 4 MiB cap and would go on with the id's earlier record: a decision whose
    record would cross the cap is refused before anything is written, and a file that holds such a line (an older
    version's) shows that id as bad in the web app, which takes no decision on its stale copy."""
    from runner.ctd_dataset import DECISIONS, SAMPLES
    from runner.ctd_reviews import apply_reviews
    from tests.ui_data import make_ctd_dataset
    from tools.jsonl_files import MAX_LINE_BYTES
    from tools.review_log import ReviewWriteError
    from unveil.ui.sources import CtdSource

    ds = tmp_path / "ds"
    first, second = make_ctd_dataset(ds)["pending"][:2]
    records = {json.loads(ln)["id"]: json.loads(ln) for ln in (ds / SAMPLES).read_text().splitlines()}
    line = json.dumps({**records[first], "text": ""}, ensure_ascii=True) + "\n"
    with (ds / SAMPLES).open("a") as fh:  # a record just under the cap: one more history entry crosses it
        fh.write(json.dumps({**records[first], "text": "x" * (MAX_LINE_BYTES - len(line) - 10)}, ensure_ascii=True))
        fh.write("\n")
    before = (ds / SAMPLES).read_bytes()
    with pytest.raises(ReviewWriteError, match="over the .*line cap every reader uses; nothing was saved"):
        apply_reviews(ds, {first: {"decision": "note", "note": "seen"}}, views=False)
    assert (ds / SAMPLES).read_bytes() == before and not (ds / DECISIONS).exists()

    stale = records[second]
    with (ds / SAMPLES).open("a") as fh:
        fh.write(json.dumps({"id": second, **stale, "text": "y" * MAX_LINE_BYTES}) + "\n")
    web = CtdSource(ds)
    assert [r for r in web.rows() if r["id"] == second][0]["bad"] is True
    assert "over" in web.problem(second).reason and web.record(second) is None
    assert web.decide(second, "approve", "", ("ann", "local"))["skipped"] == 1
    third = [sid for sid in records if sid not in (first, second) and records[sid]["status"] == "pending_review"][0]
    assert web.decide(third, "approve", "", ("ann", "local"))["approved"] == 1  # the others go on


def test_the_summary_says_sent_back_an_undo_refused_exits_1_and_the_export_names_its_folder(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """Issue 45 (low): a refused undo exited 0, a send back was counted as "rejected 1", and `--export` named only
    the Parquet file, not the folder that holds the JSONL, the CSV and the card too."""
    from runner.ctd_dataset import load_samples
    from tests.ui_data import make_ctd_dataset
    from tools.reviewers import REVIEWERS, add_reviewer

    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]
    alice, bob = (add_reviewer(root / REVIEWERS, n) for n in ("alice", "bob"))
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", alice)
    capsys.readouterr()
    assert main(["review", str(root), "--reject", first, "--send-back", "--note", "hide the scale"]) == 0
    err = capsys.readouterr().err
    assert "approved 0, rejected 0, sent back 1 to the Eraser" in err
    assert main(["review", str(root), "--approve", second]) == 0
    undo = tmp_path / "undo.jsonl"
    undo.write_text(json.dumps({"id": second, "decision": "undo", "undoes": 0}) + "\n")
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", bob)
    capsys.readouterr()
    assert main(["review", str(root), "--decisions", str(undo)]) == 1  # alice's entry: not bob's to undo
    assert "1 undos refused (another reviewer's entry" in capsys.readouterr().err
    assert load_samples(root)[second]["status"] == "accepted"
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", alice)
    assert main(["review", str(root), "--decisions", str(undo), "--export"]) == 0
    err = capsys.readouterr().err
    assert "undone 1" in err and load_samples(root)[second]["status"] == "pending_review"
    assert f"export written to {root / 'export'}/ (data.parquet, data.jsonl, data.csv and the dataset card" in err
