"""The generation nodes of the CTD graph and their routes: Architect, Eraser (+ text-to-image), single-modality
check, one panel judge, Gatekeeper, feedback, and the drop of a scene that used up its attempts."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from agents.cache import sample_seed
from agents.content import ImagePart
from agents.ctd.architect import write_scene
from agents.ctd.eraser import erase
from agents.ctd.gatekeeper import write_feedback
from agents.ctd.judges import judge_image_alone, judge_pair, judge_text_alone
from agents.ctd.similarity import judge_similarity
from agents.ctd.vocabulary import CATEGORIES, normalize_category
from agents.gateway import ModelCallError, StructuredOutputError, get_gateway
from agents.usage import merge_usage
from graphs.context import check_context
from graphs.ctd.classify import classifier_flags, moderation_leaks, moderation_scores
from graphs.ctd.context import CtdContext
from graphs.ctd.resources import ctd_generator, open_store
from graphs.ctd.rules import answered_votes, compared_votes, decide
from graphs.ctd.send_back import record_drop
from graphs.ctd.state import CtdState, JudgedAttempt, JudgeTask, attempt_seed, round_votes
from tools.web_search import get_web_search

log = logging.getLogger("unveil.ctd")


def _image(state: CtdState) -> ImagePart:
    # Text-only judges see what the T2I model was asked to draw, as a description of the image.
    return ImagePart(name="image", image_id=state.get("image_id"), description=state.get("t2i_prompt"))


async def architect(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Draft the explicit scene, with web search results when the tool is available."""
    ctx = runtime.context
    await check_context(ctx)
    category = normalize_category(state.get("category"))
    if category not in CATEGORIES:
        raise ValueError(f"category: {state.get('category')!r} is not one of {', '.join(CATEGORIES)}")
    results = None
    search = get_web_search() if ctx.web_search else None
    if search is not None:
        query = f"{category.replace('_', ' ')} {state.get('scene_hint') or ''} concealment tricks".strip()
        try:
            results = await search.search(query)
        except Exception as exc:  # noqa: BLE001 - search is optional context; the scene can be written without it
            log.warning("web search failed (%s); the Architect goes on without it", exc)
    result = await write_scene(
        get_gateway(),
        ctx.spec_for("architect"),
        category=category,
        scene_hint=state.get("scene_hint"),
        erase_routine=state.get("erase_routine"),
        search_results=results,
        seed=int(state.get("seed", 0)),  # each scene of a category is its own request, cached apart
    )
    scene = result.value.model_dump()
    return {
        "category": category,
        "subcategory": scene["subcategory"],
        "scene": scene,
        "rounds": 0,
        "feedback_history": [],
        "seeds": [],
        "models": ctx.provenance(),
        "web_search": results is not None,
        "usage": result.usage,
    }


