"""Reviewers who cannot act as each other (issue 32 item 5, issue 33 item 2): the reviewers file with hashed
tokens, `unveil reviewers`, the token on `unveil review`, sign-in and server-side sessions in the web app (Starlette's
test client, no browser: tests/unveil/test_ui_curation.py drives the same pages in chromium), undo of one's own entries,
the adjudicator's logged override, single-user mode with no setup, and a repeated judgement reported as already
given instead of counted twice."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, SAMPLES, load_samples
from runner.ctd_reviews import apply_reviews
from tools.reviewers import (
    REVIEWERS,
    ReviewerAuthError,
    ReviewersFileError,
    add_reviewer,
    authenticate,
    load_reviewers,
    remove_reviewer,
)
from unveil.cli import main


def pending_folder(root: Path, *ids: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = [{"id": i, "status": "pending_review", "category": "drugs", "text": f"t{i}", "votes": []} for i in ids]
    (root / SAMPLES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def log_lines(root: Path) -> list[dict[str, Any]]:
    path = root / DECISIONS
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# -- the reviewers file ---------------------------------------------------------------------------------------


def test_tokens_are_stored_hashed_and_name_their_reviewer(tmp_path: Path) -> None:
    path = tmp_path / REVIEWERS
    token = add_reviewer(path, "alice")
    judge = add_reviewer(path, "Zoë 李", "adjudicator")
    raw = path.read_text()
    assert token not in raw and judge not in raw  # only digests
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    people = load_reviewers(path)
    assert people is not None
    assert authenticate(people, token).name == "alice" and authenticate(people, token).role == "reviewer"
    assert authenticate(people, judge).role == "adjudicator"
    with pytest.raises(ReviewerAuthError, match="not in the reviewers file"):
        authenticate(people, token + "x")
    with pytest.raises(ReviewersFileError, match="exists already"):
        add_reviewer(path, "alice")
    fresh = add_reviewer(path, "alice", new_token=True)
    people = load_reviewers(path) or {}
    with pytest.raises(ReviewerAuthError):
        authenticate(people, token)  # the old token stopped working
    assert authenticate(people, fresh).name == "alice"
    remove_reviewer(path, "alice")
    with pytest.raises(ReviewerAuthError):
        authenticate(load_reviewers(path) or {}, fresh)
    with pytest.raises(ReviewersFileError, match="control"):
        add_reviewer(path, "bob\u202e")


def test_a_link_or_a_fifo_in_place_of_the_reviewers_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"reviewers": {}}')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / REVIEWERS).symlink_to(target)
    with pytest.raises(ReviewersFileError, match="link"):
        load_reviewers(tmp_path / "a" / REVIEWERS)
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / REVIEWERS)
    with pytest.raises(ReviewersFileError, match="not a regular file"):
        load_reviewers(tmp_path / "b" / REVIEWERS)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / REVIEWERS).write_text('{"reviewers": {"x": "plain"}}')
    with pytest.raises(ReviewersFileError, match="expected"):
        load_reviewers(tmp_path / "c" / REVIEWERS)


# -- decisions ------------------------------------------------------------------------------------------------


def test_single_user_mode_needs_no_setup_and_refuses_two_reviewers(tmp_path: Path) -> None:
    root = pending_folder(tmp_path / "ds", "a", "b")
    assert apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="me")["approved"] == 1
    with pytest.raises(ReviewerAuthError, match="need a reviewers file"):
        apply_reviews(root, {"b": {"decision": "approve"}}, min_reviewers=2)
    add_reviewer(root / REVIEWERS, "alice")
    with pytest.raises(ReviewerAuthError, match="needs a reviewer's token"):
        apply_reviews(root, {"b": {"decision": "approve"}})  # a file now: single-user decisions are refused


def test_a_reviewer_cannot_undo_another_and_overturn_a_rejection(tmp_path: Path) -> None:
    """The attack of issue 32: under the unanimous rule, bob undid alice's rejection and approved."""
    root = pending_folder(tmp_path / "ds", "a")
    policy = {"min_reviewers": 2, "rule": "unanimous"}
    apply_reviews(
        root, {"a": {"decision": "reject", "note": "too literal"}}, reviewer="alice", role="reviewer", **policy
    )
    assert load_samples(root)["a"]["status"] == "rejected"
    counts = apply_reviews(root, {"a": {"decision": "undo", "undoes": 0}}, reviewer="bob", role="reviewer", **policy)
    assert counts["refused"] == 1 and counts["undone"] == 0
    rec = load_samples(root)["a"]
    assert rec["status"] == "rejected" and len(rec["review_history"]) == 1
    # A decision's own `reviewer` field does not make bob alice.
    counts = apply_reviews(
        root, {"a": {"decision": "undo", "undoes": 0, "reviewer": "alice"}}, reviewer="bob", role="reviewer", **policy
    )
    assert counts["refused"] == 1
    # The adjudicator may, and the override is logged.
    counts = apply_reviews(
        root, {"a": {"decision": "undo", "undoes": 0}}, reviewer="judy", role="adjudicator", **policy
    )
    assert counts["undone"] == 1
    assert log_lines(root)[-1] == {**log_lines(root)[-1], "reviewer": "judy", "undoes": 0, "override": True}
    assert load_samples(root)["a"]["status"] == "pending_review"
    # alice may undo her own entry (here: her note-less approval after the override).
    apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="alice", role="reviewer", **policy)
    assert (
        apply_reviews(root, {"a": {"decision": "undo", "undoes": 2}}, reviewer="alice", role="reviewer", **policy)[
            "undone"
        ]
        == 1
    )


