"""The review items of issue 45 round two ("beyond the peers": Argilla and Label Studio are the peers to match),
run as a reviewer runs them, through the web app's test client: the judges' category as a suggestion recorded
only when changed, skip, comments, the own queue before the samples assigned to others, and each reviewer's
progress and time per sample on the agreement page. The browser drives them in tests/unveil/test_ui_curation.py.
Decisions keep their semantics: a skip and a comment are never judgements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.ctd_dataset import load_samples
from tests.ui_data import make_ctd_dataset
from tests.unveil.test_review_auth import csrf_of, log_lines, web


def test_the_judges_category_is_a_suggestion_recorded_only_when_changed(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]  # first: generated as fraud, the judges said drugs
    (root / "labels.json").write_text(json.dumps({"category": True}))
    client = web(root)
    page = client.get("/review", params={"id": first}).text
    assert '<option value="drugs" selected>drugs</option>' in page
    assert '<input type="hidden" name="label_category_default" value="drugs">' in page
    form = {"decision": "approve", "label_category": "drugs", "label_category_default": "drugs"}
    client.post("/review/decide", data={**form, "id": first, "csrf": csrf_of(client)})
    rec = load_samples(root)[first]
    assert rec["status"] == "accepted" and rec["category"] == "fraud" and "category_generated" not in rec
    assert "category" not in log_lines(root)[-1] and "category" not in rec["review"]["reviews"][0]
    client.post("/review/decide", data={**form, "id": second, "label_category": "crimes", "csrf": csrf_of(client)})
    rec = load_samples(root)[second]
    assert rec["category"] == "crimes" and rec["category_generated"] == "drugs"
    assert log_lines(root)[-1]["category"] == "crimes"


def sids(page: str) -> list[str]:
    """The sample ids of the queue's sidebar, in its order."""
    import re

    return re.findall(r'<span class="sid">([^<]+)</span>', page)


def shown_id(client: Any, answer: Any) -> str:
    """The id of the card the page a POST redirected to shows."""
    import re

    found = re.search(r'id="card" data-id="([^"]+)"', client.get(answer.headers["location"]).text)
    assert found is not None
    return found.group(1)


def test_skip_moves_on_records_nothing_and_the_sample_comes_back_last(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    pending = make_ctd_dataset(root)["pending"]
    client = web(root)
    samples = (root / "samples.jsonl").read_bytes()
    assert sids(client.get("/review").text) == pending and 'id="skip"' in client.get("/review").text
    answer = client.post("/review/skip", data={"id": pending[0], "csrf": csrf_of(client)})
    assert answer.status_code == 303
    led_to = client.get(answer.headers["location"]).text
    assert f'id="card" data-id="{pending[1]}"' in led_to and "Skipped: nothing recorded" in led_to
    page = client.get("/review").text
    assert sids(page) == [*pending[1:], pending[0]]  # it comes back after the others
    assert (root / "samples.jsonl").read_bytes() == samples and not log_lines(root)  # recorded as nothing
    assert load_samples(root)[pending[0]]["status"] == "pending_review"
    for sid in pending[1:]:
        answer = client.post("/review/decide", data={"id": sid, "decision": "approve", "csrf": csrf_of(client)})
    assert shown_id(client, answer) == pending[0]  # the others done: the skipped one is next
    assert [x["id"] for x in log_lines(root)] == pending[1:]  # no entry for the skip
    assert client.post("/review/skip", data={"id": "nope", "csrf": csrf_of(client)}).status_code == 404
    assert client.post("/review/skip", data={"id": pending[0]}).status_code == 403  # CSRF checked


def test_the_own_queue_comes_first_and_others_only_when_asked(tmp_path: Path) -> None:
    from tests.unveil.test_review_auth import sign_in
    from tools.reviewers import REVIEWERS, add_reviewer, load_assignment
    from unveil.cli import main

    root = tmp_path / "ds"
    pending = make_ctd_dataset(root, n_pending=6)["pending"]
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("a", "b", "c")}
    main(["reviewers", "assign", str(root), "--reviewers", "a,b,c", "--per-sample", "1"])
    assignment = load_assignment(root)
    assert assignment is not None
    mine = [sid for sid in pending if assignment.of(sid) == ["a"]]
    theirs = [sid for sid in pending if sid not in mine]
    assert mine and theirs
    client = web(root)
    sign_in(client, tokens["a"])
    page = client.get("/review").text
    assert sids(page) == mine and 'id="others"' in page  # hidden unless asked
    page = client.get("/review", params={"others": "1"}).text
    assert sids(page) == mine + theirs  # asked: every pending sample, their own first
    assert f'data-id="{mine[0]}"' in page and 'name="others" value="1"' in page  # the toggle travels with forms
    answer = client.post(
        "/review/decide", data={"id": mine[-1], "decision": "approve", "others": "1", "csrf": csrf_of(client)}
    )
    assert "others=1" in answer.headers["location"] and shown_id(client, answer) == theirs[0]


