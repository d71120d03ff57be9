"""Send back from Studio (issue 34 item 10): a reviewer answering the CTD graph's human-review interrupt with
`{"decision": "send_back", "note": ...}` sends the paused run back to the Eraser, which reads the note as
delimited data; the new attempt is judged and reviewed again. With the server's review folder set the send back
(from Studio or from the web app) is shared with the web app. Scripted models and the tiny random-weight Stable
Diffusion pipeline, through the compiled graph with a checkpointer, as in tests/graphs/test_ctd.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphs.ctd import builder
from runner.ctd_dataset import DECISIONS, SAMPLES
from tests.graphs.test_ctd import (
    base_script,
    context,
    erasure,
    fresh_gateway,
    merge,
    panel_rules,
    scripted_calls,
    tiny_sd,
    write_script,
)
from tools.review_log import REVIEW_DIR_ENV
from unveil.ui.sources import CtdSource

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd.py

NOTE = "the scale gives it away: NOTE-7Q"
THREAD = "t-send-back"


def script(tmp_path: Path, *, b_accepted: bool = True) -> str:
    """The Eraser answers B once the reviewer's note is in its request, else A; the panel accepts A, and B
    unless `b_accepted` is false (then every blind judge sees B's risk: too easy)."""
    eraser = [{"when": "NOTE-7Q", "then": erasure("B")}, {"when": "", "then": erasure("A")}]
    b_rules = panel_rules("B") if b_accepted else panel_rules("B", blind=(True,) * 4)
    return write_script(tmp_path, merge(base_script(eraser), panel_rules("A"), b_rules))


async def start(tmp_path: Path, tiny_sd: str, **kw: Any) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
    """A CTD thread with a checkpointer run up to its first human review: (graph, config, context, result)."""
    spec = script(tmp_path, b_accepted=kw.pop("b_accepted", True))
    g = builder.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": THREAD}}
    ctx = context(tmp_path, spec, tiny_sd, review="interrupt", **kw)
    first = await g.ainvoke({"id": "s1", "category": "drugs", "seed": 11}, cfg, context=ctx)
    return g, cfg, ctx, first


def eraser_requests(gateway: Any) -> list[str]:
    """The text of every request the Eraser was sent, in order."""
    return [
        "\n".join(str(m.content) for m in msgs)
        for s in gateway.shared["scripts"].values()
        for role, msgs in s.requests
        if role == "eraser"
    ]


async def test_a_studio_send_back_gives_the_eraser_another_attempt(tmp_path, tiny_sd, fresh_gateway, monkeypatch):
    monkeypatch.delenv(REVIEW_DIR_ENV, raising=False)
    g, cfg, ctx, first = await start(tmp_path, tiny_sd)
    shown = first["__interrupt__"][0].value
    assert shown["text"].startswith("CAPTION-A:") and "'send_back'" in shown["question"]

    again = await g.ainvoke(
        Command(resume={"decision": "send_back", "note": NOTE, "reviewer": "ann"}), cfg, context=ctx
    )
    # The Eraser ran again with the note inside its delimited data, and the new attempt waits for review.
    requests = eraser_requests(fresh_gateway)
    assert len(requests) == 2 and NOTE not in requests[0]
    data = requests[1][requests[1].index('<data name="earlier_attempts_and_feedback">') :]
    assert NOTE in data[: data.index("</data>")]
    assert scripted_calls(fresh_gateway, "architect") == 1  # nothing before the Eraser is asked again
    shown = again["__interrupt__"][0].value
    assert shown["text"].startswith("CAPTION-B:") and shown["rounds"] == 2
    state = (await g.aget_state(cfg)).values
    assert state["status"] == "sent_back" and state["feedback_history"][-1]["problem"] == "reviewer_rejected"
    assert state["feedback_history"][-1]["feedback"] == NOTE

    out = await g.ainvoke(Command(resume={"decision": "approve", "reviewer": "ann"}), cfg, context=ctx)
    assert out["status"] == "accepted" and out["text"].startswith("CAPTION-B:") and out["rounds"] == 2
    assert [r["status"] for r in out["review"]["reviews"]] == ["approved"]
    # The history keeps the send back: who, what note, which attempt.
    assert [(b["reviewer"], b["note"], b["round"]) for b in out["sent_back"]] == [("ann", NOTE, 1)]
    assert out["sent_back"][0]["time"]


MALFORMED = [
    ({"decision": "send_back"}, "note is empty"),
    ({"decision": "send_back", "note": "  "}, "note is empty"),
    ({"decision": "approve", "send_back": True, "note": "x"}, "decision is 'approve'"),
    ({"decision": "reject", "send_back": "yes", "note": "x"}, "send_back must be true or false"),
    ({"decision": "send_back", "note": 3}, "note must be text"),
    ({"decision": "return"}, "decision must be 'approve', 'reject' or 'send_back'"),
]


async def test_a_malformed_send_back_is_asked_again_with_the_field_named(tmp_path, tiny_sd, fresh_gateway, monkeypatch):
    monkeypatch.delenv(REVIEW_DIR_ENV, raising=False)
    g, cfg, ctx, _ = await start(tmp_path, tiny_sd)
    for answer, field in MALFORMED:
        out = await g.ainvoke(Command(resume=answer), cfg, context=ctx)
        error = out["__interrupt__"][0].value["error"]
        assert field in error and "\n" not in error, (answer, error)
    assert len(eraser_requests(fresh_gateway)) == 1  # nothing was sent back
    out = await g.ainvoke(Command(resume={"decision": "approve"}), cfg, context=ctx)
    assert out["status"] == "accepted" and not out.get("sent_back")


async def test_a_send_back_past_max_rounds_is_dropped_if_the_judges_reject_it(
    tmp_path, tiny_sd, fresh_gateway, monkeypatch
):
    # The same limit on attempts as every revision: a sent-back attempt past `max_rounds` that the judges reject
    # ends the scene as dropped (no gatekeeper feedback after the last attempt).
    monkeypatch.delenv(REVIEW_DIR_ENV, raising=False)
    g, cfg, ctx, _ = await start(tmp_path, tiny_sd, max_rounds=1, b_accepted=False)
    out = await g.ainvoke(Command(resume={"decision": "send_back", "note": NOTE}), cfg, context=ctx)
    assert out["status"] == "dropped" and out["rounds"] == 2 and out["drop_reason"].startswith("too_easy")
    assert out["sent_back"][0]["note"] == NOTE


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


async def test_a_send_back_in_the_review_folder_is_shared_with_the_web_app(
    tmp_path, tiny_sd, fresh_gateway, monkeypatch
):
    folder = tmp_path / "review"
    monkeypatch.setenv(REVIEW_DIR_ENV, str(folder))
    sid = f"studio-{THREAD}"
    g, cfg, ctx, first = await start(tmp_path, tiny_sd)
    assert first["__interrupt__"][0].value["review_id"] == sid
    # Sent back in Studio: the folder's history says so, the run goes on to the Eraser, and its new attempt is
    # queued again in the folder, pending, with the history and the note kept.
    again = await g.ainvoke(
        Command(resume={"decision": "send_back", "note": NOTE, "reviewer": "ann"}), cfg, context=ctx
    )
    assert again["__interrupt__"][0].value["text"].startswith("CAPTION-B:")
    log = lines(folder / DECISIONS)
    assert [(x["decision"], x["reviewer"], x.get("send_back")) for x in log] == [("reject", "ann", True)]
    web = CtdSource(folder)
    card = web.record(sid)
    assert card is not None and card["status"] == "pending_review" and card["text"].startswith("CAPTION-B:")
    assert card["judgements"] == {} and not card["disagree"]  # ann's rejection judged the earlier pair
    latest = [r for r in lines(folder / SAMPLES) if r["id"] == sid][-1]
    assert latest["sent_back"][0]["note"] == NOTE and len(latest["review_history"]) == 1

    # Sent back in the web app: the paused run, resumed with any value, takes it and goes back to the Eraser.
    web.decide(sid, "reject", "NOTE-7Q once more", ("bob", "local"), labels={"send_back": True})
    third = await g.ainvoke(Command(resume="web"), cfg, context=ctx)
    assert third["__interrupt__"][0].value["rounds"] == 3
    assert "NOTE-7Q once more" in eraser_requests(fresh_gateway)[-1]
    out = await g.ainvoke(Command(resume={"decision": "approve", "reviewer": "ann"}), cfg, context=ctx)
    assert out["status"] == "accepted" and [b["reviewer"] for b in out["sent_back"]] == ["ann", "bob"]
    assert web.record(sid)["status"] == "accepted" and web.record(sid)["judgements"] == {"ann": "approve"}
    assert [x["decision"] for x in lines(folder / DECISIONS)] == ["reject", "reject", "approve"]


async def test_a_sent_back_sample_the_judges_drop_is_recorded_dropped_in_the_review_folder(
    tmp_path, tiny_sd, fresh_gateway, monkeypatch
):
    folder = tmp_path / "review"
    monkeypatch.setenv(REVIEW_DIR_ENV, str(folder))
    g, cfg, ctx, _ = await start(tmp_path, tiny_sd, max_rounds=1, b_accepted=False)
    out = await g.ainvoke(Command(resume={"decision": "send_back", "note": NOTE}), cfg, context=ctx)
    assert out["status"] == "dropped"
    # The web app no longer shows it waiting for the Eraser: dropped, its review history and the note kept.
    latest = [r for r in lines(folder / SAMPLES) if r["id"] == f"studio-{THREAD}"][-1]
    assert latest["status"] == "dropped" and latest["drop_reason"].startswith("too_easy")
    assert [h["decision"] for h in latest["review_history"]] == ["reject"] and latest["sent_back"][0]["note"] == NOTE
    assert CtdSource(folder).record(f"studio-{THREAD}")["status"] == "dropped"
