"""`unveil generate`: run the CTD generation graph for many scenes into a dataset folder (`unveil review`, in
`unveil/commands/review.py`, applies human decisions to the samples it queued for review).

The flags become one `runner.ctd_run.CtdRun` (`ctd_run`), which the run layer runs (`runner.ctd_run.generate`:
resumable scenes, the sent-back revisions, the folder's views and export); this module only parses, names a bad
setting by its flag and prints the summary. Rerunning the same command after a kill resumes the folder.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import CommandLineError
from tools.t2i.errors import renamed_note
from tools.t2i.settings import CtdRenderSettings

if TYPE_CHECKING:
    from graphs.ctd import CtdContext
    from runner.ctd import PairExtras
    from runner.ctd_run import CtdResult, CtdRun, CtdRunError

from unveil.commands.common import (
    MAX_DEPTH,
    MAX_SCENES,
    add_context_switches,
    add_engine_options,
    add_mixed_settings_option,
    add_model_options,
    add_render_options,
    add_spending_options,
    add_tag_reading_options,
    batch_exit_code,
    bounded_float,
    bounded_int,
    check_generator_flag,
    context_kwargs,
    context_switches,
    positive_int,
    render_overrides,
    seed_int,
    setup_gateway,
    tag_reading_kwargs,
    warn_if_demo,
)


class _RenamedOption(argparse.Action):
    """An option of an earlier version: refused with its new name, not merely "unrecognized"."""

    RENAMED = {"--t2i": "--generator"}

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = option_string or ""
        parser.error(f"{name} is no longer an option{renamed_note([name], self.RENAMED)}")


def _scene_options(p: argparse.ArgumentParser) -> None:
    """`generate`: the category, how many scenes, the dataset folder, the scene idea and the seed."""
    p.add_argument(
        "--category",
        required=True,
        help="risk category: drugs, crimes, violence, hate, self_harm, "
        "fraud, morality, privacy, ip_violation, political",
    )
    p.add_argument(
        "--n",
        type=bounded_int(1, MAX_SCENES),
        required=True,
        help="number of scenes to run (each yields at most one sample)",
    )
    p.add_argument("--out", required=True, help="dataset folder (created; reused on resume)")
    p.add_argument("--scene", help="short scene idea given to the Architect")
    p.add_argument("--erase-routine", help="erasure technique the scenes are built for")
    p.add_argument("--seed", type=seed_int, default=0, help="base seed (scene i renders with seed + 1000*i + round)")


def _budget_options(p: argparse.ArgumentParser) -> None:
    """`generate`: scenes at once, and the caps on model calls and dollars."""
    p.add_argument("--concurrency", type=positive_int, default=4, help="scenes run at once")
    add_spending_options(p, "scenes")


def _pipeline_options(p: argparse.ArgumentParser) -> None:
    """`generate`: the erasure rounds, the judges, the generator, review, and the checks on each sample."""
    p.add_argument("--max-rounds", type=bounded_int(1, 20), help="erasure attempts per scene (default 3)")
    p.add_argument("--n-blind", type=bounded_int(0, 16), help="blind judges (default 4)")
    p.add_argument("--blind-models", help="comma-separated specs, one per blind judge (cycled)")
    p.add_argument(
        "--generator", dest="generator", help="text-to-image spec, e.g. diffusers:MODEL_OR_FOLDER (default SD 1.5)"
    )
    p.add_argument("--t2i", action=_RenamedOption, help=argparse.SUPPRESS)
    p.add_argument(
        "--review",
        choices=["queue", "auto"],
        default="queue",
        help="queue accepted samples for human review (default) or accept them without review",
    )
    p.add_argument(
        "--near-duplicate",
        type=bounded_float(0.0, 1.0),
        default=0.92,  # runner.ctd_duplicates.DEFAULT_NEAR_DUPLICATE (not imported: --help stays light)
        help="cosine threshold of near-duplicate texts (MiniLM); 0 turns the check off",
    )
    p.add_argument("--no-web-search", action="store_true", help="never search the web, even with TAVILY_API_KEY set")
    _acceptance_options(p)
    p.add_argument(
        "--moderation",
        nargs="?",
        const="openai:omni-moderation-latest",
        default=None,
        metavar="SPEC",
        help="score each modality with the OpenAI Moderation API (default SPEC "
        "openai:omni-moderation-latest; openai:MODEL@BASE_URL for another endpoint)",
    )


# The acceptance rule's additions to the paper's (TAG §4.1, §10.3), off by default: each a CtdContext field.
ACCEPTANCE_SWITCHES = ("modality_check", "require_target_category")


def _acceptance_options(p: argparse.ArgumentParser) -> None:
    """`generate`: the checks Unveil can add to the paper's acceptance rule (docs/ctd.md, "The acceptance rule")."""
    from graphs.ctd.context import CtdContext

    add_context_switches(p, CtdContext, ACCEPTANCE_SWITCHES)