def test_comments_are_shown_on_the_card_and_exported_and_never_decide(tmp_path: Path) -> None:
    import re

    from fastapi.testclient import TestClient

    from runner.ctd_export import export_hf
    from tests.unveil.test_review_auth import sign_in
    from tools.reviewers import REVIEWERS, add_reviewer

    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    ann, bob = (add_reviewer(root / REVIEWERS, n) for n in ("ann", "bob"))
    client = web(root, min_reviewers=2)
    other = TestClient(client.app, base_url="http://127.0.0.1", follow_redirects=False)
    sign_in(client, ann), sign_in(other, bob)

    def comment(who: Any, text: str) -> None:
        answer = who.post("/review/decide", data={"id": first, "decision": "note", "note": text, "csrf": csrf_of(who)})
        assert f"id={first}" in answer.headers["location"]  # the same sample stays shown

    comment(client, "the scale is <b>too</b> obvious")
    comment(other, "agree, but the flour works")
    comment(client, "second look: fine")
    page = client.get("/review", params={"id": first}).text
    assert "Comment saved: it decides nothing." in page
    shown = re.findall(
        r'<li data-k="\d+"><strong>([^<]+)</strong> <span[^>]*>[^<]*</span>: <span class="comment-text">'
        r"([^<]*(?:&lt;[^<]*)*)</span>",
        page,
    )
    assert shown == [
        ("ann", "the scale is &lt;b&gt;too&lt;/b&gt; obvious"),
        ("bob", "agree, but the flour works"),
        ("ann", "second look: fine"),
    ]
    rec = load_samples(root)[first]
    assert rec["status"] == "pending_review" and not (rec.get("review") or {}).get("reviews")  # nothing decided
    assert "No decisions yet." in client.get("/reviewers").text  # not a judgement for the agreement
    for who in (client, other):
        who.post("/review/decide", data={"id": first, "decision": "approve", "csrf": csrf_of(who)})
    assert load_samples(root)[first]["status"] == "accepted"
    import datasets

    data = datasets.Dataset.from_parquet(str(export_hf(root)), keep_in_memory=True)
    annotations = json.loads(data[data["id"].index(first)]["annotations"])
    assert [(a["reviewer"], a["decision"], a.get("note")) for a in annotations] == [
        ("ann", "note", "the scale is <b>too</b> obvious"),
        ("bob", "note", "agree, but the flour works"),
        ("ann", "note", "second look: fine"),
        ("ann", "approve", None),
        ("bob", "approve", None),
    ]


