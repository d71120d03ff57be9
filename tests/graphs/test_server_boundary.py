"""The graph server's request checks (`graphs.server_boundary`, issue 44 items 2 and 3), in process: which origins
may change anything, JSON bodies only, the operator's webhooks only, and reviewer tokens of review answers
replaced by the reviewer before any run records them. tests/graphs/test_server_boundary_dev.py runs the same
checks through the real `langgraph dev`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphs.ctd import review_tokens
from graphs.ctd.review import authenticated_answers
from graphs.server_boundary import Refusal, check_origin, check_webhooks, checked_body
from tools.reviewers import REVIEWERS, add_reviewer, load_reviewers

STUDIO = ["https://smith.langchain.com"]
JSON = {"content-type": "application/json", "host": "127.0.0.1:2025"}


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"origin": "http://localhost:2025"},  # another name of this machine is another origin
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
)
def test_a_foreign_page_may_change_nothing(headers: dict[str, str]) -> None:
    with pytest.raises(Refusal) as refused:
        check_origin({"host": "127.0.0.1:2025", **headers}, STUDIO)
    assert refused.value.status == 403


@pytest.mark.parametrize(
    "headers",
    [
        {},  # the SDK, curl: no web page
        {"origin": "https://smith.langchain.com", "sec-fetch-site": "cross-site"},  # Studio
        {"origin": "http://127.0.0.1:2025", "sec-fetch-site": "same-origin"},
    ],
)
def test_studio_the_server_itself_and_clients_that_are_no_page_pass(headers: dict[str, str]) -> None:
    check_origin({"host": "127.0.0.1:2025", **headers}, STUDIO)


def test_only_json_bodies_pass() -> None:
    body = json.dumps({"assistant_id": "vanilla"}).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        with pytest.raises(Refusal) as refused:
            checked_body({"content-type": kind}, body)
        assert refused.value.status == 415
    assert checked_body(JSON, body) is body
    assert checked_body({"content-type": "application/json; charset=utf-8"}, body) is body
    assert checked_body({}, b"") == b""  # a DELETE has no body
    with pytest.raises(Refusal, match="not valid JSON"):
        checked_body(JSON, b"{")


def test_webhooks_only_where_the_operator_allows(monkeypatch) -> None:
    run = {"assistant_id": "vanilla", "webhook": "https://hooks.example.org/unveil/done"}
    with pytest.raises(Refusal, match="UNVEIL_ALLOWED_WEBHOOKS"):
        check_webhooks(run, [])
    with pytest.raises(Refusal):
        check_webhooks([{"assistant_id": "a"}, run], [])  # /runs/batch
    check_webhooks(run, ["https://hooks.example.org/unveil"])
    for elsewhere in ("https://hooks.example.org/other", "http://hooks.example.org/unveil", "https://evil.example/"):
        with pytest.raises(Refusal):
            check_webhooks(run, [elsewhere])
    check_webhooks({"assistant_id": "vanilla", "webhook": None}, [])
    monkeypatch.setenv("UNVEIL_ALLOWED_WEBHOOKS", "https://hooks.example.org/unveil")
    assert checked_body(JSON, json.dumps(run).encode())


@pytest.fixture
def reviewers(tmp_path: Path, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("UNVEIL_REVIEW_DIR", str(tmp_path))
    monkeypatch.delenv("UNVEIL_REVIEWERS_FILE", raising=False)
    return {name: add_reviewer(tmp_path / REVIEWERS, name) for name in ("alice", "bob")}


def test_a_token_in_a_resume_is_replaced_by_its_reviewer(reviewers: dict[str, str]) -> None:
    body = {
        "assistant_id": "ctd",
        "command": {"resume": [{"decision": "approve", "token": reviewers["alice"], "reviewer": "mallory"}]},
    }
    out = checked_body(JSON, json.dumps(body).encode())
    assert reviewers["alice"] not in out.decode() and "mallory" not in out.decode()
    assert json.loads(out)["command"]["resume"] == [
        {"decision": "approve", "checked_reviewer": {"name": "alice", "role": "reviewer"}}
    ]
    with pytest.raises(Refusal, match="not in the reviewers file") as refused:
        checked_body(JSON, json.dumps({"command": {"resume": {"decision": "approve", "token": "x"}}}).encode())
    assert refused.value.status == 403
    forged = {"command": {"resume": {"decision": "approve", "checked_reviewer": {"name": "alice"}}}}
    with pytest.raises(Refusal, match="checked_reviewer"):
        checked_body(JSON, json.dumps(forged).encode())


def test_the_graph_trusts_the_checked_reviewer_only_behind_the_boundary(
    reviewers: dict[str, str], tmp_path: Path, monkeypatch
) -> None:
    people = load_reviewers(tmp_path / REVIEWERS)
    checked = {"decision": "approve", "checked_reviewer": {"name": "alice", "role": "reviewer"}}
    monkeypatch.setattr(review_tokens, "_ACTIVE", [])
    with pytest.raises(ValueError, match="checked_reviewer"):
        authenticated_answers(checked, people, default_name="")
    # In process (no server), the token itself still works.
    token = {"decision": "approve", "token": reviewers["bob"]}
    assert authenticated_answers(token, people, default_name="")[0][1:] == ("bob", "reviewer")
    monkeypatch.setattr(review_tokens, "_ACTIVE", [True])
    assert authenticated_answers(checked, people, default_name="") == [({"decision": "approve"}, "alice", "reviewer")]
    with pytest.raises(ValueError, match="unchecked"):
        authenticated_answers(token, people, default_name="")  # behind the boundary a token means a missed route
