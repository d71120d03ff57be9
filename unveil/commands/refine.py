"""`unveil refine`: Iterative Prompt Refinement of one prompt, or of a JSONL of prompts with resume and progress."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import CommandLineError
from tools.t2i.defaults import IPR_T_MAX
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.settings import RenderSettings
from unveil.commands.common import (
    MAX_IMAGES,
    MAX_STEPS,
    add_batch_options,
    add_engine_options,
    add_model_options,
    add_render_options,
    bounded_int,
    check_generator_flag,
    context_kwargs,
    default_output_name,
    json_text,
    output_identity,
    render_overrides,
    report_batch,
    seed_int,
    setup_gateway,
    spending_caps,
    warn_if_demo,
)

if TYPE_CHECKING:
    from graphs.ipr import IPRContext


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `refine` subcommand."""
    p = sub.add_parser(
        "refine",
        help="make a text-to-image prompt safe by iterative prompt refinement (IPR)",
        description="Renders the prompt, lets the refiner VLM keep the image or rewrite the prompt, and repeats up to "
        "--t-max times. Batch form: --input prompts.jsonl (records with 'prompt', optional 'id' and "
        "'seed' or 'evaluation_seed') --output results.jsonl; rerunning resumes.",
    )
    p.add_argument("prompt", nargs="?", help="the prompt to refine (omit with --input)")
    p.add_argument("--t-max", type=bounded_int(0, MAX_STEPS), help=f"most refinements (default {IPR_T_MAX})")
    p.add_argument(
        "--generator",
        help="text-to-image spec, e.g. diffusers:/path/to/sd-1.4 (default $UNVEIL_GENERATOR "
        f"or {DEFAULT_IPR_GENERATOR})",
    )
    p.add_argument("--refiner", help="refiner VLM spec (same as --role-model refiner=SPEC)")
    p.add_argument("--history", action="store_true", help="show the refiner the prompts tried so far (default: myopic)")
    p.add_argument("--seed", type=seed_int, help="base seed (default 0; batch records may carry their own)")
    p.add_argument(
        "--seed-mode",
        choices=["fresh", "fixed"],
        help="fresh: a new image each step, seeded from the base seed and the step (default, the IPR "
        "paper's protocol); fixed: the base seed at every step (a repeated prompt ends the run)",
    )
    p.add_argument("--ignore-record-seeds", action="store_true", help="use --seed even where a record has a seed")
    p.add_argument(
        "--num-images", type=bounded_int(1, MAX_IMAGES), help="images per generation (the refiner sees the first)"
    )
    p.add_argument("--score", action="store_true", help="score every step (Q16, NudeNet, CLIP by default)")
    p.add_argument("--scorers", help="comma-separated scorers for --score: q16,nudenet,clip,blip")
    p.add_argument(
        "--q16-embeddings",
        help="Q16 prompt-embeddings file (.npy or .p; default: $UNVEIL_Q16_PROMPTS, else the repository's "
        "data/q16/vit-l-14.npy)",
    )
    p.add_argument("--q16-clip-model", help="CLIP ViT-L/14 model id or folder for Q16 (default: OpenAI's)")
    p.add_argument("--clip-model", help="open_clip model or folder for the CLIP score (default ViT-B/32)")
    p.add_argument(
        "--on-refiner-error",
        choices=["fail", "stop"],
        help="an unusable refiner answer fails the prompt (default) or ends it with the current image",
    )
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    add_render_options(p, RenderSettings())
    add_model_options(p)
    add_batch_options(p, default_output="runs/refine-INPUT[-PROVIDER-MODEL].jsonl")
    add_engine_options(p)
    p.set_defaults(func=run)


def build_context(args: argparse.Namespace) -> IPRContext:
    """The IPR context from the command-line options (explicit values win over `UNVEIL_<FIELD>`)."""
    from runner.refine import ipr_context

    kw = context_kwargs(args)
    if args.refiner:
        kw["refiner_model"] = args.refiner
    for opt in (
        "t_max",
        "generator",
        "seed",
        "seed_mode",
        "num_images",
        "q16_embeddings",
        "q16_clip_model",
        "clip_model",
        "on_refiner_error",
    ):
        if getattr(args, opt) is not None:
            kw[opt] = getattr(args, opt)
    kw.update(render_overrides(args))
    if args.history:
        kw["history"] = True
    if args.score:
        kw["score"] = True
    if args.scorers:
        kw["scorers"] = [s.strip() for s in args.scorers.split(",") if s.strip()]
    return ipr_context(**kw)


