"""Who reviews what (issue 34 items 7-8): an assignment with overlap (each sample to N of the reviewers, by the
id's hash), the guidelines beside the sample, the filter for samples where reviewers disagree, and the
adjudicator's decision that settles them, kept in the history. In process (Starlette's test client); the
browser drives the same page in tests/unveil/test_ui_curation.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, load_samples
from runner.ctd_reviews import apply_reviews
from tests.unveil.test_review_auth import csrf_of, log_lines, pending_folder, sign_in, web
from tools.reviewers import REVIEWERS, Assignment, ReviewersFileError, add_reviewer, load_assignment
from unveil.cli import main


def test_each_sample_goes_to_n_of_the_reviewers_by_its_ids_hash() -> None:
    five = Assignment(("a", "b", "c", "d", "e"), 2)
    ids = [f"drugs-{i:05d}" for i in range(500)]
    picks = [five.of(i) for i in ids]
    assert all(len(set(p)) == 2 for p in picks)
    assert picks == [Assignment(("e", "d", "c", "b", "a"), 2).of(i) for i in ids]  # order of names is irrelevant
    load = {n: sum(n in p for p in picks) for n in five.reviewers}
    assert sum(load.values()) == 1000 and all(160 <= v <= 240 for v in load.values()), load
    # A sixth reviewer takes samples only from the others: no sample moves between the first five.
    six = Assignment((*five.reviewers, "f"), 2)
    for i, old in zip(ids, picks, strict=True):
        new = six.of(i)
        assert set(new) == set(old) or "f" in new


def test_assign_command(tmp_path: Path, capsys) -> None:
    root = pending_folder(tmp_path / "ds", *[f"s{i}" for i in range(20)])
    assert main(["reviewers", "assign", str(root), "--reviewers", "a,b,c,d,e", "--per-sample", "2"]) == 0
    err = capsys.readouterr().err
    assert "each sample goes to 2 of 5 reviewers" in err and "of 20 pending" in err
    assert load_assignment(root) == Assignment(("a", "b", "c", "d", "e"), 2)
    assert main(["reviewers", "assign", str(root), "--reviewers", "a,b", "--per-sample", "3"]) == 1
    add_reviewer(root / REVIEWERS, "a")
    with pytest.raises(ReviewersFileError, match="not in"):
        from tools.reviewers import save_assignment

        save_assignment(root, ["a", "b"], 1)  # b has no token


def test_the_own_queue_keeps_the_samples_assigned_to_the_reviewer(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    pending = make_ctd_dataset(root, n_pending=4)["pending"]
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("a", "b", "c")}
    main(["reviewers", "assign", str(root), "--reviewers", "a,b,c", "--per-sample", "2"])
    assignment = load_assignment(root)
    assert assignment is not None
    client = web(root, min_reviewers=2)
    sign_in(client, tokens["a"])
    page = client.get("/review").text
    mine = [sid for sid in pending if "a" in assignment.of(sid)]
    listed = [sid for sid in pending if f'<span class="sid">{sid}</span>' in page]
    assert listed == mine and 'id="assigned"' in page
    everyone = client.get("/review", params={"status": "pending_review", "todo": ""}).text
    assert all(f'<span class="sid">{sid}</span>' in everyone for sid in pending)


def test_a_sample_assigned_to_others_is_marked_not_yours(tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 45 (low): the assignment is advisory, and nothing told a reviewer that the sample they judged was
    someone else's: the card and `unveil review` now say so; the judgement still counts."""
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    pending = make_ctd_dataset(root, n_pending=4)["pending"]
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("a", "b", "c")}
    judy = add_reviewer(root / REVIEWERS, "judy", "adjudicator")
    main(["reviewers", "assign", str(root), "--reviewers", "a,b,c", "--per-sample", "2"])
    assignment = load_assignment(root)
    assert assignment is not None
    mine = next(sid for sid in pending if "a" in assignment.of(sid))
    other = next(sid for sid in pending if "a" not in assignment.of(sid))
    client = web(root)
    sign_in(client, tokens["a"])
    page = client.get("/review", params={"id": other, "status": "", "todo": ""}).text
    assert 'id="not-assigned"' in page and "Not assigned to you" in page
    assert ", ".join(assignment.of(other)) in page
    assert 'id="not-assigned"' not in client.get("/review", params={"id": mine, "status": "", "todo": ""}).text
    adjudicator = web(root)
    sign_in(adjudicator, judy)
    assert 'id="not-assigned"' not in adjudicator.get("/review", params={"id": other, "status": ""}).text
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", tokens["a"])
    capsys.readouterr()
    assert main(["review", str(root), "--approve", other, "--approve", mine]) == 0
    err = capsys.readouterr().err
    assert f"note: {other} is not assigned to you" in err and f"note: {mine}" not in err
    assert load_samples(root)[other]["review"]["reviews"][0]["reviewer"] == "a"  # advisory: it counts