def test_a_repeated_judgement_is_already_judged_not_counted_or_logged(tmp_path: Path) -> None:
    root = pending_folder(tmp_path / "ds", "a")
    kw: dict[str, Any] = {"reviewer": "alice", "role": "reviewer", "min_reviewers": 2}
    assert apply_reviews(root, {"a": {"decision": "approve"}}, **kw)["pending"] == 1
    for _ in range(3):
        assert apply_reviews(root, {"a": {"decision": "approve", "note": "again"}}, **kw)["already"] == 1
    rec = load_samples(root)["a"]
    assert rec["status"] == "pending_review" and len(rec["review"]["reviews"]) == 1 and len(log_lines(root)) == 1
    assert (
        apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="bob", role="reviewer", min_reviewers=2)[
            "approved"
        ]
        == 1
    )
    # On a decided sample too: alice's own approval again is not a conflict line.
    assert apply_reviews(root, {"a": {"decision": "approve"}}, **kw)["already"] == 1
    assert len(log_lines(root)) == 2


def test_appended_names_this_calls_entry(tmp_path: Path) -> None:
    root = pending_folder(tmp_path / "ds", "a", "b")
    kw: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="bob", **kw)
    mine: list[tuple[str, int]] = []
    apply_reviews(root, {"a": {"decision": "reject"}, "b": {"decision": "note"}}, reviewer="alice", appended=mine, **kw)
    assert mine == [("a", 1), ("b", 0)]


# -- the command line -----------------------------------------------------------------------------------------


def test_reviewers_command_and_the_token_of_unveil_review(tmp_path: Path, capsys, monkeypatch) -> None:
    root = pending_folder(tmp_path / "ds", "a", "b")
    assert main(["reviewers", "add", str(root), "alice"]) == 0
    alice = capsys.readouterr().out.strip()
    assert main(["reviewers", "add", str(root), "judy", "--adjudicator"]) == 0
    capsys.readouterr()
    assert main(["reviewers", "list", str(root)]) == 0
    listed = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()]
    assert listed == [["alice", "reviewer"], ["judy", "adjudicator"]]
    monkeypatch.delenv("UNVEIL_REVIEWER_TOKEN", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["review", str(root), "--approve", "a"]) == 1
    assert "UNVEIL_REVIEWER_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", alice)
    assert main(["review", str(root), "--approve", "a", "--reviewer", "bob"]) == 1
    assert "signs in as 'alice'" in capsys.readouterr().err
    decisions = tmp_path / "d.jsonl"
    decisions.write_text(json.dumps({"id": "b", "decision": "reject", "reviewer": "judy"}) + "\n")
    assert main(["review", str(root), "--decisions", str(decisions)]) == 1
    assert "'judy'" in capsys.readouterr().err and load_samples(root)["b"]["status"] == "pending_review"
    assert main(["review", str(root), "--approve", "a", "--min-reviewers", "2"]) == 0
    assert "1 waiting for more reviewers" in capsys.readouterr().err
    assert main(["review", str(root), "--approve", "a", "--min-reviewers", "2"]) == 0  # the same judgement again
    assert "1 already judged by you (not counted again)" in capsys.readouterr().err
    assert [(x["reviewer"], x["decision"]) for x in log_lines(root)] == [("alice", "approve")]


def test_unveil_review_refuses_two_reviewers_without_the_file(tmp_path: Path, capsys) -> None:
    root = pending_folder(tmp_path / "ds", "a")
    assert main(["review", str(root), "--approve", "a", "--min-reviewers", "2"]) == 1
    assert "unveil reviewers add" in capsys.readouterr().err
    assert load_samples(root)["a"]["status"] == "pending_review"


# -- the web app (in process) ---------------------------------------------------------------------------------


def web(root: Path, **kw: Any) -> Any:
    from fastapi.testclient import TestClient

    from unveil.ui import create_app

    return TestClient(create_app(root, **kw), base_url="http://127.0.0.1", follow_redirects=False)