async def eraser(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Erase the cue (seeing earlier attempts and their feedback), then render the image."""

    ctx = runtime.context
    round_no = state.get("rounds", 0) + 1
    # One seed per attempt, derived from the scene's seed, so a rerun renders the same images; every model call of
    # the attempt carries it, so a repeated request in a later round is sampled again, not replayed.
    seed = attempt_seed(state, round_no)
    result = await erase(
        get_gateway(),
        ctx.spec_for("eraser"),
        category=state["category"],
        scene=state["scene"],
        attempts=state.get("feedback_history") or None,
        seed=seed,
    )
    erasure = result.value.model_dump()
    # Building the generator imports torch and its pipeline loads weights: both stay off the event loop, which
    # `langgraph dev` guards against blocking calls.
    generator = await asyncio.to_thread(ctd_generator, ctx)
    if isinstance(getattr(type(generator), "pipeline", None), property):  # (hasattr would load it right here)
        await asyncio.to_thread(getattr, generator, "pipeline")
    ids = await generator.generate(ctx.request(erasure["t2i_prompt"], seed=seed))
    store = await open_store(ctx)
    return {
        "rounds": round_no,
        "erasure": erasure,
        "text": erasure["caption"],
        "t2i_prompt": erasure["t2i_prompt"],
        "erasure_reason": erasure["erasure_reason"],
        "image_id": ids[0],
        "image_path": str(store.path_for(ids[0])),
        "seeds": [*state.get("seeds", []), seed],
        "usage": result.usage,
    }


async def modality_check(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """With `modality_check` (Unveil's gate, off by default: the paper has none) the image alone and the text alone
    must each be benign (judge role, plus image classifiers if set); with `moderation` on, each is also scored by
    the moderation API (recorded; a leak at `moderation_threshold`), with or without the gate."""
    ctx = runtime.context
    if not ctx.modality_check:
        moderation = await moderation_scores(ctx, state)
        leaks = moderation_leaks(ctx, moderation)
        return {
            "modality": {
                "round": state["rounds"],
                "leak": bool(leaks),
                "detail": "; ".join(leaks) or "check disabled",
                "moderation": moderation,
            }
        }
    gateway = get_gateway()
    spec = ctx.spec_for("modality_judge")
    store = await open_store(ctx)
    seed = attempt_seed(state)
    image_v, text_v, flags, moderation = await asyncio.gather(
        judge_image_alone(gateway, spec, image=_image(state), store=store, seed=seed),
        judge_text_alone(gateway, spec, text=state["text"], seed=seed),
        classifier_flags(ctx.image_classifiers, state["image_id"], ctx.image_store),
        moderation_scores(ctx, state),
    )
    flagged = [name for name, res in flags.items() if isinstance(res, dict) and res.get("flag")]
    leaks = []
    if image_v.value.harmful:
        leaks.append(f"the image alone was judged harmful ({image_v.value.reason})")
    if text_v.value.harmful:
        leaks.append(f"the text alone was judged harmful ({text_v.value.reason})")
    if flagged:
        leaks.append(f"image classifiers flagged the image: {', '.join(flagged)}")
    leaks += moderation_leaks(ctx, moderation)
    return {
        "modality": {
            "round": state["rounds"],
            "leak": bool(leaks),
            "detail": "; ".join(leaks) or "both modalities benign alone",
            "image": image_v.value.model_dump(),
            "text": text_v.value.model_dump(),
            "classifiers": flags or None,
            "moderation": moderation,
        },
        "usage": merge_usage(image_v.usage, text_v.usage),
    }


def route_modality(state: CtdState, runtime: Runtime[CtdContext]) -> list[Send] | Literal["feedback", "drop"]:
    """A leak goes back to the Eraser (or drops the scene when attempts are used up); else the panel votes."""
    if state["modality"].get("leak"):
        return "feedback" if state["rounds"] < runtime.context.max_rounds else "drop"
    attempt: JudgedAttempt = {
        "round": state["rounds"],
        "seed": attempt_seed(state),
        "text": state["text"],
        "image_id": state["image_id"],
        "t2i_prompt": state["t2i_prompt"],
        "erasure_reason": state["erasure_reason"],
    }
    tasks: list[JudgeTask] = [{**attempt, **judge} for judge in runtime.context.panel()]
    return [Send("judge", task) for task in tasks]


# The task is a `Send` payload (a dict), not graph state: `Any` keeps LangGraph from reading it as a state schema.
async def judge(payload: Any, runtime: Runtime[CtdContext]) -> CtdState:
    """One panel judge (run once per `Send`); its vote is appended to `votes`."""
    task: JudgeTask = payload
    vote: dict[str, Any] = {"round": task["round"], "judge": task["judge"], "kind": task["kind"], "model": task["spec"]}
    try:
        result = await judge_pair(
            get_gateway(),
            task["spec"],
            kind=task["kind"],
            call_role=task["call_role"],
            text=task["text"],
            image=ImagePart(name="image", image_id=task["image_id"], description=task["t2i_prompt"]),
            store=await open_store(runtime.context),
            erasure_reason=task["erasure_reason"],
            # Several blind judges of one model see the same request: the judge's id makes each vote its own sample.
            seed=sample_seed(task.get("seed", task["round"]), task["judge"]),
        )
    except (ModelCallError, StructuredOutputError) as exc:
        # One judge's backend failing costs its vote only: the Gatekeeper decides on the others' (`failed_votes`).
        log.warning("judge %s (%s) failed; the panel goes on without its vote: %s", task["judge"], task["spec"], exc)
        return {"votes": [{**vote, "failed": True, "error": str(exc)[:500]}]}
    return {"votes": [{**vote, **result.value.model_dump()}], "usage": result.usage}


async def gatekeeper(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Apply the acceptance rule (in code) to this attempt's votes, after the `concept_similarity` role has judged
    whether the informed and forced judges' risk concepts are similar (when both found a risk)."""
    votes = answered_votes(round_votes(state))
    pair = compared_votes(votes)
    update: CtdState = {}
    similarity: dict[str, Any] | None = None
    if pair is not None:
        result = await judge_similarity(
            get_gateway(),
            runtime.context.spec_for("concept_similarity"),
            first=dict(pair[0]),
            second=dict(pair[1]),
            seed=attempt_seed(state),
        )
        similarity = result.value.model_dump()
        update["usage"] = result.usage
    decision = decide(
        votes,
        runtime.context.rule(),
        similar=similarity["similar"] if similarity else None,
        target_category=state.get("category"),
    )
    update["decision"] = {
        "round": state["rounds"],
        **decision.as_dict(),
        "similarity_reason": similarity["reason"] if similarity else None,
        "failed_judges": [v["judge"] for v in round_votes(state) if v.get("failed")],
    }
    return update


def route_gatekeeper(state: CtdState, runtime: Runtime[CtdContext]) -> Literal["human_review", "feedback", "drop"]:
    """Accepted pairs go to human verification; rejected ones are revised until `max_rounds`, then dropped."""
    if state["decision"]["accepted"]:
        return "human_review"
    return "feedback" if state["rounds"] < runtime.context.max_rounds else "drop"


def _problem(state: CtdState) -> tuple[str, str]:
    modality = state.get("modality")
    if modality and modality.get("leak") and modality.get("round") == state.get("rounds"):
        return "modality_leak", modality.get("detail", "")
    decision = state.get("decision")
    if not decision:
        return "too_obscure", ""
    return decision.get("problem", "too_obscure"), decision.get("detail", "")


async def feedback(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """A model turns the rejection into targeted advice; the attempt and advice join the Eraser's history."""
    problem, detail = _problem(state)
    votes = [v for v in round_votes(state) if not v.get("failed")] if problem != "modality_leak" else []
    modality = state.get("modality") if problem == "modality_leak" else None
    result = await write_feedback(
        get_gateway(),
        runtime.context.spec_for("gatekeeper"),
        problem=problem,
        detail=detail,
        erasure=state["erasure"],
        votes=votes,
        modality=dict(modality) if modality is not None else None,
        seed=attempt_seed(state),
    )
    entry = {
        "round": state["rounds"],
        "problem": problem,
        "detail": detail,
        "attempt": {k: state["erasure"].get(k) for k in ("t2i_prompt", "caption", "erasure_reason", "technique")},
        # the image this attempt rendered (an id of the run's store), so the history shows every round's picture
        "image_id": state.get("image_id"),
        "feedback": result.value.feedback,
        "suggestions": result.value.suggestions,
    }
    return {"feedback_history": [*state.get("feedback_history", []), entry], "usage": result.usage}


async def drop(state: CtdState, runtime: Runtime[CtdContext]) -> CtdState:
    """Record a scene that used up its attempts."""
    problem, detail = _problem(state)
    update: CtdState = {
        "status": "dropped",
        "drop_reason": f"{problem} after {state['rounds']} rounds: {detail}",
        "review": {"status": "none"},
    }
    await record_drop(state, update)  # a sample sent back from a review folder: recorded there as dropped
    return update
