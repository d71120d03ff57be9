"""The web app's sessions and what a folder with a reviewers file shows to whom (issue 44 item 6 and the web
app's Low items): a new token for a reviewer ends the sessions of the old one, requests without a cookie make no
session and cannot crowd the signed-in ones out, an unsigned client reads and writes nothing of the folder, and a
bad `labels.json` is named on the page and by `unveil review` instead of a 500 or a crash. In process (Starlette's
test client, the app's own middleware), as tests/unveil/test_review_auth.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.ctd_dataset import load_samples
from tests.ui_data import make_ctd_dataset
from tests.unveil.test_review_auth import csrf_of, log_lines, pending_folder, sign_in, web
from tools.reviewers import REVIEWERS, add_reviewer
from unveil.cli import main


def test_a_new_token_ends_the_sessions_of_the_old_one(tmp_path: Path, capsys) -> None:
    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]
    add_reviewer(root / REVIEWERS, "bob")
    old = add_reviewer(root / REVIEWERS, "alice")
    client = web(root)
    assert sign_in(client, old).status_code == 303
    decide = {"id": first, "decision": "approve", "csrf": csrf_of(client)}
    assert client.post("/review/decide", data=decide).status_code == 303
    # The token is rotated with the command the docs give; alice's open session (the old token's) ends.
    assert main(["reviewers", "add", str(root), "alice", "--new-token"]) == 0
    new = capsys.readouterr().out.strip().splitlines()[-1]
    refused = client.post("/review/decide", data={**decide, "id": second})
    assert refused.status_code == 401
    assert client.get("/review").headers["location"] == "/signin"
    assert [x["id"] for x in log_lines(root)] == [first]
    assert load_samples(root)[second]["status"] == "pending_review"
    # Signed in again with the new token, she decides; the old token signs in no more.
    assert sign_in(web(root), old).status_code == 401
    assert sign_in(client, new).status_code == 303
    assert client.post("/review/decide", data={**decide, "id": second}).status_code == 303
    assert [x["id"] for x in log_lines(root)] == [first, second]


def test_requests_without_a_cookie_do_not_sign_anyone_out(tmp_path: Path, monkeypatch) -> None:
    """The issue's flood (10,050 requests without a cookie against 10,000 sessions), scaled to a limit of 5:
    reads make no session, and sessions made by requests that store something (a sign-out's message) go before
    any signed-in one."""
    import unveil.ui.pages

    monkeypatch.setattr(unveil.ui.pages, "MAX_SESSIONS", 5)
    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    alice = add_reviewer(root / REVIEWERS, "alice")
    client = web(root)
    sign_in(client, alice)
    from fastapi.testclient import TestClient

    flood = TestClient(client.app, base_url="http://127.0.0.1", follow_redirects=False)  # the same app, no cookie
    for _ in range(20):
        flood.cookies.clear()
        assert flood.get("/signin").status_code == 200
        assert flood.post("/signout", data={"csrf": csrf_of(client)}).status_code == 303
    ui = client.app.state.ui
    assert len(ui.sessions) <= 5
    assert sum(1 for s in ui.sessions.values() if s.role) == 1
    answer = client.post("/review/decide", data={"id": first, "decision": "approve", "csrf": csrf_of(client)})
    assert answer.status_code == 303 and log_lines(root)[-1]["reviewer"] == "alice"
    # A page read without a cookie stores nothing and sets no cookie.
    flood.cookies.clear()
    before = len(ui.sessions)
    assert "set-cookie" not in flood.get("/signin").headers
    assert len(ui.sessions) == before


def test_an_unsigned_client_reads_and_writes_nothing_of_a_folder_with_reviewers(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    alice = add_reviewer(root / REVIEWERS, "alice")
    image = load_samples(root)[first]["image_sha256"]
    client = web(root)
    csrf = {"csrf": csrf_of(client)}
    assert client.post("/review/export", data=csrf).status_code == 401
    assert not (root / "export").exists()
    assert client.get("/reviewers").headers["location"] == "/signin"
    assert client.get("/calls", params={"id": first}).status_code == 401
    assert client.get(f"/images/{image}").status_code == 401
    sign_in(client, alice)
    assert client.get("/reviewers").status_code == 200
    assert client.get("/calls", params={"id": first}).status_code == 200
    assert client.get(f"/images/{image}").status_code == 200
    assert client.post("/review/export", data=csrf).status_code == 303
    assert (root / "export").is_dir()


@pytest.mark.parametrize(
    "schema, field",
    [
        ({"ratings": [1, 5]}, "ratings"),
        ({"ratings": "covertness"}, "ratings"),
        ({"category": "yes"}, "category"),
        ({"rationale": ["reject"]}, "rationale"),
    ],
)
def test_a_bad_labels_file_is_named_on_the_page_and_by_unveil_review(
    tmp_path: Path, capsys, schema: object, field: str
) -> None:
    root = tmp_path / "ds"
    first = make_ctd_dataset(root)["pending"][0]
    (root / "labels.json").write_text(json.dumps(schema))
    client = web(root)
    page = client.get("/review")
    assert page.status_code == 200
    assert 'id="schema-error"' in page.text and f"labels.json: {field}" in page.text
    answer = client.post("/review/decide", data={"id": first, "decision": "approve", "csrf": csrf_of(client)})
    assert answer.status_code == 303
    assert f"labels.json: {field}" in client.get(answer.headers["location"]).text
    assert log_lines(root) == []
    folder = pending_folder(tmp_path / "cli", "a")
    (folder / "labels.json").write_text(json.dumps(schema))
    assert main(["review", str(folder), "--approve", "a"]) == 1  # a user's mistake, not a crash (70)
    assert f"labels.json: {field}" in capsys.readouterr().err