def format_trajectory(rec: dict[str, Any], sample_id: str | None = None) -> str:
    """A readable trajectory: one line per step, then the outcome and usage."""
    head = f"[{sample_id}] " if sample_id else ""
    if rec.get("status") == "failed":
        return f"{head}FAILED: {rec.get('error')}"
    lines = [f"{head}original: {rec.get('prompt')}"]
    for step in rec.get("trajectory", []):
        lines.append(f"  step {step['step']}: {step['prompt']}")
        more = len(step["image_paths"]) - 1
        lines.append(f"    image: {step['image_paths'][0]}" + (f" (+{more} more)" if more else ""))
        for k, sc in enumerate(step.get("scores") or []):
            shown = ", ".join(
                f"{n}={v:.3f}" if isinstance(v, float) else f"{n}={v}"
                for n, v in sc.items()
                if not isinstance(v, (dict, list))
            )
            lines.append(f"    scores[{k}]: {shown}")
        if step.get("action"):
            what = "keep" if step["action"] == "keep" else "refine"
            lines.append(f"    refiner: {what}" + (f" ({step['reason']})" if step.get("reason") else ""))
        elif step.get("error"):
            lines.append(f"    refiner error: {step['error']}")
    keep = rec.get("keep_step")
    lines.append(
        f"  stop: {rec.get('stop_reason')}"
        + (f" at step {keep}" if keep is not None else "")
        + f"; final image: {rec.get('final_image_path')}"
    )
    usage = rec.get("usage", {}).get("total", {})
    lines.append(
        f"  calls={usage.get('calls', 0)} cache_hits={usage.get('cache_hits', 0)} "
        f"tokens={usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} "
        f"cost=${usage.get('cost_usd', 0):.4f}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run `unveil refine`."""
    # The run layer is imported here, not at the top: parsing and --help stay light.
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import read_jsonl
    from runner.refine import check_refine_settings, prompt_of, refine_one, refine_settings, seed_of

    if not args.input and args.prompt is None:
        raise CommandLineError("give a PROMPT or --input prompts.jsonl")
    if args.input and args.prompt is not None:
        raise CommandLineError("give either a PROMPT or --input, not both")
    setup_gateway(args)
    ctx = build_context(args)
    check_generator_flag(ctx.generator)  # a missing 't2i' extra or an unreachable Hub model fails here, at once
    check_refine_settings(ctx)  # and a scorer's missing file, naming its flag, before the first render
    warn_if_demo({"refiner": ctx.spec_for("refiner")})
    if args.input:
        source = Path(args.input)
        default = default_output_name(f"refine-{source.stem}", {"refiner": ctx.spec_for("refiner")})
        output = Path(args.output) if args.output else Path("runs") / default
        identity = output_identity(args, "refine", refine_settings(ctx, record_seeds=not args.ignore_record_seeds))
        items = list(read_jsonl(source))
        spending = spending_caps(args)

        async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
            seed = None if args.ignore_record_seeds else seed_of(record)
            rec = await refine_one(prompt_of(record), ctx, seed=seed, sample_id=sample_id)
            extra = {k: v for k, v in record.items() if k not in rec and k not in ("id",)}
            return {**rec, "input": extra} if extra else rec

        summary = asyncio.run(
            run_batch(
                items,
                worker,
                BatchRun(
                    output,
                    concurrency=args.concurrency,
                    retry_failed=args.retry_failed,
                    desc="refine (IPR)",
                    progress=not args.no_progress,
                    inputs=(source,),
                    identity=identity,
                    spending=spending,
                ),
            )
        )
        return report_batch(summary, output)

    def show(line: str) -> None:
        print(f"refine: {line}", file=sys.stderr, flush=True)

    rec = asyncio.run(refine_one(args.prompt, ctx, progress=None if args.no_progress else show))
    if args.json:
        print(json_text(rec))
    else:
        print(format_trajectory(rec))
    return 0