def csrf_of(client: Any) -> str:
    return str(client.app.state.guard.csrf)


def sign_in(client: Any, token: str) -> Any:
    return client.post("/signin", data={"token": token, "csrf": csrf_of(client)})


def test_the_web_app_signs_reviewers_in_with_their_tokens(tmp_path: Path) -> None:
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]
    alice = add_reviewer(root / REVIEWERS, "alice")
    client = web(root, min_reviewers=2)
    assert client.get("/review").headers["location"] == "/signin"
    refused = client.post("/review/decide", data={"id": first, "decision": "approve", "csrf": csrf_of(client)})
    assert refused.status_code == 401
    assert sign_in(client, "not-a-token").status_code == 401
    answer = sign_in(client, alice)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("unveil_session=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert alice not in cookie  # the cookie holds a session id, not the token
    # A name declared by the page, a form field or a decision is not who decides.
    assert client.post("/reviewer", data={"name": "bob", "csrf": csrf_of(client)}).status_code == 403
    client.post("/review/decide", data={"id": first, "decision": "approve", "reviewer": "bob", "csrf": csrf_of(client)})
    assert [(x["reviewer"], x["decision"]) for x in log_lines(root)] == [("alice", "approve")]
    page = client.get("/review", params={"id": first}).text
    assert "1 of 2 reviewers so far" in page
    client.post("/signout", data={"csrf": csrf_of(client)})
    assert client.get("/review").headers["location"] == "/signin"
    assert load_samples(root)[second]["status"] == "pending_review"


def test_messages_and_the_undo_prompt_come_from_the_server_not_the_link(tmp_path: Path) -> None:
    """A link with the old query parameters (flash, undo_id, undo_k) shows no message and no Undo prompt; after a
    decision the page offers the entry this request appended, even when another reviewer's lands right after."""
    from tests.ui_data import make_ctd_dataset
    from unveil.ui.sources import CtdSource

    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    alice, bob = add_reviewer(root / REVIEWERS, "alice"), add_reviewer(root / REVIEWERS, "bob")
    client = web(root, min_reviewers=2)
    sign_in(client, alice)
    forged = client.get("/review", params={"flash": "undone", "undo_id": first, "undo_k": "0"}).text
    assert 'id="undo-last"' not in forged and "Undone" not in forged
    real = CtdSource._apply

    def then_bob(self: CtdSource, decisions: Any, actor: Any, appended: Any = None) -> Any:
        counts = real(self, decisions, actor, appended)
        if actor[0] == "alice":  # bob's decision on the same sample lands before alice's page comes back
            real(self, {first: {"decision": "approve"}}, ("bob", "reviewer"))
        return counts

    import unittest.mock

    with unittest.mock.patch.object(CtdSource, "_apply", then_bob):
        client.post("/review/decide", data={"id": first, "decision": "reject", "csrf": csrf_of(client)})
    page = client.get("/review", params={"id": first}).text
    assert f'name="id" value="{first}"><input type="hidden" name="undoes" value="0">' in page  # alice's, not bob's 1
    assert page.count('id="undo-last"') == 1
    assert 'id="undo-last"' not in client.get("/review").text  # shown once
    assert bob  # bob's own session is another browser


def test_single_user_mode_takes_any_name_without_a_500(tmp_path: Path) -> None:
    """No reviewers file: no sign-in; the name set on the page is kept in the server-side session, so a name
    outside Latin-1 works (it used to be a cookie value and gave HTTP 500)."""
    from tests.ui_data import make_ctd_dataset

    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    client = web(root)
    assert client.get("/review").status_code == 200
    answer = client.post("/reviewer", data={"name": "Zoë 李 ✓", "csrf": csrf_of(client), "back": "/review"})
    assert answer.status_code == 303
    assert "Zoë 李 ✓" in client.get("/review").text
    client.post("/review/decide", data={"id": first, "decision": "approve", "csrf": csrf_of(client)})
    assert log_lines(root)[-1]["reviewer"] == "Zoë 李 ✓"
    with pytest.raises(ReviewerAuthError, match="reviewers file"):
        web(root, min_reviewers=2)


def test_unveil_review_lists_the_reviewers_own_queue(tmp_path: Path, capsys, monkeypatch) -> None:
    root = pending_folder(tmp_path / "ds", "a", "b", "c")
    alice = add_reviewer(root / REVIEWERS, "alice")
    apply_reviews(root, {"a": {"decision": "approve"}}, reviewer="alice", role="reviewer", min_reviewers=2)
    assert main(["review", str(root)]) == 0
    assert "3 samples wait for review\n" in capsys.readouterr().err
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", alice)
    assert main(["review", str(root)]) == 0
    out = capsys.readouterr()
    assert "[a]" not in out.out and "[b]" in out.out and "2 samples wait for review by you (alice; 3 in all)" in out.err
