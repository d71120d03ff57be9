"""`unveil detect`: TAG (or vanilla) covert-toxicity detection on one pair, a JSONL batch, or the bundled examples."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.providers.profiles import is_demo_spec
from tools.errors import CommandLineError, UnveilError
from unveil.commands.common import (
    MAX_DEPTH,
    add_batch_options,
    add_engine_options,
    add_model_options,
    add_tag_reading_options,
    bounded_int,
    context_kwargs,
    default_output_name,
    json_text,
    new_file_path,
    output_identity,
    report_batch,
    setup_gateway,
    spending_caps,
    tag_reading_kwargs,
    warn_if_demo,
)
from unveil.commands.inputs import EXAMPLES as EXAMPLES

if TYPE_CHECKING:
    from runner.detect import DetectionContext


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `detect` subcommand."""
    p = sub.add_parser(
        "detect",
        help="detect covert toxicity in image-text pairs (TAG or vanilla)",
        description="With no --text and no --input, runs the bundled example pairs.",
    )
    p.add_argument("--image", help="image path or http(s) URL")
    p.add_argument("--image-description", help="what the image shows (needed by text-only models)")
    p.add_argument("--text", help="the text of the pair")
    p.add_argument(
        "--method",
        type=_method,
        default="tag",
        help="tag (TAG detection), vanilla (the one-call baseline), or a guard model: "
        "guard:llama-guard-4, guard:llavaguard, guard:guardreasoner-vl, guard:template=FILE "
        "(its model: --role-model guard=SPEC)",
    )
    p.add_argument("--l-max", type=bounded_int(1, MAX_DEPTH), help="layers per tree, counting the roots (default 4)")
    p.add_argument(
        "--k-max",
        type=bounded_int(1, 100),
        help="children kept per node, or per layer with --prune per_layer (default 6)",
    )
    add_tag_reading_options(p)
    p.add_argument("--children", type=bounded_int(1, 20), help="children per parent (default 3)")
    p.add_argument("--screen", action="store_true", help="screen suspicious pairs before judging")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument(
        "--render", metavar="FILE", type=new_file_path, help="write a picture of the TAG (.png, .svg or .pdf)"
    )
    add_model_options(p)
    add_batch_options(
        p,
        default_output="runs/detect-METHOD-INPUT[-PROVIDER-MODEL].jsonl, e.g. runs/detect-tag-pairs.jsonl for the "
        "bundled examples on the embedded model",
        concurrency_note="; 1 on the embedded demo model, which answers two calls at once",
    )
    add_engine_options(p)
    p.set_defaults(func=run)


def _method(value: str) -> str:
    if value in ("tag", "vanilla") or value.startswith("guard:"):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: use tag, vanilla or guard:NAME")


def _context(args: argparse.Namespace) -> DetectionContext:
    from runner.detect import detection_context

    kw = context_kwargs(args)
    store = kw.pop("image_store", "")
    return detection_context(
        args.method,
        kw,
        image_store=store,
        l_max=args.l_max,
        k_max=args.k_max,
        children=args.children,
        screen=args.screen,
        reading=tag_reading_kwargs(args),  # the TAG paper's readings (docs/tag.md); vanilla and guards ignore them
    )


def command_line_image(ref: str | None) -> Path | None:
    """The absolute file a command-line `--image` names, or None for a URL, an id already in the image store, or
    no image.

    A path on the command line is relative to the working directory (`img/x.png`, `../x.png`), unlike a path in
    a JSONL batch, which is relative to that file and may not leave its folder.
    """
    if not ref or "://" in ref or ref.startswith(("data:", "file:")):
        return None
    path = Path(ref).expanduser()
    if not path.exists() and len(ref) == 64 and all(c in "0123456789abcdef" for c in ref):
        return None  # an image id of the store (a file of that name in the working directory wins)
    return path.resolve()


