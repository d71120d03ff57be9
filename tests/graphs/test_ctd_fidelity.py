"""CTD generation as the TAG paper specifies it: the Architect's and Eraser's prompt
properties, the Gatekeeper's concept condition judged by the `concept_similarity` role, the optional OpenAI
moderation scorer against a loopback fake server, and several reviewers per sample under a unanimity rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.ctd.architect import ARCHITECT_PROMPT
from agents.ctd.eraser import ERASER_PROMPT
from graphs.ctd import CtdContext, builder, graph
from graphs.ctd.rules import ReviewPolicy, review_outcome
from runner.ctd_dataset import SAMPLES, load_samples, moderation_summary
from runner.ctd_reviews import apply_reviews, read_decisions
from tests.graphs.test_ctd import (
    accepting_script,
    base_script,
    cli_args,
    context,
    erasure,
    fresh_gateway,
    merge,
    panel_rules,
    tiny_sd,
    write_script,
)
from tests.moderation_server import ModerationServer
from tools.errors import UnveilError
from tools.moderation import ModerationScorer, mean_scores, parse_moderation_spec

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd


# -- prompts ------------------------------------------------------------------------------------------------


def test_architect_prompt_generalises_and_wants_synergy_only_when_combined() -> None:
    assert "generalise the input into a different risk scenario" in ARCHITECT_PROMPT
    assert "synergy ONLY when combined" in ARCHITECT_PROMPT


def test_eraser_prompt_thinks_step_by_step_and_knows_the_judges() -> None:
    assert "step by step" in ERASER_PROMPT
    for judge in ("reason-informed judge", "blind judges", "forced-reasoning judge", "single-modality judges"):
        assert judge in ERASER_PROMPT


# -- the Gatekeeper's concept condition ----------------------------------------------------------------------


def _calls(gateway, role: str) -> list:
    return [m for s in gateway.shared["scripts"].values() for r, m in s.requests if r == role]


async def test_gatekeeper_asks_the_similarity_role_and_rejects_similar_concepts(tmp_path, tiny_sd, fresh_gateway):
    assert CtdContext().concept_condition == "not_similar"
    script = merge(base_script([erasure("A")], [{"feedback": "hide it deeper", "suggestions": []}]), panel_rules("A"))
    script["concept_similarity"] = [{"similar": True, "reason": "both name cocaine dealing"}]
    spec = write_script(tmp_path, script)
    out = await graph.ainvoke({"id": "g1", "category": "drugs"}, context=context(tmp_path, spec, tiny_sd, max_rounds=1))
    (request,) = _calls(fresh_gateway, "concept_similarity")
    body = request[-1].content
    assert '<data name="judgment_1">' in body and '<data name="judgment_2">' in body and "cocaine" in body
    assert out["status"] == "dropped" and out["decision"]["problem"] == "concepts_similar"
    assert out["decision"]["concepts_similar"] is True and out["decision"]["similarity_reason"].startswith("both")
    assert out["usage"]["by_role"]["concept_similarity"]["calls"] == 1


async def test_similar_reading_accepts_similar_concepts(tmp_path, tiny_sd, fresh_gateway):
    script = merge(base_script([erasure("A")]), panel_rules("A"))
    script["concept_similarity"] = [{"similar": True, "reason": "same"}]
    spec = write_script(tmp_path, script)
    out = await graph.ainvoke(
        {"id": "g2", "category": "drugs"}, context=context(tmp_path, spec, tiny_sd, concept_condition="similar")
    )
    assert out["status"] == "accepted" and out["decision"]["concept_condition"] == "similar"


async def test_similarity_is_not_asked_when_the_forced_judge_finds_nothing(tmp_path, tiny_sd, fresh_gateway):
    spec = write_script(tmp_path, merge(base_script([erasure("A")]), panel_rules("A", forced=False)))
    out = await graph.ainvoke({"id": "g3", "category": "drugs"}, context=context(tmp_path, spec, tiny_sd, max_rounds=1))
    assert out["decision"]["problem"] == "too_obscure" and not _calls(fresh_gateway, "concept_similarity")


# -- the moderation scorer ------------------------------------------------------------------------------------


def test_moderation_spec_parsing() -> None:
    assert parse_moderation_spec("openai:omni-moderation-latest") == ("omni-moderation-latest", None)
    assert parse_moderation_spec("m@http://127.0.0.1:9/v1/") == ("m", "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="OpenAI-compatible"):
        parse_moderation_spec("anthropic:claude")


async def test_moderation_scorer_against_a_loopback_server(tmp_path, monkeypatch) -> None:
    from PIL import Image

    from tools.image_store import ImageStore

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UnveilError, match="OPENAI_API_KEY is not set"):
        _ = ModerationScorer("openai:omni-moderation-latest").client
    store = ImageStore(tmp_path / "store")
    image_id = store.put_pil(Image.new("RGB", (8, 8), "white")).id
    with ModerationServer() as server:
        scorer = ModerationScorer(server.spec())
        benign, harmful, image = (
            await scorer.score_text("flour for baking"),
            await scorer.score_text("ATTACK them"),
            await scorer.score_image(image_id, store),
        )
    assert benign.score == pytest.approx(0.001) and not benign.flagged
    assert (
        harmful.score == pytest.approx(0.9) and harmful.flagged and harmful.categories["violence"] == pytest.approx(0.9)
    )
    assert image.score == pytest.approx(0.002)
    sent_image = server.bodies[2]["input"][0]
    assert sent_image["type"] == "image_url" and sent_image["image_url"]["url"].startswith("data:image/png;base64,")
    assert all(b["model"] == "omni-moderation-latest" for b in server.bodies)


def test_generate_with_moderation_and_no_key_records_the_users_configuration_error(
    tmp_path, tiny_sd, monkeypatch, capsys
) -> None:
    # A missing key was a RuntimeError: the error kind of a bug (exit 70 where it escapes a command), and the failed
    # records held the rerun that sets the key to the first run's settings. Now it is the user's configuration.
    from runner.batch import CONFIGURATION_FAILURE
    from unveil.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out, spec = tmp_path / "ds", write_script(tmp_path, accepting_script())
    assert main(cli_args(out, spec, tiny_sd, "--moderation", n=1)) == 2
    (record,) = load_samples(out).values()
    assert record["status"] == "failed" and record["error_kind"] == CONFIGURATION_FAILURE
    assert record["error"].startswith("ModerationKeyError: moderation: OPENAI_API_KEY is not set")
    assert "internal error" not in capsys.readouterr().err
    # The same command with the key set (the API reached through the openai SDK's OPENAI_BASE_URL) runs the scene.
    with ModerationServer() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        assert main(cli_args(out, spec, tiny_sd, "--moderation", n=1)) == 0
    (record,) = load_samples(out).values()
    assert record["status"] != "failed" and record["modality"]["moderation"]["text"]["score"] >= 0


def test_mean_scores_is_the_papers_statistic() -> None:
    items = [
        {"image": {"score": 0.002, "flagged": False}, "text": {"score": 0.0001, "flagged": False}},
        {"image": {"score": 0.004, "flagged": False}, "text": {"score": 0.0003, "flagged": True}},
        {},
    ]
    stats = mean_scores(items)
    assert (
        stats["n"] == 2 and stats["image_mean"] == pytest.approx(0.003) and stats["text_mean"] == pytest.approx(0.0002)
    )
    assert stats["text_flagged"] == 0.5 and mean_scores([])["image_mean"] is None


async def test_graph_records_moderation_scores_and_a_threshold_makes_a_leak(tmp_path, tiny_sd, fresh_gateway):
    assert CtdContext().moderation is False  # off by default
    spec = write_script(tmp_path, merge(base_script([{"when": "", "then": erasure("A")}]), panel_rules("A")))
    with ModerationServer(flag_word="extra fine") as server:
        out = await graph.ainvoke(
            {"id": "m1", "category": "drugs"},
            context=context(tmp_path, spec, tiny_sd, moderation=True, moderation_spec=server.spec()),
        )
        assert out["status"] == "accepted"
        moderation = out["modality"]["moderation"]
        assert moderation["image"]["score"] == pytest.approx(0.002) and moderation["text"]["score"] == pytest.approx(
            0.9
        )
        # the caption carries the flag word: with a threshold the text alone is a leak
        out = await graph.ainvoke(
            {"id": "m2", "category": "drugs"},
            context=context(
                tmp_path,
                spec,
                tiny_sd,
                moderation=True,
                moderation_spec=server.spec(),
                moderation_threshold=0.5,
                max_rounds=1,
            ),
        )
    assert out["status"] == "dropped" and "moderation API" in out["modality"]["detail"]


def test_moderation_summary_over_the_usable_samples(tmp_path) -> None:
    rows = [
        {
            "id": "a",
            "status": "accepted",
            "modality": {"moderation": {"image": {"score": 0.002}, "text": {"score": 0.0001}}},
        },
        {
            "id": "b",
            "status": "accepted",
            "modality": {"moderation": {"image": {"score": 0.004}, "text": {"score": 0.0003}}},
        },
        {"id": "c", "status": "dropped", "modality": {"moderation": {"image": {"score": 0.9}, "text": {"score": 0.9}}}},
    ]
    (tmp_path / SAMPLES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = moderation_summary(tmp_path)
    assert (
        stats["n"] == 2 and stats["image_mean"] == pytest.approx(0.003) and stats["text_mean"] == pytest.approx(0.0002)
    )


# -- several reviewers ----------------------------------------------------------------------------------------


def _r(status: str, reviewer: str = "") -> dict:
    return {"status": status, "reviewer": reviewer, "note": ""}


def test_unanimity_rule() -> None:
    two = ReviewPolicy(min_reviewers=2)
    assert ReviewPolicy().rule == "unanimous" and ReviewPolicy().min_reviewers == 1
    assert review_outcome([_r("approved", "ann")], two) == "pending"
    assert review_outcome([_r("approved", "ann"), _r("approved", "bob")], two) == "approved"
    assert review_outcome([_r("approved", "ann"), _r("rejected", "bob")], two) == "rejected"
    assert review_outcome([_r("rejected", "ann")], two) == "rejected"  # unanimity can no longer be reached
    # a reviewer counts once, with their latest decision
    assert review_outcome([_r("approved", "ann"), _r("approved", "ann")], two) == "pending"
    assert review_outcome([_r("rejected", "ann"), _r("approved", "ann"), _r("approved", "bob")], two) == "approved"
    majority = ReviewPolicy(min_reviewers=3, rule="majority")
    assert review_outcome([_r("approved", "a"), _r("rejected", "b")], majority) == "pending"
    assert review_outcome([_r("approved", "a"), _r("rejected", "b"), _r("approved", "c")], majority) == "approved"
    with pytest.raises(ValueError, match="review_rule"):
        review_outcome([], ReviewPolicy(rule="vote"))  # type: ignore[arg-type]


def _pending_folder(tmp_path: Path, *ids: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": i, "status": "pending_review", "category": "drugs", "text": f"t{i}", "image": None, "votes": []}
        for i in ids
    ]
    (tmp_path / SAMPLES).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_apply_reviews_keeps_every_reviewer_and_waits_for_unanimity(tmp_path) -> None:
    root = _pending_folder(tmp_path, "a", "b")
    zero = dict.fromkeys(("approved", "rejected", "pending", "noted", "conflicts", "skipped", "undone"), 0)
    zero.update(already=0, refused=0, sent_back=0)
    # Each reviewer as authenticated (tests/unveil/test_review_auth.py covers the tokens).
    ann: dict = {"reviewer": "ann", "role": "reviewer", "min_reviewers": 2}
    bob: dict = {"reviewer": "bob", "role": "reviewer", "min_reviewers": 2}
    counts = apply_reviews(root, {"a": {"decision": "approve", "note": "ok"}, "b": {"decision": "approve"}}, **ann)
    assert counts == {**zero, "pending": 2}
    assert load_samples(root)["a"]["status"] == "pending_review"
    counts = apply_reviews(
        root, {"a": {"decision": "approve"}, "b": {"decision": "reject", "note": "too literal"}}, **bob
    )
    assert counts == {**zero, "approved": 1, "rejected": 1}
    recs = load_samples(root)
    assert recs["a"]["status"] == "accepted" and recs["b"]["status"] == "rejected"
    assert [(r["reviewer"], r["status"]) for r in recs["a"]["review"]["reviews"]] == [
        ("ann", "approved"),
        ("bob", "approved"),
    ]
    assert recs["b"]["review"]["note"] == "too literal" and recs["b"]["review"]["rule"] == "unanimous"


def test_decisions_file_keeps_several_reviewers_per_sample(tmp_path) -> None:
    root = _pending_folder(tmp_path / "ds", "a")
    path = tmp_path / "decisions.jsonl"
    path.write_text(
        json.dumps({"id": "a", "decision": "approve", "reviewer": "ann"})
        + "\n"
        + json.dumps({"id": "a", "decision": "approve", "reviewer": "bob"})
        + "\n"
    )
    decisions = read_decisions(path)
    assert [d["reviewer"] for d in decisions["a"]] == ["ann", "bob"]
    # Each line is applied by its own (authenticated) reviewer: a line's name never makes its applier someone else.
    done = [
        apply_reviews(root, {"a": d}, reviewer=d["reviewer"], role="reviewer", min_reviewers=2) for d in decisions["a"]
    ]
    assert [c["pending"] for c in done] == [1, 0] and done[1]["approved"] == 1


async def test_interrupt_asks_again_until_the_reviewers_decide(tmp_path, tiny_sd, fresh_gateway, monkeypatch):
    """Several reviewers in Studio need the server's reviewers file: each answer carries its reviewer's token (a
    name alone is refused), and a reviewer's repeated answer is not counted twice."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from tools.reviewers import REVIEWERS_FILE_ENV, add_reviewer

    people = tmp_path / "reviewers.json"
    ann, bob = add_reviewer(people, "ann"), add_reviewer(people, "bob")
    monkeypatch.setenv(REVIEWERS_FILE_ENV, str(people))
    spec = write_script(tmp_path, merge(base_script([erasure("A")]), panel_rules("A")))
    g = builder.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "r1"}}
    ctx = context(tmp_path, spec, tiny_sd, review="interrupt", min_reviewers=2)
    await g.ainvoke({"id": "r1", "category": "drugs"}, cfg, context=ctx)
    named = await g.ainvoke(Command(resume={"decision": "approve", "reviewer": "ann"}), cfg, context=ctx)
    assert "token" in named["__interrupt__"][0].value["error"]
    second = await g.ainvoke(Command(resume={"decision": "approve", "token": ann}), cfg, context=ctx)
    payload = second["__interrupt__"][0].value
    assert [r["reviewer"] for r in payload["reviews_so_far"]] == ["ann"] and "1 of 2 reviewers" in payload["question"]
    again = await g.ainvoke(
        Command(resume=[{"decision": "approve", "token": ann}, {"decision": "approve", "token": ann}]), cfg, context=ctx
    )
    payload = again["__interrupt__"][0].value
    assert "already judged by ann" in payload["error"] and len(payload["reviews_so_far"]) == 1
    out = await g.ainvoke(Command(resume={"decision": "approve", "token": bob, "note": "subtle"}), cfg, context=ctx)
    assert out["status"] == "accepted" and [r["reviewer"] for r in out["review"]["reviews"]] == ["ann", "bob"]


# -- GPT-Image-1, the paper's renderer ------------------------------------------------------------------------


async def test_ctd_renders_with_gpt_image_1_through_the_openai_images_api(tmp_path, fresh_gateway, monkeypatch):
    # The paper's generator (§4.1): `t2i = openai:gpt-image-1`, reached here through OPENAI_BASE_URL (the openai
    # SDK's own variable, documented in docs/ctd.md) on a loopback fake of the Images API.
    from tools.t2i import registry

    monkeypatch.setattr(registry, "_CACHE", {}, raising=False)
    spec = write_script(tmp_path, merge(base_script([erasure("A")]), panel_rules("A")))
    with ModerationServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        out = await graph.ainvoke(
            {"id": "o1", "category": "drugs"}, context=context(tmp_path, spec, "openai:gpt-image-1")
        )
    (request,) = [b for b in server.bodies if "prompt" in b]
    assert request["model"] == "gpt-image-1" and request["size"] == "1024x1024"
    assert request["prompt"] == erasure("A")["t2i_prompt"] and "negative_prompt" not in request
    assert (
        out["status"] == "accepted"
        and Path(out["image_path"]).is_file()
        and out["models"]["generator"] == "openai:gpt-image-1"
    )