def test_guidelines_are_shown_as_text(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    make_ctd_dataset(root)
    (root / "guidelines.md").write_text(
        "# Guidelines\n\nReject when the <b>text</b> names the drug.<script>x()</script>"
    )
    page = web(root).get("/review").text
    assert 'id="guidelines"' in page
    assert "Reject when the &lt;b&gt;text&lt;/b&gt; names the drug.&lt;script&gt;x()&lt;/script&gt;" in page
    assert "<script>x()" not in page
    assert "<h3>Guidelines</h3>" in page  # a Markdown heading, not "# Guidelines" (issue 45)


def test_guidelines_render_a_safe_subset_of_markdown() -> None:
    """Issue 45 (low): the guidelines' Markdown was shown raw; only its safe forms become markup."""
    from unveil.ui.markdown import render_guidelines

    html = str(
        render_guidelines(
            "# Rules\n\n- **Reject** when the text names the drug\n- keep *subtle* ones, `a*b`\n\n1. first\n"
            "2. second\n\nSee [the policy](https://example.org/p?a=1&b=2), [x](javascript:alert(1)) and "
            "<img src=x onerror=alert(1)>"
        )
    )
    assert html.startswith("<h3>Rules</h3><ul><li><strong>Reject</strong> when the text names the drug</li>")
    assert "<li>keep <em>subtle</em> ones, <code>a*b</code></li></ul><ol><li>first</li><li>second</li></ol>" in html
    assert '<a href="https://example.org/p?a=1&amp;b=2" rel="noopener noreferrer">the policy</a>' in html
    assert "[x](javascript:alert(1))" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img" not in html and "javascript:" not in html.split("[x](")[0]


def test_the_adjudicator_settles_a_disagreement(tmp_path: Path) -> None:
    root = pending_folder(tmp_path / "ds", "a", "b")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2, "rule": "majority"}
    apply_reviews(root, {"a": {"decision": "approve"}, "b": {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(root, {"a": {"decision": "reject"}, "b": {"decision": "approve"}}, reviewer="bob", **two)
    assert load_samples(root)["a"]["status"] == "rejected"  # majority: 1-1 is not a majority of approvals
    judge: dict[str, Any] = {**two, "reviewer": "judy", "role": "adjudicator"}
    counts = apply_reviews(root, {"a": {"decision": "approve", "note": "the scale is a tell"}}, **judge)
    rec = load_samples(root)["a"]
    assert counts["approved"] == 1 and rec["status"] == "accepted"
    assert rec["review"]["adjudicated"] is True and rec["review"]["reviewer"] == "judy"
    assert [r["reviewer"] for r in rec["review"]["reviews"]] == ["ann", "bob"]  # the reviewers' own stay
    assert log_lines(root)[-1]["adjudicated"] is True and log_lines(root)[-1]["reviewer"] == "judy"
    # No disagreement on b: the adjudicator's approval is a reviewer's judgement, kept as a conflict there.
    assert apply_reviews(root, {"b": {"decision": "reject"}}, **judge)["conflicts"] == 1
    # Undoing the adjudication gives the reviewers' outcome back.
    k = len(rec["review_history"]) - 1
    assert apply_reviews(root, {"a": {"decision": "undo", "undoes": k}}, **judge)["undone"] == 1
    rec = load_samples(root)["a"]
    assert rec["status"] == "rejected" and not rec["review"].get("adjudicated")
    assert [json.loads(x)["decision"] for x in (root / DECISIONS).read_text().splitlines()][-2:] == [
        "reject",
        "undo",
    ]


def test_the_disagreement_filter_and_settling_in_the_web_app(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("ann", "bob")}
    tokens["judy"] = add_reviewer(root / REVIEWERS, "judy", "adjudicator")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    apply_reviews(root, {first: {"decision": "approve"}, second: {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(root, {first: {"decision": "reject"}, second: {"decision": "approve"}}, reviewer="bob", **two)
    client = web(root, min_reviewers=2)
    sign_in(client, tokens["judy"])
    page = client.get("/review", params={"status": "", "disagree": "1"}).text
    assert f'<span class="sid">{first}</span>' in page and f'<span class="sid">{second}</span>' not in page
    assert "Settle: Approve" in page
    form = {"id": first, "decision": "approve", "status": "", "disagree": "1", "csrf": csrf_of(client)}
    assert client.post("/review/decide", data=form).status_code == 303
    rec = load_samples(root)[first]
    assert rec["status"] == "accepted" and rec["review"]["adjudicated"] is True
    page = client.get("/review", params={"status": "", "disagree": "1"}).text
    assert f'<span class="sid">{first}</span>' not in page  # settled
    shown = client.get("/review", params={"status": "", "id": first}).text
    assert "settled by the adjudicator" in shown and "(adjudication)" in shown


def test_the_agreement_page_counts_the_adjudicator_and_earlier_attempts(tmp_path: Path) -> None:
    """Issue 45 (low): the reviewers page left out the adjudicator (who settled disagreements) and the judgements
    of attempts a send back replaced (each attempt another image-text pair, judged all the same)."""
    from runner.ctd_dataset import SAMPLES

    root = pending_folder(tmp_path / "ds", "a", "b")
    tokens = {name: add_reviewer(root / REVIEWERS, name) for name in ("ann", "bob")}
    add_reviewer(root / REVIEWERS, "judy", "adjudicator")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(root, {"a": {"decision": "reject", "note": "plain"}}, reviewer="bob", **two)
    apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="judy", role="adjudicator")
    apply_reviews(root, {"b": {"decision": "approve"}}, reviewer="bob", **two)
    apply_reviews(root, {"b": {"decision": "reject", "note": "hide it", "send_back": True}}, reviewer="ann", **two)
    # The Eraser's new attempt comes back pending, as `unveil generate` requeues it (the send back kept).
    rec = load_samples(root)["b"]
    back = rec["send_back"]
    revised = {**rec, "status": "pending_review", "review": {"status": "pending"}, "sent_back": [back]}
    del revised["send_back"]
    with (root / SAMPLES).open("a") as fh:
        fh.write(json.dumps(revised) + "\n")
    apply_reviews(root, {"b": {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(root, {"b": {"decision": "approve"}}, reviewer="bob", **two)
    client = web(root)
    sign_in(client, tokens["ann"])  # with a reviewers file, the page is for signed-in reviewers only
    page = client.get("/reviewers").text
    rows = {
        name: [int(x) for x in re.findall(r'<td class="num[^"]*">(\d+)</td>', row)]
        for name, row in re.findall(r'<tr data-reviewer="([^"]+)">(.*?)</tr>', page, re.S)
    }
    # judged, approved, rejected, on earlier attempts, settled
    assert rows == {"ann": [3, 2, 1, 1, 0], "bob": [3, 2, 1, 1, 0], "judy": [0, 0, 0, 0, 1]}
    assert "Settled as adjudicator" in page and "On earlier attempts" in page
