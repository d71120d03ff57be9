"""The graph server's request checks under the real `langgraph dev` (issue 44 items 2 and 3), started as README.md
says (`langgraph_server` in conftest.py): a foreign page's `text/plain` run, a run with a webhook and a non-JSON body
are refused before anything runs; a Studio reviewer's token is checked as the request arrives, so neither the run
record (`runs.list`) nor what the server writes into `.langgraph_api/` holds it, and that folder is private."""

from __future__ import annotations

import http.server
import json
import os
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.graphs.test_langgraph_dev import ROOT, ctd_script, error_of, run, tiny_sd, write_json
from tools.reviewers import REVIEWERS, add_reviewer

pytestmark = pytest.mark.slow(reason="starts the real langgraph dev server")
__all__ = ["tiny_sd"]  # the module's tiny Stable Diffusion, shared with test_langgraph_dev.py

TOKENS: dict[str, str] = {}  # alice's token, for the last test's look into the server's files


@pytest.fixture
def client(langgraph_server: Any) -> Any:
    from langgraph_sdk import get_client

    return get_client(url=langgraph_server.url)


@pytest.fixture
def capture() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every request's path (a webhook's would-be receiver)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


async def test_a_foreign_page_starts_no_run_and_no_webhook_is_called(
    client: Any, langgraph_server: Any, capture: tuple[str, list[str]], tmp_path: Path
) -> None:
    import httpx

    answer = {"toxic": False, "reason": "looks benign"}
    script = write_json(tmp_path / "script.json", {"vanilla_detector": [{"when": "", "then": answer}]})
    run_body = {
        "assistant_id": "vanilla",
        "input": {"image_description": "white powder", "text": "text me"},
        "context": {"model": f"scripted:{script}"},
    }
    thread = (await client.threads.create())["thread_id"]
    url = langgraph_server.url
    async with httpx.AsyncClient(base_url=url) as http_client:
        # The request: a page's simple POST (no preflight) with the run as text/plain.
        for headers in (
            {"Origin": "https://evil.example", "Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"},
            {"Origin": "null", "Content-Type": "text/plain"},
            {"Origin": "https://evil.example", "Content-Type": "application/json"},
        ):
            for path in ("/runs/wait", f"/threads/{thread}/runs/wait"):
                refused = await http_client.post(path, content=json.dumps(run_body), headers=headers)
                assert refused.status_code == 403, (headers, refused.text)
        refused = await http_client.post(f"/threads/{thread}/runs/wait", content=json.dumps(run_body))
        assert refused.status_code == 415  # a body that is not JSON, whoever sends it
        hook = {**run_body, "webhook": f"{capture[0]}/hook"}
        refused = await http_client.post(f"/threads/{thread}/runs", json=hook)
        assert refused.status_code == 403 and "UNVEIL_ALLOWED_WEBHOOKS" in refused.text
        assert await client.runs.list(thread) == []
        # Studio's origin and clients that are no web page still run.
        studio = {"Origin": "https://smith.langchain.com", "Sec-Fetch-Site": "cross-site"}
        done = await http_client.post(f"/threads/{thread}/runs/wait", json=run_body, headers=studio)
        assert done.status_code == 200 and done.json()["toxic"] is False
    out = await client.runs.wait(thread, "vanilla", input=run_body["input"], context=run_body["context"])
    assert out["toxic"] is False
    assert len(await client.runs.list(thread)) == 2
    assert capture[1] == []


async def test_a_reviewer_token_is_checked_at_the_door_and_never_stored(
    client: Any, langgraph_server: Any, tiny_sd: str, tmp_path: Path
) -> None:
    import httpx

    folder = langgraph_server.review_dir
    folder.mkdir(parents=True, exist_ok=True)
    alice = TOKENS["alice"] = add_reviewer(folder / REVIEWERS, "alice")
    spec = f"scripted:{write_json(tmp_path / 'script.json', ctd_script())}"
    ctx = {"model": spec, "generator": tiny_sd, "width": 32, "height": 32, "steps": 2, "web_search": False}
    ctx["review"] = "interrupt"
    thread, first = await run(client, "ctd", {"id": "tok-1", "category": "drugs", "seed": 4}, context=ctx)
    assert not error_of(first), error_of(first)
    async with httpx.AsyncClient(base_url=langgraph_server.url) as http_client:
        for answer in (
            {"decision": "approve", "token": "not-a-token"},
            {"decision": "approve", "checked_reviewer": {"name": "alice", "role": "reviewer"}},  # forged
        ):
            body = {"assistant_id": "ctd", "command": {"resume": answer}, "context": ctx}
            refused = await http_client.post(f"/threads/{thread}/runs/wait", json=body)
            assert refused.status_code == 403, refused.text
    assert (await client.threads.get_state(thread))["next"] == ["human_review"]
    out = await client.runs.wait(
        thread, "ctd", command={"resume": {"decision": "approve", "token": alice, "note": "fine"}}, context=ctx
    )
    assert not error_of(out), error_of(out)
    assert out["status"] == "accepted" and [r["reviewer"] for r in out["review"]["reviews"]] == ["alice"]
    # What any client of the server reads of the run: the reviewer's name, never the token.
    runs = json.dumps(await client.runs.list(thread), default=str)
    assert alice not in runs and '"checked_reviewer": {"name": "alice"' in runs
    log = [json.loads(x) for x in (folder / "decisions.jsonl").read_text().splitlines()]
    assert [(x["reviewer"], x["decision"]) for x in log] == [("alice", "approve")]
    assert alice not in json.dumps(await client.threads.get_state(thread), default=str)


def test_what_the_server_writes_is_private_and_holds_no_token(langgraph_server: Any) -> None:
    """Stops the module's server (it writes its state as it stops) and reads what it left in `.langgraph_api/`."""
    assert TOKENS, "runs after the token test of this module"
    os.killpg(langgraph_server.proc.pid, signal.SIGTERM)
    langgraph_server.proc.wait(timeout=60)
    data = ROOT / ".langgraph_api"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    files = [p for p in data.iterdir() if p.is_file()]
    assert any(p.name == ".langgraph_ops.pckl" for p in files)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: "0o600" for p in files}
    for p in files:
        assert TOKENS["alice"].encode() not in p.read_bytes(), p