def _print_summary(rec: dict[str, Any], sample_id: str | None = None, *, demo: bool = False) -> None:
    """One result as a few lines; `demo` labels it as the embedded 135M model's (a demonstration, not a verdict)."""
    head = f"[{sample_id}] " if sample_id else ""
    if rec.get("status") == "failed":
        print(f"{head}FAILED: {rec.get('error')}", flush=True)
        return
    verdict = "TOXIC" if rec.get("toxic") else "not toxic"
    line = f"{head}{verdict}" + (" (the 135M demo model's answer, not a safety judgement)" if demo else "")
    if "mtc" in rec:
        line += f"  MTC={rec['mtc']:.4f}"
    finding = rec.get("finding")
    if finding:
        vp = " -> ".join(s["concept"] for s in finding["visual"]["path"])
        tp = " -> ".join(s["concept"] for s in finding["textual"]["path"])
        line += f"\n  image path: {vp}\n  text path:  {tp}\n  category: {finding.get('category')}"
        if finding.get("source") == "toxic_pairs":
            line += " (a pair of the --toxic-pairs set; no model judged it)"
        if finding.get("layer") == 0:  # a one-node path each: the roots themselves were judged toxic
            line += "\n  found at the roots: the pair is toxic as given, nothing hidden (hence MTC 0)"
    elif rec.get("toxic"):  # vanilla and guards: the category beside the verdict (a batch record's prediction)
        line += f"\n  category: {rec.get('predicted_category', rec.get('category')) or 'unnamed'}"
    if rec.get("explanation") or rec.get("reason"):
        line += f"\n  {rec.get('explanation') or rec.get('reason')}"
    usage = rec.get("usage", {}).get("total", {})
    line += (
        f"\n  calls={usage.get('calls', 0)} cache_hits={usage.get('cache_hits', 0)} "
        f"tokens={usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} "
        f"cost=${usage.get('cost_usd', 0):.4f}"
    )
    print(line, flush=True)  # shown as soon as each demo sample is done, also when stdout is a pipe


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse a combination of flags that names no one job, and a --render path that cannot be written, before
    any model call."""
    if args.input and (args.text or args.image or args.image_description):
        raise CommandLineError("give either one pair (--text with --image or --image-description) or --input, not both")
    if not args.input and not args.text and (args.image or args.image_description):
        raise CommandLineError(
            "--text is missing: a pair needs its text (run with no --image, --text or "
            "--input to try the bundled examples)"
        )
    if args.render and (args.input or not args.text):
        raise CommandLineError(
            "--render draws one pair's TAG; it is not supported with --input or the "
            "bundled examples (run one pair with --text)"
        )
    if args.render:
        from unveil.render import check_render_path

        try:
            check_render_path(args.render)  # before any model call
        except ValueError as exc:  # unveil/render.py names the flag and the formats it can write
            if isinstance(exc, UnveilError):
                raise
            raise CommandLineError(str(exc)) from exc


def _run_file(args: argparse.Namespace, ctx: DetectionContext) -> int:
    """Detect every pair of --input (or of the bundled examples, each summary shown as soon as it is done) as a
    batch that resumes into its output file."""
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import read_jsonl
    from runner.detect import BATCH_INPUT_FIELDS, detect_one, detection_settings, with_ground_truth

    source = Path(args.input) if args.input else EXAMPLES
    method_slug = args.method.replace(":", "-").replace("/", "-").replace("=", "-")  # guard:template=FILE
    # the model is in the default name, so a run with another model never resumes the demo's file
    default = default_output_name(f"detect-{method_slug}-{source.stem}", ctx.models())
    output = Path(args.output) if args.output else Path("runs") / default
    identity = output_identity(args, "detect", detection_settings(ctx, args.method))
    items = list(read_jsonl(source))
    base_dir = str(source.resolve().parent)
    spending = spending_caps(args)

    shown: set[str] = set()
    # The embedded model answers at most two calls at once (a sample's visual and textual expansions already
    # take both), so running demo samples side by side would only delay the first result and make the order in
    # which results are printed and written depend on timing: one sample at a time there.
    demo = all(is_demo_spec(spec) for spec in ctx.models().values())

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        rec = with_ground_truth(await detect_one({**record, "base_dir": base_dir}, ctx, args.method), record)
        if not args.input:  # the demo shows each result as soon as it is done
            _print_summary(rec, sample_id, demo=demo)
            shown.add(sample_id)
        return rec

    summary = asyncio.run(
        run_batch(
            items,
            worker,
            BatchRun(
                output,
                concurrency=1 if demo else args.concurrency,
                retry_failed=args.retry_failed,
                desc=f"detect ({args.method})",
                progress=not args.no_progress,
                inputs=(source,),
                identity=identity,
                spending=spending,
                keep_input=BATCH_INPUT_FIELDS,
                input_order=True,  # records are appended as samples finish; the file keeps the input's order
            ),
        )
    )
    if not args.input:
        from tools.jsonl_files import done_records

        records = done_records(output)
        for item in items:  # the input's order, as the output's
            if item.id in records and item.id not in shown:
                _print_summary(records[item.id], item.id, demo=demo)
    return report_batch(summary, output)


def _run_pair(args: argparse.Namespace, ctx: DetectionContext) -> int:
    """Detect the one pair of --text with --image or --image-description; print it, as JSON with --json, and
    draw its TAG with --render."""
    from runner.detect import detect_one

    sample = {"image": args.image, "image_description": args.image_description, "text": args.text}
    local = command_line_image(args.image)
    if local is not None:  # the image the user named on the command line: its folder is granted, nothing more
        sample["image"], sample["base_dir"] = str(local), str(local.parent)
    rec = asyncio.run(detect_one(sample, ctx, args.method))
    if args.render:
        from unveil.render import render_tag

        render_tag(rec, args.render)
        what = "TAG picture" if args.method == "tag" else "picture of the verdict"
        print(f"{what} written to {args.render}", file=sys.stderr)
    if args.json:
        print(json_text(rec))
    else:
        _print_summary(rec, demo=all(is_demo_spec(spec) for spec in ctx.models().values()))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run `unveil detect`: check the flags, set up the gateway and the method, then one file or one pair."""
    # The run layer is imported by the functions that run (here and above): parsing and --help stay light.
    from runner.detect import check_detection_config

    _check_flags(args)
    setup_gateway(args)
    try:
        check_detection_config(args.method)  # one error now, not one failed record per sample
    except UnveilError as exc:  # an unknown guard, a template file that cannot be read or used
        raise CommandLineError(f"--method {args.method}: {exc}") from exc
    ctx = _context(args)
    warn_if_demo(ctx.models())
    if args.input or not args.text:
        return _run_file(args, ctx)
    return _run_pair(args, ctx)
