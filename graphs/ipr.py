"""Iterative Prompt Refinement (IPR): generate(p0) -> refine -> [keep | new prompt -> generate -> refine]* .

The refiner (a VLM behind the gateway) looks at the original prompt p0 and the latest image and either keeps the
image, which ends the run with that image, or writes a safer prompt, which is rendered and shown to the refiner
again. Each step samples a fresh image, as the IPR paper's Algorithm 1 does (`i(t) ~ G(p(t))`): step 0 uses the
base seed and step t a seed derived from the base seed and t (`step_seed`), so a run is reproducible and resumes
to the same images. `seed_mode="fixed"` renders every step with the base seed instead (a repeated prompt then
ends the run, since its image could not change). At most `t_max` refinements happen, so at most `t_max + 1`
generations; the image of the last generation is final when the refiner never says keep. The refiner is myopic
by default (p0 and the latest image only, as in the paper); `history=True` also shows it the prompts tried so far.

Every step can optionally be scored (Q16 / NudeNet inappropriateness, CLIP and BLIP alignment to p0) and the scores
are kept in the trajectory. State holds prompts, image ids and paths only.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

# typing_extensions' TypedDict: pydantic (LangGraph Studio's schema export) rejects typing's on Python < 3.12.
from typing_extensions import TypedDict

from agents.gateway import get_gateway
from agents.refiner import RefinerAnswerError, refine_prompt
from agents.usage import RunUsage, merge_usage
from graphs.context import ModelsContext, check_context, strict_init
from tools.errors import UnveilError
from tools.image_store import get_image_store
from tools.scorers.entry import scoring_help
from tools.scorers.score import SCORER_NAMES, ScoringSettings
from tools.scorers.score import check_configuration as check_scorer_configuration
from tools.scorers.score import check_names as check_scorer_names
from tools.scorers.score import score_images as tools_score_images
from tools.t2i.base import ImageGenerator
from tools.t2i.defaults import IPR_T_MAX
from tools.t2i.errors import PromptError
from tools.t2i.registry import DEFAULT_IPR_GENERATOR, DEFAULT_LONG_PROMPTS, open_generator
from tools.t2i.settings import RenderSettings

DEFAULT_GENERATOR = DEFAULT_IPR_GENERATOR
SeedMode = Literal["fresh", "fixed"]
SEED_MODES: tuple[str, ...] = get_args(SeedMode)


def step_seed(base: int, step: int, mode: str = "fresh") -> int:
    """The seed of step `step` of a run with base seed `base`: the base at step 0 (so an evaluation's plain image k
    is its trajectory's step 0) and in `fixed` mode; otherwise a 31-bit seed hashed from (base, step), the same on
    every machine and rerun, and unrelated to the neighbouring base seeds other trajectories use."""
    if mode not in SEED_MODES:
        raise ValueError(f"seed_mode must be {' or '.join(SEED_MODES)}, got {mode!r}")
    if step == 0 or mode == "fixed":
        return base
    digest = hashlib.sha256(f"unveil-ipr-step:{base}:{step}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class IPRInputError(UnveilError, ValueError):
    """The request to the IPR graph is unusable (empty or over-long prompt, bad setting)."""


OnRefinerError = Literal["fail", "stop"]


@strict_init
@dataclass(kw_only=True)
class IPRContext(RenderSettings, ModelsContext):
    """Settings of an IPR run (editable in LangGraph Studio; `UNVEIL_<FIELD>` env overrides); the render fields
    (width, height, steps, guidance, negative_prompt, long_prompts) are `tools.t2i.settings.RenderSettings`."""

    refiner_model: str = field(
        default="",
        metadata={
            "description": "VLM spec of the prompt refiner (empty: model), e.g. "
            "hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=PATH or openai:MODEL@http://host:8000/v1."
        },
    )
    generator: str = field(
        default=DEFAULT_GENERATOR,
        metadata={
            "description": "Text-to-image spec for "
            "tools.t2i.registry.get_generator, e.g. diffusers:/path/to/sd or openai:gpt-image-1."
        },
    )
    t_max: int = field(
        default=IPR_T_MAX,
        metadata={"description": "Most refinements per prompt (generations <= t_max + 1).", "min": 0},
    )
    history: bool = field(
        default=False, metadata={"description": "Show the refiner the prompts tried so far (default: myopic)."}
    )
    seed: int = field(default=0, metadata={"description": "Base seed: step 0's seed; later steps derive theirs."})
    seed_mode: SeedMode = field(
        default="fresh",
        metadata={
            "description": "'fresh': a new image each step, seeded from the base seed and the step (the paper's "
            "i(t) ~ G(p(t))); 'fixed': the base seed at every step."
        },
    )
    num_images: int = field(
        default=1, metadata={"description": "Images per generation; the refiner sees the first.", "min": 1}
    )
    max_prompt_chars: int = field(default=2000, metadata={"description": "Longest original prompt accepted.", "min": 1})
    on_refiner_error: OnRefinerError = field(
        default="fail",
        metadata={
            "description": "'fail': an unusable refiner answer fails the "
            "run; 'stop': it ends the run with the current image and records the error.",
        },
    )
    score: bool = field(default=False, metadata={"description": "Score every step's images (safety and alignment)."})
    scorers: list[str] = field(
        default_factory=lambda: ["q16", "nudenet", "clip"],
        metadata={
            "description": "Scorers used when score is on: q16, nudenet, clip, blip.",
            "item_choices": SCORER_NAMES,
        },
    )
    # The scorers' settings: their help is `tools.scorers.entry.ScoringSettings`'s, declared there once.
    q16_embeddings: str = field(default="", metadata={"description": scoring_help("q16_embeddings")})
    q16_clip_model: str = field(default="", metadata={"description": scoring_help("q16_clip_model")})
    clip_model: str = field(default="", metadata={"description": scoring_help("clip_model")})
    blip_model: str = field(default="", metadata={"description": scoring_help("blip_model")})
    nudenet_labels: list[str] = field(default_factory=list, metadata={"description": scoring_help("nudenet_labels")})
    device: str = field(default="", metadata={"description": scoring_help("device")})

    def roles_in_use(self) -> dict[str, str]:
        """The one model role of a run, the refiner (the scorers' `*_model` fields name local models, not specs)."""
        return {"refiner_model" if self.refiner_model else "model": self.spec_for("refiner")}


class IPRInput(TypedDict, total=False):
    """One prompt to refine; `seed` overrides the context's seed for this prompt."""

    id: str
    prompt: str
    seed: int


class IPRStep(TypedDict, total=False):
    """One step of the trajectory: the prompt rendered, its images, their scores, and the refiner's answer on them."""

    step: int
    prompt: str
    seed: int
    image_ids: list[str]
    image_paths: list[str]
    scores: list[dict[str, Any]]
    refiner_answer: str | None
    action: Literal["keep", "refine"] | None
    reason: str
    error: str


class IPROutput(TypedDict, total=False):
    """The result: the final image, the trajectory, where the refiner kept, and usage."""

    id: str
    prompt: str
    final_prompt: str
    final_image_id: str
    final_image_path: str
    final_image_ids: list[str]
    keep_step: int | None
    stop_reason: Literal["keep", "t_max", "unchanged", "refiner_error"]
    refinements: int
    trajectory: list[IPRStep]
    usage: Annotated[RunUsage, merge_usage]


class IPRState(IPRInput, IPROutput, total=False):
    """Working state."""

    step: int
    current_prompt: str
    seed_used: int


def get_ipr_generator(spec: str, image_store: str = "", long_prompts: str = DEFAULT_LONG_PROMPTS) -> ImageGenerator:
    """The generator for a spec, writing into the run's image store (the registry keeps one per spec and store,
    so pipelines load once per process and concurrent runs share their GPU batches)."""
    return open_generator(spec, store=get_image_store(image_store or None), long_prompts=long_prompts, load=True)


def validate_settings(ctx: IPRContext) -> None:
    """Reject settings that cannot run, naming the setting."""
    if ctx.t_max < 0:
        raise IPRInputError(f"t_max must be 0 or more, got {ctx.t_max}")
    if ctx.num_images < 1:
        raise IPRInputError(f"num_images must be at least 1, got {ctx.num_images}")
    try:
        ctx.check_render_settings()
    except ValueError as exc:
        raise IPRInputError(str(exc)) from exc
    if ctx.seed_mode not in SEED_MODES:
        raise IPRInputError(f"seed_mode must be {' or '.join(SEED_MODES)}, got {ctx.seed_mode!r}")
    if ctx.on_refiner_error not in ("fail", "stop"):
        raise IPRInputError(f"on_refiner_error must be 'fail' or 'stop', got {ctx.on_refiner_error!r}")
    if not ctx.generator:
        raise IPRInputError("no text-to-image generator spec (setting 'generator')")
    if ctx.score:
        try:
            check_scorer_names(ctx.scorers)
        except ValueError as exc:
            raise IPRInputError(str(exc)) from exc


def check_scoring(ctx: IPRContext) -> None:
    """With `score` on, every scorer's configuration that can be checked without a model (the Q16 embeddings file,
    the extras), so a run fails before its first render (`tools.scorers.score.check_configuration`)."""
    if ctx.score:
        check_scorer_configuration(ctx.scorers, scoring_settings(ctx))


def scoring_settings(ctx: IPRContext) -> ScoringSettings:
    """The scorers' settings of a run's context."""
    return ScoringSettings(
        q16_embeddings=ctx.q16_embeddings,
        q16_clip_model=ctx.q16_clip_model,
        clip_model=ctx.clip_model,
        blip_model=ctx.blip_model,
        nudenet_labels=tuple(ctx.nudenet_labels),
        device=ctx.device,
    )


async def score_images(ctx: IPRContext, original_prompt: str, image_ids: list[str]) -> list[dict[str, Any]]:
    """Per image: the scores of `ctx.scorers` against the original prompt, through the one scoring entry point
    (`tools.scorers.score.score_images`: Q16 and flag, NudeNet labels and flag, `inappropriate`, CLIP, BLIP)."""
    settings = scoring_settings(ctx)
    store = await asyncio.to_thread(get_image_store, ctx.image_store or None)
    try:
        return await tools_score_images(image_ids, original_prompt, ctx.scorers, settings, store=store)
    except ValueError as exc:
        if "choose from" in str(exc):
            raise IPRInputError(str(exc)) from exc
        raise


async def start(state: IPRState, runtime: Runtime[IPRContext]) -> IPRState:
    """Check the prompt and settings; step 0 renders p0."""
    ctx = runtime.context
    validate_settings(ctx)
    await asyncio.to_thread(check_scoring, ctx)  # reads the Q16 embeddings file: off the event loop
    await check_context(ctx)
    if ctx.t_max > 0 and not get_gateway().vision(ctx.spec_for("refiner")):
        # Checked before any rendering: a text-only refiner would fail only after the first image was paid for.
        raise IPRInputError(
            f"refiner model {ctx.spec_for('refiner')!r} cannot see images, and the IPR refiner "
            "judges the generated image; use a vision-language model (e.g. "
            "hf:Qwen/Qwen2.5-VL-3B-Instruct or openai:gpt-4.1)"
        )
    prompt = state.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise IPRInputError("the prompt is empty; give the text-to-image prompt to refine")
    if len(prompt) > ctx.max_prompt_chars:
        raise IPRInputError(
            f"the prompt is {len(prompt)} characters, over the limit of {ctx.max_prompt_chars} (max_prompt_chars)"
        )
    seed = state.get("seed")
    return {
        "prompt": prompt,
        "current_prompt": prompt.strip(),
        "step": 0,
        "trajectory": [],
        "seed_used": int(seed if seed is not None else ctx.seed),
        "keep_step": None,
    }


async def generate(state: IPRState, runtime: Runtime[IPRContext]) -> IPRState:
    """Render the current prompt (the step's seed, the same settings at every step); add the step to the trajectory."""
    ctx = runtime.context
    generator = await asyncio.to_thread(get_ipr_generator, ctx.generator, ctx.image_store, ctx.long_prompts)
    seed = step_seed(state["seed_used"], state["step"], ctx.seed_mode)
    request = ctx.request(state["current_prompt"], seed=seed, num_images=ctx.num_images)
    try:
        ids = await generator.generate(request)
    except PromptError as exc:
        if state["step"] == 0:
            raise
        # The refiner wrote a prompt the generator refuses (e.g. over the text encoder's token limit).
        if ctx.on_refiner_error == "fail":
            raise PromptError(f"IPR step {state['step']}: the refined prompt was refused: {exc}") from exc
        traj = list(state["trajectory"])
        last = traj[-1].copy()
        last["error"] = f"the refined prompt {state['current_prompt']!r} was refused by the generator: {exc}"
        traj[-1] = last
        return {"trajectory": traj, "stop_reason": "refiner_error"}
    if not ids:
        raise RuntimeError(f"generator {ctx.generator!r} returned no image for step {state['step']}")
    store = get_image_store(ctx.image_store or None)
    entry: IPRStep = {
        "step": state["step"],
        "prompt": state["current_prompt"],
        "seed": seed,
        "image_ids": list(ids),
        "image_paths": [str(store.path_for(i)) for i in ids],
        "refiner_answer": None,
        "action": None,
    }
    return {"trajectory": [*state.get("trajectory", []), entry]}


async def score(state: IPRState, runtime: Runtime[IPRContext]) -> IPRState:
    """Score the latest step's images against the original prompt; scores go into the trajectory."""
    ctx = runtime.context
    traj = list(state["trajectory"])
    last = traj[-1].copy()
    last["scores"] = await score_images(ctx, state["prompt"], last["image_ids"])
    traj[-1] = last
    return {"trajectory": traj}


async def refine(state: IPRState, runtime: Runtime[IPRContext]) -> IPRState:
    """Ask the refiner about p0 and the latest image; keep ends the run, a new prompt becomes the next step."""
    ctx = runtime.context
    traj = list(state["trajectory"])
    last = traj[-1].copy()
    history = [t["prompt"] for t in traj[1:]] if ctx.history else None
    try:
        result = await refine_prompt(
            get_gateway(),
            ctx.spec_for("refiner"),
            original_prompt=state["prompt"],
            image_id=last["image_ids"][0],
            store=get_image_store(ctx.image_store or None),
            history=history,
            role=f"refiner.{state['step']}",
            seed=last.get("seed"),  # the step's own seed: each step is its own request, as it is its own sample
        )
    except RefinerAnswerError as exc:
        if ctx.on_refiner_error == "fail":
            raise RefinerAnswerError(f"IPR step {state['step']}: {str(exc).split('; raw answer')[0]}", exc.raw) from exc
        last.update({"refiner_answer": exc.raw, "action": None, "error": str(exc)})
        traj[-1] = last
        failed: IPRState = {"trajectory": traj, "stop_reason": "refiner_error"}
        if exc.usage is not None:
            failed["usage"] = exc.usage
        return failed
    decision = result.decision
    last.update({"refiner_answer": result.raw, "action": decision.action, "reason": decision.reason})
    traj[-1] = last
    out: IPRState = {"trajectory": traj, "usage": result.usage}
    if decision.action == "keep":
        out.update({"keep_step": state["step"], "stop_reason": "keep"})
    elif (
        ctx.seed_mode == "fixed"
        and decision.prompt is not None
        and decision.prompt.strip().lower() == state["current_prompt"].strip().lower()
    ):
        # Same prompt, same seed: the image would not change, so another round cannot help. With fresh seeds the
        # same prompt gives a new sample, as in the paper's loop, so the run goes on.
        out["stop_reason"] = "unchanged"
    else:
        # A `refine` decision always carries its prompt (the parser refuses one without).
        assert decision.prompt is not None
        out.update({"current_prompt": decision.prompt, "step": state["step"] + 1})
    return out


async def finish(state: IPRState, runtime: Runtime[IPRContext]) -> IPRState:
    """The final image is the latest step's; count the refinements actually applied."""
    traj = state["trajectory"]
    last = traj[-1]
    return {
        "final_prompt": last["prompt"],
        "final_image_ids": last["image_ids"],
        "final_image_id": last["image_ids"][0],
        "final_image_path": last["image_paths"][0],
        "refinements": len(traj) - 1,
        "stop_reason": state.get("stop_reason") or "t_max",
        "keep_step": state.get("keep_step"),
    }


def route_after_generate(state: IPRState, runtime: Runtime[IPRContext]) -> Literal["score", "refine", "finish"]:
    """Score when asked to; otherwise refine unless the refinement budget is spent."""
    if state.get("stop_reason") == "refiner_error":
        return "finish"
    if runtime.context.score:
        return "score"
    return route_after_score(state, runtime)


def route_after_score(state: IPRState, runtime: Runtime[IPRContext]) -> Literal["refine", "finish"]:
    """Refine while fewer than t_max refinements were made; the last image is final otherwise."""
    return "refine" if state["step"] < runtime.context.t_max else "finish"


def route_after_refine(state: IPRState, runtime: Runtime[IPRContext]) -> Literal["generate", "finish"]:
    """A new prompt is rendered; keep, an unchanged prompt or a recorded refiner error ends the run."""
    return "finish" if state.get("stop_reason") in ("keep", "unchanged", "refiner_error") else "generate"


builder = StateGraph(IPRState, context_schema=IPRContext, input_schema=IPRInput, output_schema=IPROutput)
builder.add_node("start", start)
builder.add_node("generate", generate)
builder.add_node("score", score)
builder.add_node("refine", refine)
builder.add_node("finish", finish)
builder.add_edge(START, "start")
builder.add_edge("start", "generate")
builder.add_conditional_edges("generate", route_after_generate)
builder.add_conditional_edges("score", route_after_score)
builder.add_conditional_edges("refine", route_after_refine)
builder.add_edge("finish", END)

graph = builder.compile(name="ipr")
