"""Review in Studio and in `unveil ui` agree, in Debian's headless chromium (Playwright), as tests/unveil/test_ui.py:
a CTD run paused for human review with the server's review folder set (`UNVEIL_REVIEW_DIR`) is listed in the web
app with its image; approving it in the page ends the run with that decision when it is resumed, and a decision
given to the run (Studio's resume value) shows in the page after a reload.

The graph runs on the scripted provider and the tiny random-weight Stable Diffusion pipeline (tests/graphs/test_ctd.py),
on an event loop of its own thread: the module's Playwright session keeps one running in the test's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from langgraph.types import Command

from runner.ctd_dataset import DECISIONS, load_samples
from tests.graphs.test_ctd import fresh_gateway, tiny_sd
from tests.graphs.test_ctd_review_folder import SID, folder, lines, start
from tests.unveil.test_ui import Server, browser, natural_widths, new_page
from unveil.ui import create_app

__all__ = ["browser", "folder", "fresh_gateway", "tiny_sd"]  # fixtures shared with the modules they come from

pytestmark = pytest.mark.slow  # every test starts a server (CI runs them all)

Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(scope="module")
def run_graph() -> Iterator[Run]:
    """Run a coroutine to its end on one event loop in a thread of its own, for the whole module."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=300)

    yield run
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_a_studio_run_is_approved_in_the_page_and_resumes_with_it(browser, tmp_path, tiny_sd, folder, run_graph):
    g, cfg, ctx, first = run_graph(start(tmp_path, tiny_sd))
    assert first["__interrupt__"][0].value["review_id"] == SID
    with Server(create_app(folder, reviewer="alice")) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/")
        # The paused Studio sample is listed and opened, pending, with its generated image from the folder's store.
        assert page.locator("#sample-list .sid").all_inner_texts() == [SID]
        assert page.locator("#card").get_attribute("data-id") == SID
        assert page.locator("#status").inner_text() == "pending"
        assert natural_widths(page, "#sample-img")[0] == 32
        assert page.locator("#sample-text").inner_text().startswith("CAPTION-A:")
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator("#card-empty").count() == 1  # nothing left to review
    assert load_samples(folder)[SID]["status"] == "accepted"

    # Resumed with any value, the run takes the web app's decision and ends without pausing again.
    out = run_graph(g.ainvoke(Command(resume="web"), cfg, context=ctx))
    assert "__interrupt__" not in out
    assert out["status"] == "accepted"
    assert [(r["reviewer"], r["status"]) for r in out["review"]["reviews"]] == [("alice", "approved")]
    # The web app logged the one decision; the run added none of its own.
    assert [(x["id"], x["decision"], x["reviewer"]) for x in lines(folder / DECISIONS)] == [(SID, "approve", "alice")]


@pytest.mark.parametrize(
    ("answer", "reviewer", "status", "chip"),
    [
        ("reject", "studio", "rejected", "rejected"),  # a bare answer names no reviewer: logged as 'studio'
        ({"decision": "approve", "note": "subtle enough", "reviewer": "carol"}, "carol", "accepted", "accepted"),
    ],
)
def test_a_decision_given_in_studio_shows_in_the_page(
    browser, tmp_path, tiny_sd, folder, run_graph, answer, reviewer, status, chip
):
    g, cfg, ctx, _ = run_graph(start(tmp_path, tiny_sd))
    with Server(create_app(folder, reviewer="alice")) as srv:
        page = new_page(browser)
        page.goto(f"{srv.url}/review?status=&id={SID}")
        assert page.locator("#status").inner_text() == "pending"
        assert page.locator("#review-history").count() == 0
        out = run_graph(g.ainvoke(Command(resume=answer), cfg, context=ctx))
        assert "__interrupt__" not in out and out["status"] == status
        page.reload()
        assert page.locator("#card").get_attribute("data-id") == SID
        assert page.locator("#status").inner_text() == chip
        entries = page.locator("#review-history li")
        assert entries.count() == 1
        text = " ".join(entries.nth(0).inner_text().split())
        decision = "reject" if status == "rejected" else "approve"
        assert f"{reviewer} · {decision}" in text
        if isinstance(answer, dict):
            assert "subtle enough" in text
        # The page offers the web app's undo on the Studio decision, as on its own.
        assert entries.nth(0).locator(".undo-button").count() == 1
        # The sample left the queue: the queue's filter (pending) lists nothing.
        page.goto(srv.url + "/review")
        assert page.locator("#card-empty").count() == 1