def test_progress_and_time_per_sample_on_the_agreement_page(tmp_path: Path, monkeypatch) -> None:
    """The app records when it first showed a pending sample to a reviewer and keeps it with their judgement;
    the agreement page gives each reviewer's judged-of-assigned count and their median seconds per sample. The
    clock is the test's, so no outcome depends on the machine's speed."""
    import re

    import graphs.ctd.review
    import unveil.ui.routes.review
    from tests.unveil.test_review_auth import sign_in
    from tools.reviewers import REVIEWERS, add_reviewer, load_assignment
    from unveil.cli import main

    clock = {"now": ""}
    monkeypatch.setattr(graphs.ctd.review, "now_iso", lambda: clock["now"])
    monkeypatch.setattr(unveil.ui.routes.review, "now_iso", lambda: clock["now"])
    root = tmp_path / "ds"
    pending = make_ctd_dataset(root, n_pending=8)["pending"]
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("a", "b")}
    main(["reviewers", "assign", str(root), "--reviewers", "a,b", "--per-sample", "1"])
    assignment = load_assignment(root)
    assert assignment is not None
    mine = [sid for sid in pending if assignment.of(sid) == ["a"]]
    assert len(mine) >= 3, mine
    client = web(root)
    sign_in(client, tokens["a"])

    def at(minute: int, second: int) -> None:
        clock["now"] = f"2026-12-07T10:{minute:02d}:{second:02d}+00:00"

    def show(sid: str) -> None:
        assert f'id="card" data-id="{sid}"' in client.get("/review", params={"id": sid}).text

    def decide(sid: str, decision: str = "approve") -> None:
        client.post("/review/decide", data={"id": sid, "decision": decision, "csrf": csrf_of(client)})

    at(0, 0)
    show(mine[0])
    at(0, 20)
    show(mine[0])  # shown again (a reload): the clock runs from the first showing
    at(0, 30)
    decide(mine[0])  # 30 s
    at(1, 0)
    show(mine[1])
    at(1, 5)
    decide(mine[1], "note")  # a comment is no judgement: the clock runs on
    at(2, 30)
    decide(mine[1], "reject")  # 90 s
    at(3, 0)
    show(mine[2])
    at(3, 40)
    client.post("/review/skip", data={"id": mine[2], "csrf": csrf_of(client)})
    at(5, 0)
    show(mine[2])  # it came back: timed from now
    at(5, 10)
    decide(mine[2])  # 10 s
    lines = log_lines(root)
    assert [(x["shown"], x["time"]) for x in lines if x["decision"] != "note"][0] == (
        "2026-12-07T10:00:00+00:00",
        "2026-12-07T10:00:30+00:00",
    )
    assert "shown" not in next(x for x in lines if x["decision"] == "note")
    page = client.get("/reviewers").text
    row = re.search(r'<tr data-progress="a">(.*?)</tr>', page[page.index('id="progress-table"') :], re.S)
    assert row is not None
    cells = re.findall(r'<td class="num [^"]+">([^<]*)</td>', row.group(1))
    assert cells == [str(len(mine)), "3", "3", "30"]  # assigned, of those judged, timed, median of 30, 90, 10 s
    row_b = re.search(r'<tr data-progress="b">(.*?)</tr>', page[page.index('id="progress-table"') :], re.S)
    assert row_b is not None
    assert re.findall(r'<td class="num [^"]+">([^<]*)</td>', row_b.group(1)) == [
        str(len(pending) - len(mine)),
        "0",
        "0",
        "—",
    ]


def test_only_the_web_app_records_when_a_sample_was_shown(tmp_path: Path) -> None:
    """The time per sample is measured from the times the app records: a Studio answer or a decisions file that
    names a `shown` time of its own is not timed."""
    from graphs.ctd.review import authenticated_answers
    from unveil.cli import main

    [(clean, _, _)] = authenticated_answers(
        {"decision": "approve", "shown": "2026-12-07T10:00:00+00:00"}, None, default_name="ann"
    )
    assert "shown" not in clean
    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    decisions = tmp_path / "d.jsonl"
    decisions.write_text(json.dumps({"id": first, "decision": "approve", "shown": "2026-12-07T10:00:00+00:00"}))
    assert main(["review", str(root), "--decisions", str(decisions)]) == 0
    assert "shown" not in log_lines(root)[-1] and load_samples(root)[first]["status"] == "accepted"
