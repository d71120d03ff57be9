"""`unveil detect`: TAG (or vanilla) covert-toxicity detection on one pair, a JSONL batch, or the bundled examples."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from unveil.batch import read_jsonl, run_batch
from unveil.commands.common import add_batch_options, add_model_options, context_kwargs, setup_gateway, warn_if_demo

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pairs.jsonl"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `detect` subcommand."""
    p = sub.add_parser("detect", help="detect covert toxicity in image-text pairs (TAG or vanilla)",
                       description="With no --text and no --input, runs the bundled example pairs.")
    p.add_argument("--image", help="image path or http(s) URL")
    p.add_argument("--image-description", help="what the image shows (needed by text-only models)")
    p.add_argument("--text", help="the text of the pair")
    p.add_argument("--method", choices=["tag", "vanilla"], default="tag", help="TAG detection or the one-call baseline")
    p.add_argument("--l-max", type=int, help="layers per tree, counting the roots (default 4)")
    p.add_argument("--k-max", type=int, help="nodes kept per layer, or per node with --prune per_node (default 6)")
    p.add_argument("--prune", choices=("per_layer", "per_node"),
                   help="how k_max bounds a tree (default per_layer; see docs/tag.md)")
    p.add_argument("--roots-mode", choices=("separate", "joint"),
                   help="root concepts from two entity-graph calls (default separate, the paper's) or one joint call")
    p.add_argument("--children", type=int, help="children per parent (default 3)")
    p.add_argument("--screen", action="store_true", help="screen suspicious pairs before judging")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--render", metavar="FILE", help="write a picture of the TAG (.png, .svg or .pdf)")
    add_model_options(p)
    add_batch_options(p)
    p.set_defaults(func=run)


def _context(args: argparse.Namespace) -> Any:
    from graphs.tag import TagContext
    from graphs.vanilla import VanillaContext

    kw = context_kwargs(args)
    if args.method == "vanilla":
        return VanillaContext(**{k: v for k, v in kw.items() if k in ("model", "vanilla_detector_model", "image_store")})
    for opt, name in (("l_max", "l_max"), ("k_max", "k_max"), ("children", "children_per_parent"),
                      ("prune", "prune"), ("roots_mode", "roots_mode")):
        if getattr(args, opt) is not None:
            kw[name] = getattr(args, opt)
    if args.screen:
        kw["screen_pairs"] = True
    ctx = TagContext(**kw)
    if all(spec.startswith("llamacpp:smollm2") for spec in ctx.models().values()) and args.l_max is None and args.k_max is None:
        # The 135M demo model is slow on CPU and its long prompts help nobody: a smaller search shows the same
        # pipeline in a fraction of the time. Explicit --l-max/--k-max still win.
        ctx.l_max, ctx.k_max, ctx.children_per_parent = 3, 3, 2
        print("demo settings for the embedded model: l_max=3, k_max=3, 2 children per parent", file=sys.stderr)
    return ctx


def result_record(out: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The JSON record of a detection (the graph output plus the model specs used)."""
    rec = {k: v for k, v in out.items() if k not in ("text", "image_description", "base_dir")}
    rec["models"] = ctx.models()
    if "visual" in rec:
        rec["trees"] = {"visual": rec.pop("visual"), "textual": rec.pop("textual")}
    return rec


async def detect_one(sample: dict[str, Any], ctx: Any, method: str) -> dict[str, Any]:
    """Run one sample through the chosen graph."""
    from graphs.tag import graph as tag_graph
    from graphs.vanilla import graph as vanilla_graph

    graph = vanilla_graph if method == "vanilla" else tag_graph
    fields = {k: sample.get(k) for k in ("image", "image_description", "text", "base_dir") if sample.get(k) is not None}
    out = await graph.ainvoke(fields, context=ctx)
    return result_record(out, ctx)


def _print_summary(rec: dict[str, Any], sample_id: str | None = None) -> None:
    head = f"[{sample_id}] " if sample_id else ""
    if rec.get("status") == "failed":
        print(f"{head}FAILED: {rec.get('error')}")
        return
    verdict = "TOXIC" if rec.get("toxic") else "not toxic"
    line = f"{head}{verdict}"
    if "mtc" in rec:
        line += f"  MTC={rec['mtc']:.4f}"
    finding = rec.get("finding")
    if finding:
        vp = " -> ".join(s["concept"] for s in finding["visual"]["path"])
        tp = " -> ".join(s["concept"] for s in finding["textual"]["path"])
        line += f"\n  image path: {vp}\n  text path:  {tp}\n  category: {finding.get('category')}"
    if rec.get("explanation") or rec.get("reason"):
        line += f"\n  {rec.get('explanation') or rec.get('reason')}"
    usage = rec.get("usage", {}).get("total", {})
    line += f"\n  calls={usage.get('calls', 0)} cache_hits={usage.get('cache_hits', 0)} tokens={usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} cost=${usage.get('cost_usd', 0):.4f}"
    print(line)


def run(args: argparse.Namespace) -> int:
    """Run `unveil detect`."""
    setup_gateway(args)
    ctx = _context(args)
    warn_if_demo(ctx.models())
    if args.input or not args.text:
        source = Path(args.input) if args.input else EXAMPLES
        output = Path(args.output) if args.output else (Path("runs") / f"detect-{args.method}-{source.stem}.jsonl")
        items = list(read_jsonl(source))
        base_dir = str(source.resolve().parent)

        async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
            return await detect_one({**record, "base_dir": base_dir}, ctx, args.method)

        summary = asyncio.run(run_batch(items, worker, output, concurrency=args.concurrency,
                                        retry_failed=args.retry_failed, desc=f"detect ({args.method})",
                                        progress=not args.no_progress))
        if not args.input:
            from unveil.batch import done_records

            for sid, rec in done_records(output).items():
                _print_summary(rec, sid)
        print(f"{summary.completed} done, {summary.failed} failed, {summary.skipped} already in {output}", file=sys.stderr)
        for failure in summary.failures:
            print(f"  failed {failure['id']}: {failure['error']}", file=sys.stderr)
        return 0
    sample = {"image": args.image, "image_description": args.image_description, "text": args.text}
    rec = asyncio.run(detect_one(sample, ctx, args.method))
    if args.render:
        from unveil.render import render_tag

        render_tag(rec, args.render)
        print(f"TAG picture written to {args.render}", file=sys.stderr)
    if args.json:
        print(json.dumps(rec, indent=2, ensure_ascii=False))
    else:
        _print_summary(rec)
    return 0
