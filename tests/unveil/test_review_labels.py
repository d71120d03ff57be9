"""The label schema beside approve/reject (issue 34 item 9): the category corrected in place, a required
rationale where the dataset's rule asks for one, optional ratings within their bounds, configured per dataset by
`labels.json`; through `apply_reviews`, `unveil review --decisions` and the web app (in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphs.ctd.labels import LabelSchemaError, load_schema
from runner.ctd_dataset import load_samples
from runner.ctd_reviews import apply_reviews
from tests.unveil.test_review_auth import csrf_of, log_lines, pending_folder, web
from unveil.cli import main

SCHEMA = {"category": True, "rationale": "reject", "ratings": {"covertness": [1, 5]}}


def folder(tmp_path: Path) -> Path:
    root = pending_folder(tmp_path / "ds", "a", "b", "c")
    (root / "labels.json").write_text(json.dumps(SCHEMA))
    return root


def test_labels_are_checked_and_kept(tmp_path: Path) -> None:
    root = folder(tmp_path)
    with pytest.raises(LabelSchemaError, match="'b'.*rationale .*required for a rejection"):
        apply_reviews(root, {"a": {"decision": "approve"}, "b": {"decision": "reject"}})
    assert log_lines(root) == []  # all or nothing
    with pytest.raises(LabelSchemaError, match="outside 1 to 5"):
        apply_reviews(root, {"a": {"decision": "approve", "ratings": {"covertness": 9}}})
    with pytest.raises(LabelSchemaError, match="not one of"):
        apply_reviews(root, {"a": {"decision": "approve", "category": "weather"}})
    with pytest.raises(LabelSchemaError, match="'beauty': not in"):
        apply_reviews(root, {"a": {"decision": "approve", "ratings": {"beauty": 3}}})
    counts = apply_reviews(
        root,
        {
            "a": {"decision": "approve", "category": "self-harm", "ratings": {"covertness": "4"}},
            "b": {"decision": "reject", "note": "the caption names the drug"},
        },
    )
    assert counts["approved"] == 1 and counts["rejected"] == 1
    a = load_samples(root)["a"]
    assert a["category"] == "self_harm" and a["category_generated"] == "drugs"
    assert a["review"]["reviews"][0]["ratings"] == {"covertness": 4}
    assert log_lines(root)[0]["category"] == "self_harm" and log_lines(root)[0]["ratings"] == {"covertness": 4}
    # Undoing the correction gives the generated category back.
    apply_reviews(root, {"a": {"decision": "undo", "undoes": 0}})
    assert load_samples(root)["a"]["category"] == "drugs"


def test_a_bad_schema_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / "labels.json").write_text(json.dumps({"rationale": "sometimes"}))
    with pytest.raises(LabelSchemaError, match="labels.json: rationale"):
        load_schema(tmp_path)
    assert load_schema(tmp_path / "none") is None


def test_decisions_file_carries_labels(tmp_path: Path, capsys) -> None:
    root = folder(tmp_path)
    decisions = tmp_path / "d.jsonl"
    decisions.write_text(json.dumps({"id": "c", "decision": "approve", "category": "fraud"}) + "\n")
    assert main(["review", str(root), "--decisions", str(decisions)]) == 0
    assert load_samples(root)["c"]["category"] == "fraud"
    assert main(["review", str(root), "--reject", "a"]) == 1
    assert "rationale" in capsys.readouterr().err


def test_the_web_app_shows_the_schema_and_refuses_a_missing_rationale(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    (root / "labels.json").write_text(json.dumps(SCHEMA))
    client = web(root)
    page = client.get("/review", params={"id": first}).text
    assert 'id="label-category"' in page and 'name="rating_covertness"' in page and "Rationale (required" in page
    form = {"id": first, "decision": "reject", "csrf": csrf_of(client)}
    client.post("/review/decide", data=form)
    shown = client.get("/review", params={"id": first}).text
    assert "Not saved: sample" in shown and "rationale" in shown
    assert load_samples(root)[first]["status"] == "pending_review"
    form = {**form, "decision": "approve", "label_category": "crimes", "rating_covertness": "3"}
    client.post("/review/decide", data=form)
    rec = load_samples(root)[first]
    assert rec["status"] == "accepted" and rec["category"] == "crimes"
    assert rec["review_history"][-1]["ratings"] == {"covertness": 3}
    history = client.get("/review", params={"id": first, "status": ""}).text
    assert "category crimes" in history and "covertness 3" in history and "(generated as fraud)" in history


def test_send_back_from_the_web_app_needs_a_note(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    client = web(root)
    assert 'id="send-back"' in client.get("/review", params={"id": first}).text
    form = {"id": first, "decision": "send_back", "csrf": csrf_of(client)}
    client.post("/review/decide", data=form)
    assert "with a note" in client.get("/review", params={"id": first}).text
    assert load_samples(root)[first]["status"] == "pending_review"
    client.post("/review/decide", data={**form, "note": "too literal: hide the scale"})
    assert "sent back to the Eraser" in client.get("/review").text
    rec = load_samples(root)[first]
    assert rec["status"] == "sent_back" and rec["send_back"]["note"] == "too literal: hide the scale"
    assert "Sent back to the Eraser by" in client.get("/review", params={"id": first, "status": ""}).text
    # Undoing the rejection sends nothing back.
    assert apply_reviews(root, {first: {"decision": "undo", "undoes": 0}})["undone"] == 1
    assert "send_back" not in load_samples(root)[first]


def test_a_category_correction_is_its_own_field_and_waits_for_the_deciding_decision(tmp_path: Path) -> None:
    """Issue 45 item 1: the correction shared the name `category` with the queue's filter, so a decision narrowed
    the queue to the chosen category, every decision recorded a category (bob's untouched reject logged alice's
    "crimes"), and one reviewer's pending correction changed the record before anyone agreed."""
    from fastapi.testclient import TestClient

    from tests.ui_data import make_ctd_dataset
    from tests.unveil.test_review_auth import sign_in
    from tools.reviewers import REVIEWERS, add_reviewer

    root = tmp_path / "ds"
    first, second, third = make_ctd_dataset(root)["pending"][:3]
    (root / "labels.json").write_text(json.dumps({"category": True}))
    alice, bob = (add_reviewer(root / REVIEWERS, n) for n in ("alice", "bob"))
    client = web(root, min_reviewers=2)
    other = TestClient(client.app, base_url="http://127.0.0.1", follow_redirects=False)
    sign_in(client, alice), sign_in(other, bob)
    shown = client.get("/review", params={"id": first}).text
    assert 'name="label_category"' in shown and '<option value="drugs" selected>drugs</option>' in shown
    assert "no correction is recorded and the sample stays fraud" in shown  # the judges' category, a suggestion
    queue = {"status": "pending_review", "category": "", "blind": "", "q": "", "todo": "", "disagree": ""}
    for sid in (first, second):
        form = {**queue, "id": sid, "decision": "approve", "label_category": "crimes", "csrf": csrf_of(client)}
        answer = client.post("/review/decide", data=form)
        assert "category=&" in answer.headers["location"] and "crimes" not in answer.headers["location"]
    assert "Nothing to review here" not in client.get(answer.headers["location"]).text
    rec = load_samples(root)[first]
    assert rec["category"] == "fraud" and "category_generated" not in rec  # 1 of 2: nothing decided yet
    assert rec["review"]["reviews"][0]["category"] == "crimes"  # alice's correction waits in her review
    page = other.get("/review", params={"id": first}).text
    assert '<option value="drugs" selected>drugs</option>' in page  # bob sees the judges' suggestion, not alice's
    for sid, decision in ((first, "approve"), (second, "reject"), (third, "approve")):
        form = {**queue, "id": sid, "decision": decision, "note": "no", "csrf": csrf_of(other)}
        other.post("/review/decide", data=form)
    bobs = [x for x in log_lines(root) if x["reviewer"] == "bob"]
    assert len(bobs) == 3 and not any("category" in x for x in bobs)  # untouched: no category recorded
    rec = load_samples(root)[first]
    assert rec["status"] == "accepted" and rec["category"] == "crimes" and rec["category_generated"] == "fraud"
    # Undoing bob's deciding approval leaves the sample pending again: the generated category is back.
    k = len(rec["review_history"]) - 1
    apply_reviews(root, {first: {"decision": "undo", "undoes": k}}, reviewer="bob", role="reviewer")
    rec = load_samples(root)[first]
    assert rec["status"] == "pending_review" and rec["category"] == "fraud"
