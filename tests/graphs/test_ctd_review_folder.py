"""Review in Studio and in the web app agree: with the server's review folder set (`UNVEIL_REVIEW_DIR`), the CTD
graph's human-review node queues its sample in the folder the web app reads, takes a decision made there (undos
counted as the web app counts them), and writes its own decisions into the same files under the same lock.

The graph runs on the scripted provider and the tiny random-weight Stable Diffusion pipeline, as in test_ctd.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphs.ctd import builder
from runner.ctd_dataset import DECISIONS, SAMPLES, dataset_lock
from tests.graphs.test_ctd import (
    base_script,
    context,
    erasure,
    fresh_gateway,
    merge,
    panel_rules,
    tiny_sd,
    write_script,
)
from tools import review_log
from tools.review_log import REVIEW_DIR_ENV, review_lock
from tools.reviewers import REVIEWERS, add_reviewer
from unveil.ui.sources import CtdSource

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd.py

THREAD = "t-review"
SID = f"studio-{THREAD}"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The review folder, named by the server's own setting (the environment), never by a run."""
    root = tmp_path / "review"
    monkeypatch.setenv(REVIEW_DIR_ENV, str(root))
    return root


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


async def start(tmp_path: Path, tiny_sd: str, **kw: Any) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
    """A CTD thread run up to its human review: (graph, config, context, first result)."""
    spec = write_script(tmp_path, merge(base_script([{"when": "", "then": erasure("A")}]), panel_rules("A")))
    g = builder.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": THREAD}}
    ctx = context(tmp_path, spec, tiny_sd, review="interrupt", **kw)
    first = await g.ainvoke({"id": "s1", "category": "drugs"}, cfg, context=ctx)
    return g, cfg, ctx, first


async def test_review_decided_in_the_web_app_resolves_the_studio_run(tmp_path, tiny_sd, folder):
    g, cfg, ctx, first = await start(tmp_path, tiny_sd)
    payload = first["__interrupt__"][0].value
    assert payload["review_id"] == SID
    # The paused sample is listed by the web app, pending, with its image served from the folder's store.
    web = CtdSource(folder)
    assert [(r["id"], r["status"]) for r in web.rows()] == [(SID, "pending_review")]
    card = web.record(SID)
    assert card is not None and card["image_id"] and not card["image_refused"]
    assert card["text"].startswith("CAPTION-A:")

    web.decide(SID, "reject", "too literal", ("alice", "local"))
    # Resumed with no decision of its own: the node reads the folder again and takes the web app's.
    out = await g.ainvoke(Command(resume={}), cfg, context=ctx)
    assert "__interrupt__" not in out
    assert out["status"] == "rejected"
    assert [(r["reviewer"], r["status"], r["note"]) for r in out["review"]["reviews"]] == [
        ("alice", "rejected", "too literal")
    ]

    # A decision already in the folder resolves a (re)run without any pause.
    g2 = builder.compile(checkpointer=InMemorySaver())
    again = await g2.ainvoke({"id": "s1", "category": "drugs"}, cfg, context=ctx)
    assert "__interrupt__" not in again and again["status"] == "rejected"


async def test_review_undone_in_the_web_app_pauses_studio_again(tmp_path, tiny_sd, folder):
    g, cfg, ctx, _ = await start(tmp_path, tiny_sd)
    web = CtdSource(folder)
    web.decide(SID, "approve", "", ("alice", "local"))
    web.undo(SID, 0, ("alice", "local"))  # the web app counts the approval as taken back: pending again
    assert web.record(SID)["status"] == "pending_review"
    out = await g.ainvoke(Command(resume="web"), cfg, context=ctx)
    assert "__interrupt__" in out  # the undone approval does not decide; the empty answer is asked again
    assert "decision must be" in out["__interrupt__"][0].value["error"]
    out = await g.ainvoke(Command(resume={"decision": "approve", "reviewer": "bob"}), cfg, context=ctx)
    assert out["status"] == "accepted"
    assert [r["reviewer"] for r in out["review"]["reviews"]] == ["bob"]


