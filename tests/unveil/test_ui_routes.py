"""The web app's routes, assembled from one router per page kind: every URL stays where the pages and the docs
link to it, a page of another kind than the opened file answers 404, and the review queue's filters come back
the same from its query string and from a form posted from it. In-process (Starlette's test client), no server.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.ui_data import make_ctd_dataset, make_detection_results
from unveil.ui import create_app

URLS = {  # a path of each page as the templates link to it, and the methods it answers
    "/": "GET",
    "/images/0123abcd": "GET",
    "/review": "GET",
    "/review/decide": "POST",
    "/review/bulk": "POST",
    "/review/undo": "POST",
    "/review/export": "POST",
    "/reviewers": "GET",
    "/reviewer": "POST",
    "/signin": "GET",  # and POST (the first route named answers the Allow header)
    "/signout": "POST",
    "/detections": "GET",
    "/detections/view": "GET",
    "/detections/tag.svg": "GET",
    "/ipr": "GET",
    "/compare": "GET",
    "/calls": "GET",
}


@pytest.fixture
def ctd_app(tmp_path: Path) -> tuple[TestClient, dict[str, list[str]]]:
    data = make_ctd_dataset(tmp_path / "ds")
    client = TestClient(create_app(tmp_path / "ds"), base_url="http://127.0.0.1", follow_redirects=False)
    return client, data


def test_every_page_keeps_its_url(ctd_app) -> None:
    client, _ = ctd_app
    # A method no page takes is refused with the methods the path answers (405), or 404 where no page is there.
    allowed = {path: client.put(path).headers.get("allow", "") for path in URLS}
    assert {path: ", ".join(sorted(a.split(", "))) for path, a in allowed.items()} == URLS
    assert client.put("/reviews").status_code == 404


def test_a_page_of_another_kind_is_404(ctd_app, tmp_path: Path) -> None:
    client, data = ctd_app
    assert client.get("/detections").status_code == 404
    assert client.get("/ipr").status_code == 404
    results = tmp_path / "results.jsonl"
    make_detection_results(results, tmp_path / "store")
    other = TestClient(create_app(results), base_url="http://127.0.0.1", follow_redirects=False)
    csrf = other.app.state.guard.csrf
    assert other.get("/review").status_code == 404
    answer = other.post("/review/decide", data={"id": data["pending"][0], "decision": "approve", "csrf": csrf})
    assert answer.status_code == 404
    assert other.get("/").headers["location"] == "/detections"


def test_a_decision_returns_to_the_queue_filtered_as_the_page_showed_it(ctd_app) -> None:
    client, data = ctd_app
    words = "flour " * 50  # 300 characters: the page keeps the first 200
    shown = client.get("/review", params={"status": "", "category": "drugs", "q": words, "todo": "bob"})
    assert shown.status_code == 200
    assert f'name="q" id="search" value="{words[:200]}"' in shown.text
    form = {"status": "", "category": "drugs", "q": words, "todo": "bob", "blind": ""}
    csrf = client.app.state.guard.csrf
    answer = client.post("/review/decide", data={**form, "id": data["pending"][1], "decision": "note", "csrf": csrf})
    assert answer.status_code == 303
    back = urllib.parse.urlsplit(answer.headers["location"])
    assert back.path == "/review"
    assert urllib.parse.parse_qsl(back.query, keep_blank_values=True)[:5] == [
        ("status", ""),
        ("category", "drugs"),
        ("blind", ""),
        ("q", words[:200]),
        ("todo", "bob"),
    ]
    assert client.post("/review/decide", data={**form, "id": "x", "decision": "note"}).status_code == 403
