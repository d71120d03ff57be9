"""A review folder whose lock someone else holds (a running `unveil generate`, `unveil review`, a script, or
another thread of the server): the pages still answer, and every decision answers promptly "busy, nothing was
saved; try again" with the way back, instead of waiting 30 s in a thread the pages need (issue 32 item 7: a held
lock froze every page for about 43 s, since the waiting decisions took every worker thread).

Synchronisation is by handshakes only: the holder says when it holds the lock, and the waiting decisions are
held inside the lock's poll (`tools.review_log._pause`) until the page has answered."""

from __future__ import annotations

import asyncio
import contextvars
import http.client
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, SAMPLES
from runner.ctd_reviews import apply_reviews
from tests.ui_data import make_ctd_dataset
from tests.unveil.test_ui import Server
from tools import review_log
from tools.review_log import ReviewBusyError, review_lock, review_lock_async
from unveil.ui import create_app

N_DECISIONS = 40  # more than any worker pool the server has (asyncio's default is at most 32 threads)
HANG_GUARD_S = 120  # only for a test that fails by hanging; no outcome depends on it


@contextmanager
def lock_held_by(kind: str, folder: Path) -> Iterator[None]:
    """The folder's lock held by another process (as a running `unveil generate` holds it) or by another thread
    of this one, until the block ends."""
    if kind == "process":
        code = (
            "import sys\nfrom tools.review_log import review_lock\n"
            f"with review_lock({str(folder)!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            yield
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(HANG_GUARD_S)
        return
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with review_lock(folder):
            held.set()
            done.wait()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert held.wait(HANG_GUARD_S)
        yield
    finally:
        done.set()
        holder.join(HANG_GUARD_S)


def request(srv: Server, method: str, path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=HANG_GUARD_S)
    try:
        body = urllib.parse.urlencode(form) if form is not None else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
        conn.request(method, path, body, headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def hold_waiters(monkeypatch: pytest.MonkeyPatch, n: int) -> tuple[threading.Event, threading.Event]:
    """Keep every decision that waits for the lock inside the wait until `release` is set; `all_waiting` is set
    once `n` decisions wait at the same time."""
    all_waiting, release = threading.Event(), threading.Event()
    waiting: set[int] = set()
    mu = threading.Lock()
    poll = review_log._pause

    async def held() -> None:
        with mu:
            waiting.add(id(asyncio.current_task()))
            if len(waiting) >= n:
                all_waiting.set()
        while not release.is_set():
            await poll()

    monkeypatch.setattr(review_log, "_pause", held)
    return all_waiting, release


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["process", "thread"])
def test_a_held_folder_lock_stops_no_page_and_a_decision_says_it_was_not_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: str
) -> None:
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    pending = data["pending"]
    all_waiting, release = hold_waiters(monkeypatch, N_DECISIONS)
    app = create_app(ds)
    csrf = app.state.guard.csrf
    samples_before = (ds / SAMPLES).read_bytes()
    answers: list[tuple[int, str]] = []

    def decide(k: int) -> None:
        form = {"id": pending[k % len(pending)], "decision": "note", "note": f"n{k}", "csrf": csrf}
        answers.append(request(srv, "POST", "/review/decide", form))

    with Server(app) as srv, lock_held_by(holder, ds):
        clients = [threading.Thread(target=decide, args=(k,)) for k in range(N_DECISIONS)]
        try:
            for c in clients:
                c.start()
            # Every decision waits for the lock at once: none holds a worker thread while it waits.
            assert all_waiting.wait(HANG_GUARD_S), "the decisions did not all wait at once"
            # ... and the pages answer meanwhile, from the file as it is (they never take the lock).
            status, html = request(srv, "GET", "/review")
            assert status == 200 and pending[0] in html
            status, html = request(srv, "GET", f"/review?id={pending[1]}")
            assert status == 200 and pending[1] in html
            status, _ = request(srv, "GET", "/reviewers")
            assert status == 200
        finally:
            release.set()
            for c in clients:
                c.join(HANG_GUARD_S)
        # The default wait runs out while the folder is still held: each decision says it was not saved, why,
        # and how to try again; nothing was written.
        assert len(answers) == N_DECISIONS
        for status, html in answers:
            assert status == 503, html[-400:]
            assert "Busy: not saved, try again" in html and "nothing was saved; try again" in html
            assert f"stayed locked for {review_log.DECISION_WAIT_S:g} s" in html and 'id="not-saved-back"' in html
        assert not (ds / DECISIONS).exists() and (ds / SAMPLES).read_bytes() == samples_before
    # Once the folder is free the same decision is saved.
    with Server(app) as srv:
        status, _ = request(srv, "POST", "/review/decide", {"id": pending[0], "decision": "note", "csrf": csrf})
        assert status == 303
    assert len((ds / DECISIONS).read_text().splitlines()) == 1


def test_the_folder_lock_is_taken_again_inside_its_holder_and_excludes_every_other(tmp_path: Path) -> None:
    """A decision holding the lock from the event loop runs its work in a thread that takes the same lock at
    once (it carries the holder's context), while a thread or a task outside that context is refused."""
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    seen: dict[str, Any] = {}

    def outsider() -> str:
        try:
            with review_lock(ds, timeout=0):
                return "got it"
        except ReviewBusyError as exc:
            return str(exc)

    async def other_request() -> str:
        try:
            async with review_lock_async(ds, timeout=0):
                return "got it"
        except ReviewBusyError as exc:
            return str(exc)

    async def main() -> None:
        async with review_lock_async(ds):
            decision = {data["pending"][0]: {"decision": "note", "note": "x"}}
            seen["counts"] = await asyncio.to_thread(apply_reviews, ds, decision, views=False)
            thread_answer: list[str] = []
            other = threading.Thread(target=lambda: thread_answer.append(outsider()))
            other.start()
            await asyncio.to_thread(other.join)
            seen["thread"] = thread_answer[0]
            seen["task"] = await asyncio.create_task(other_request(), context=contextvars.Context())
        seen["after"] = outsider()

    asyncio.run(main())
    assert seen["counts"]["noted"] == 1
    for who in ("thread", "task"):
        assert "stayed locked for 0 s: nothing was saved; try again" in seen[who], seen[who]
    assert seen["after"] == "got it"