async def test_review_decided_in_studio_shows_in_the_web_app(tmp_path, tiny_sd, folder):
    """Two reviewers need the folder's reviewers file: each Studio answer carries its reviewer's token, a
    repeated answer is not logged twice, and the web app's undo is the reviewer's own."""
    carol, dave = add_reviewer(folder / REVIEWERS, "carol"), add_reviewer(folder / REVIEWERS, "dave")
    g, cfg, ctx, first = await start(tmp_path, tiny_sd, min_reviewers=2)
    # The question names the field the token mode reads (issue 45: it said 'reviewer', which is ignored here).
    question = first["__interrupt__"][0].value["question"]
    assert "'token': 'YOUR REVIEWER TOKEN'" in question and "'reviewer'" not in question
    out = await g.ainvoke(
        Command(resume={"decision": "approve", "note": "fine", "token": carol, "reviewer": "dave"}), cfg, context=ctx
    )
    assert out["__interrupt__"][0].value["reviews_so_far"] == [
        {"reviewer": "carol", "status": "approved", "note": "fine"}
    ]
    assert "1 of 2 reviewers so far" in out["__interrupt__"][0].value["question"]
    assert "'token'" in out["__interrupt__"][0].value["question"]
    web = CtdSource(folder)
    assert web.record(SID)["status"] == "pending_review"  # one of two reviewers so far
    out = await g.ainvoke(Command(resume={"decision": "approve", "token": carol}), cfg, context=ctx)
    assert out["__interrupt__"][0].value["error"] == "carol: already judged by you"
    out = await g.ainvoke(Command(resume={"decision": "approve", "token": dave}), cfg, context=ctx)
    assert out["status"] == "accepted"
    # Each Studio answer is one decisions.jsonl line with its reviewer and time (the node's re-run replays the
    # first answer, which is not written twice), and the web app shows the sample decided by both.
    log = lines(folder / DECISIONS)
    assert [(x["id"], x["decision"], x["reviewer"]) for x in log] == [
        (SID, "approve", "carol"),
        (SID, "approve", "dave"),
    ]
    assert all(x["time"] for x in log)
    card = web.record(SID)
    assert card["status"] == "accepted" and card["review"]["status"] == "approved"
    assert card["judgements"] == {"carol": "approve", "dave": "approve"}
    assert [r for r in web.rows() if r["id"] == SID][0]["review_status"] == "approved"
    # The web app's undo of a Studio decision works on the same history, for its own reviewer only.
    assert web.undo(SID, 1, ("carol", "reviewer"))["refused"] == 1
    assert web.undo(SID, 1, ("dave", "reviewer"))["undone"] == 1
    assert web.record(SID)["status"] == "pending_review"


async def test_review_studio_and_the_web_app_share_one_lock(tmp_path, tiny_sd, folder, monkeypatch):
    """Each side's decision waits while the other holds the folder's lock: the holder lets go only once the decision
    has tried the lock and been refused, and nothing was written until then (no clock involved)."""
    g, cfg, ctx, _ = await start(tmp_path, tiny_sd)
    held, refused, seen = threading.Event(), threading.Event(), {}
    try_lock = review_log._try_lock

    def watched_try(fd: int) -> bool:
        taken = try_lock(fd)
        if not taken:
            refused.set()
        return taken

    monkeypatch.setattr(review_log, "_try_lock", watched_try)

    def hold(lock: Any) -> None:
        with lock(folder):
            held.set()
            seen["refused"] = refused.wait(60)  # the other side tried the lock while it was held here
            seen["log"] = lines(folder / DECISIONS)

    # The web app's lock held: the Studio decision waits for it.
    holder = threading.Thread(target=hold, args=(dataset_lock,))
    holder.start()
    assert held.wait(60)
    out = await g.ainvoke(Command(resume={"decision": "reject", "reviewer": "erin"}), cfg, context=ctx)
    holder.join()
    assert seen["refused"] and seen["log"] == []
    assert out["status"] == "rejected" and [x["reviewer"] for x in lines(folder / DECISIONS)] == ["erin"]

    # The lock Studio takes held: a web app decision waits for it.
    held.clear()
    refused.clear()
    holder = threading.Thread(target=hold, args=(review_lock,))
    holder.start()
    assert held.wait(60)
    CtdSource(folder).decide(SID, "note", "seen", ("frank", "local"))
    holder.join()
    assert seen["refused"] and [x["reviewer"] for x in seen["log"]] == ["erin"]
    assert [x["reviewer"] for x in lines(folder / DECISIONS)] == ["erin", "frank"]


async def test_review_without_a_folder_keeps_studio_to_itself(tmp_path, tiny_sd, monkeypatch):
    monkeypatch.delenv(REVIEW_DIR_ENV, raising=False)
    g, cfg, ctx, first = await start(tmp_path, tiny_sd)
    assert "review_id" not in first["__interrupt__"][0].value
    out = await g.ainvoke(Command(resume="approve"), cfg, context=ctx)
    assert out["status"] == "accepted"
    assert not list(tmp_path.rglob(SAMPLES)) and not list(tmp_path.rglob(DECISIONS))