def _output_options(p: argparse.ArgumentParser) -> None:
    """`generate`: retrying failures, the export, the MTC reference, benign pairs and progress."""
    p.add_argument("--retry-failed", action="store_true", help="run failed scenes again")
    p.add_argument(
        "--export",
        action="store_true",
        help="also write DIR/export/ (data.parquet for Hugging Face datasets, data.jsonl, data.csv, README.md card)",
    )
    p.add_argument(
        "--mtc-reference",
        metavar="SPEC",
        help="record each accepted sample's MTC from TA-CTD with this fixed reference detector, so the "
        "dataset and export carry its covertness bin (TAG paper Tables 1-3)",
    )
    p.add_argument("--mtc-l-max", type=bounded_int(1, MAX_DEPTH), help="TAG depth of the MTC reference (default 4)")
    add_tag_reading_options(p, of="the --mtc-reference detector's TAG")
    p.add_argument(
        "--benign",
        action="store_true",
        help="also write each accepted pair's benign counterpart (the same image, a text with the risk "
        "removed; label 0) for the 'with benign data' evaluation (Table 4); its model is "
        "--role-model benign_rewriter=SPEC, else --model",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `generate` subcommand."""
    p = sub.add_parser(
        "generate",
        help="generate covert toxic image-text samples (CTD pipeline)",
        description="Runs N scenes of one risk category through Architect -> Eraser -> Judges -> "
        "Gatekeeper and writes a dataset folder. Rerun the same command to resume.",
    )
    _scene_options(p)
    _budget_options(p)
    _pipeline_options(p)
    _output_options(p)
    add_mixed_settings_option(p)
    add_render_options(p, CtdRenderSettings())
    add_model_options(p)
    add_engine_options(p)
    p.set_defaults(func=run)


def build_context(args: argparse.Namespace, dataset_dir: Path) -> CtdContext:
    """The graph context from the options (images go into the folder's own store, `runner.ctd_run.ctd_context`)."""
    from runner.ctd_run import ctd_context

    kw = context_kwargs(args)
    kw.pop(BENIGN_FIELD, None)  # the benign rewriter runs in the run layer after the graph (`pair_extras`)
    kw.pop("image_store", None)  # a dataset keeps its images in its own folder
    kw["review"] = args.review
    for opt in ("max_rounds", "n_blind", "generator"):
        if getattr(args, opt, None) is not None:
            kw[opt] = getattr(args, opt)
    kw.update(render_overrides(args))
    if args.blind_models:
        kw["blind_judge_models"] = [s.strip() for s in args.blind_models.split(",") if s.strip()]
    if args.no_web_search:
        kw["web_search"] = False
    kw.update(context_switches(args, ACCEPTANCE_SWITCHES))
    if args.moderation:
        kw["moderation"], kw["moderation_spec"] = True, args.moderation
    return ctd_context(dataset_dir, **kw)


BENIGN_FIELD = "benign_rewriter_model"


def pair_extras(args: argparse.Namespace, ctx: CtdContext) -> PairExtras:
    """What the run layer adds to each accepted pair: the reference MTC and the benign counterpart."""
    from runner.ctd import PairExtras

    benign = (context_kwargs(args).get(BENIGN_FIELD) or ctx.model) if args.benign else ""
    reading = tag_reading_kwargs(args)
    if reading and not args.mtc_reference:
        flags = ", ".join("--" + name.replace("_", "-") for name in reading)
        raise CommandLineError(f"{flags} set the MTC reference's TAG: give --mtc-reference SPEC too")
    return PairExtras(
        mtc_reference=args.mtc_reference or "",
        mtc_l_max=args.mtc_l_max,
        benign_model=benign,
        mtc_reading=tuple(sorted(reading.items())),
    )


def ctd_run(args: argparse.Namespace) -> CtdRun:
    """The run the flags describe (`runner.ctd_run.CtdRun`): the only place `generate`'s flags are read."""
    from runner.ctd_run import CtdRun

    out = Path(args.out)
    ctx = build_context(args, out)
    return CtdRun(
        out=out,
        category=args.category,
        n=args.n,
        context=ctx,
        extras=pair_extras(args, ctx),
        scene=args.scene,
        erase_routine=args.erase_routine,
        seed=args.seed,
        concurrency=args.concurrency,
        max_calls=args.max_calls,
        max_cost=args.max_cost,
        retry_failed=args.retry_failed,
        near_duplicate=args.near_duplicate,
        export=args.export,
        progress=not args.no_progress,
        command_line=getattr(args, "command_line", ""),
        allow_mixed_settings=bool(args.allow_mixed_settings),
    )


def _flag_error(exc: CtdRunError) -> CommandLineError:
    """A run setting's error with the setting's name given as its flag (`category` -> `--category`)."""
    text = str(exc)
    if text.startswith(exc.field):
        text = "--" + exc.field.replace("_", "-") + text[len(exc.field) :]
    return CommandLineError(text)


def run(args: argparse.Namespace) -> int:
    """Run `unveil generate`: the flags become a `CtdRun`, which `runner.ctd_run` runs; then the summary."""
    from runner.ctd_run import CtdRunError, check_run, generate

    setup_gateway(args)
    ctd = ctd_run(args)
    try:
        check_run(ctd)  # the settings' errors first, each naming its flag
        check_generator_flag(ctd.context.generator)  # offline with a Hub model: said at once, naming the flag
        extras = ctd.extras
        warn_if_demo([*ctd.context.models().values(), *(s for s in (extras.mtc_reference, extras.benign_model) if s)])
        result = asyncio.run(generate(ctd))
    except CtdRunError as exc:
        raise _flag_error(exc) from exc
    report(result, ctd.out)
    return batch_exit_code(result.failed + result.failed_earlier)


def report(result: CtdResult, out: Path) -> None:
    """Say on stderr what the run did: scenes run, sent-back samples revised, failures, statuses, what is next."""
    earlier = f" ({result.failed_earlier} of them failed then)" if result.failed_earlier else ""
    revised = (
        f", {result.revised} sent-back scene{'' if result.revised == 1 else 's'} revised" if result.revised else ""
    )
    print(
        f"{result.completed} scenes done{revised}, {result.failed} failed, {result.skipped} already in {out}{earlier}",
        file=sys.stderr,
    )
    print("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(result.statuses.items())), file=sys.stderr)
    for failure in result.failures:
        print(f"  {failure['id']}: {failure['error']}", file=sys.stderr)
    if result.stopped:
        print(result.stopped + "; rerun with a higher cap to continue", file=sys.stderr)
    if result.statuses.get("pending_review"):
        print(
            f"{result.statuses['pending_review']} samples wait for review: see {out / 'review_queue.jsonl'} "
            f"and `unveil review {out}`",
            file=sys.stderr,
        )
    if result.export:
        print(f"export written to {result.export}", file=sys.stderr)
