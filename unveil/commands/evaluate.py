"""`unveil evaluate`: the papers' tables from one command each.

- `unveil evaluate detection --dataset FILE ... --methods vanilla,tag --detectors SPEC,...` (TAG paper
  Tables 1-4, Figure 5)
- `unveil evaluate ipr --prompts FILE --methods sd,sd-np,sld-weak,... --with-rewriter --ipr-t-max 1,2,3`
  (IPR paper Tables 1-3, 5-10)

Both write Markdown and CSV tables and PNG plots into `--out`, keep one resumable JSONL per configuration
under `--out/runs/`, and answer repeated model calls from the gateway cache: rerunning the same command
recomputes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.gates import IPR_GATES, GateMiss, detection_gates, detection_misses, ipr_misses, parse_gates
from tools.errors import CommandLineError
from tools.t2i.settings import RenderSettings
from unveil.commands.common import (
    MAX_DEPTH,
    MAX_SCENES,
    add_engine_options,
    add_gate_option,
    add_mixed_settings_option,
    add_model_options,
    add_spending_options,
    add_tag_reading_options,
    bounded_float,
    bounded_int,
    context_kwargs,
    gated_exit_code,
    int_list,
    positive_int,
    render_overrides,
    report_stop,
    setup_gateway,
    spending_caps,
    tag_reading_kwargs,
    warn_if_demo,
)
from unveil.commands.evaluate_ipr import (
    csv_list,
    generator_specs,
    ipr_generation_options,
    ipr_generators,
    ipr_models,
    ipr_refinement_options,
    ipr_render_options,
    ipr_scorer,
    ipr_scoring_options,
    ipr_settings,
)
from unveil.commands.inputs import named_datasets

if TYPE_CHECKING:
    from runner.spending import Spending


def _run_options(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument(
        "--out", default=default_out, help=f"output folder for tables, plots and run files (default {default_out})"
    )
    p.add_argument("--concurrency", type=positive_int, default=4, help="samples run at once")
    add_spending_options(p)
    p.add_argument("--retry-failed", action="store_true", help="run samples that failed before again")
    p.add_argument(
        "--no-progress", action="store_true", help="hide progress bars, the libraries' model-loading bars too"
    )
    add_mixed_settings_option(p)


def _detection_data_options(p: argparse.ArgumentParser) -> None:
    """`evaluate detection`'s datasets and the methods and detectors it compares."""
    p.add_argument(
        "--dataset",
        action="append",
        required=True,
        metavar="[NAME=][FMT:]FILE",
        help="dataset file (repeatable), e.g. siuo:data/siuo_gen.json; NAME labels it in the tables "
        "(default: the file's folder/stem); FMT is its layout, as --format",
    )
    from evaluation.datasets import FORMATS
    from evaluation.formats import format_help

    p.add_argument(
        "--format", action="append", default=[], metavar="FMT", choices=[*FORMATS, "auto"], help=format_help(FORMATS)
    )
    p.add_argument(
        "--methods",
        type=csv_list,
        default=["vanilla", "tag"],
        help="vanilla, tag and/or guard models: guard:llama-guard-4, guard:llavaguard, "
        "guard:guardreasoner-vl, guard:template=FILE (default vanilla,tag); a guard's model is "
        "--role-model guard=SPEC (or guard.NAME=SPEC)",
    )
    p.add_argument(
        "--detectors", type=csv_list, default=[], help="detector model specs, comma-separated (default: --model)"
    )


def _detection_tag_options(p: argparse.ArgumentParser) -> None:
    """`evaluate detection`'s TAG shape (depth, width, ablation depths) and the F-score's beta."""
    p.add_argument(
        "--l-max",
        type=bounded_int(1, MAX_DEPTH),
        help="TAG depth counting the roots (default 4; 2 on the embedded demo model, as in `unveil detect`)",
    )
    p.add_argument(
        "--l-max-ablation",
        type=int_list(1, MAX_DEPTH),
        default=[],
        help="other depths to run for the ablation, e.g. 2,3",
    )
    p.add_argument(
        "--k-max",
        type=bounded_int(1, 100),
        help="TAG children kept per node, or nodes per layer with --prune per_layer "
        "(default 6; 2 on the embedded demo model)",
    )
    add_tag_reading_options(p)
    p.add_argument(
        "--children", type=bounded_int(1, 20), help="children per parent (default 3; 2 on the embedded demo model)"
    )
    p.add_argument("--beta", type=bounded_float(0.0, 100.0, above=True), default=2.0, help="F-score beta (default 2)")


def _detection_sample_options(p: argparse.ArgumentParser) -> None:
    """Which samples `evaluate detection` scores (benign ones too, the first N) and where the covertness bins
    come from."""
    benign = p.add_mutually_exclusive_group()
    benign.add_argument(
        "--toxic-only",
        dest="include_benign",
        action="store_false",
        help="score the toxic samples only, as the TAG paper's Tables 1-2 (the default)",
    )
    benign.add_argument(
        "--include-benign",
        dest="include_benign",
        action="store_true",
        help="also score the datasets' benign samples (Table 4, 'with benign data')",
    )
    p.set_defaults(include_benign=False)
    p.add_argument(
        "--mtc-from",
        action="append",
        default=[],
        metavar="[NAME=]RUN.jsonl",
        help="covertness bins from this TA-CTD run file (records with id and mtc), for the dataset NAME "
        "or every dataset; repeatable",
    )
    p.add_argument(
        "--mtc-reference",
        default="",
        metavar="SPEC",
        help="covertness bins from TA-CTD of this reference detector, run once per dataset and reused "
        "for every method (default: the dataset's mtc field); use a model you do not score",
    )
    p.add_argument("--limit", type=bounded_int(1, MAX_SCENES), help="only the first N samples of each dataset")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `evaluate detection`, `evaluate ipr` and `evaluate ipr-ablation`."""
    p = sub.add_parser("evaluate", help="reproduce the papers' evaluation tables and figures")
    ev = p.add_subparsers(dest="evaluation", required=True)

    d = ev.add_parser("detection", help="vanilla vs TA-CTD: accuracy/F2 per MTC bin, l_max ablation, MTC histogram")
    _detection_data_options(d)
    _detection_tag_options(d)
    _detection_sample_options(d)
    add_model_options(d)
    add_engine_options(d)
    _run_options(d, "runs/eval-detection")
    add_gate_option(d, "accuracy, precision, recall, f<BETA> (f2 by default)")
    d.set_defaults(func=run_detection)

    i = ev.add_parser(
        "ipr", help="IP / Q16 confidence / BLIP / keep ratio of generation methods, plain, rewritten and with IPR"
    )
    ipr_generation_options(i)
    ipr_refinement_options(i)
    ipr_render_options(i)
    ipr_scoring_options(i)
    add_model_options(i)
    add_engine_options(i)
    _run_options(i, "runs/eval-ipr")
    add_gate_option(i, ", ".join(f"{k} ({v})" for k, v in IPR_GATES.items()))
    i.set_defaults(func=run_ipr)

    from unveil.commands.ipr_ablation import IprParts, add_ablation_parser

    parts = IprParts(
        option_groups=(ipr_generation_options, ipr_render_options, ipr_scoring_options),
        run_options=_run_options,
        generator_specs=generator_specs,
        generators=ipr_generators,
        scorer=ipr_scorer,
        settings=ipr_settings,
    )
    add_ablation_parser(ev, parts)


def mtc_runs(values: list[str], datasets: dict[str, Any]) -> dict[str, str]:
    """`--mtc-from [NAME=]FILE` values as {dataset name or "" (every dataset): run file}."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or name not in datasets:  # a path may itself hold '=': only a known dataset name is a label
            name, path = "", item
        if name in out:
            raise CommandLineError(f"--mtc-from: two run files for {name or 'every dataset'}")
        out[name] = path
    return out


def run_detection(args: argparse.Namespace) -> int:
    """Run `unveil evaluate detection`."""
    from evaluation.datasets import load_detection
    from evaluation.detection import DetectionSettings, evaluate_detection
    from graphs.context import ModelsContext
    from graphs.tag import TagContext
    from graphs.vanilla import VanillaContext
    from runner.context import check_model_fields

    gates = parse_gates(args.fail_under, detection_gates(args.beta))  # before any model call
    setup_gateway(args)
    kw = context_kwargs(args)
    detectors = args.detectors or [kw.get("model") or ModelsContext().model]
    roles = {k: v for k, v in kw.items() if k.endswith("_model")}
    # guard / guard.NAME models serve the guard methods (runner.detect.guard_model); an unknown role is the
    # ContextError that names it (an UnveilError: one line, exit 1).
    check_model_fields((TagContext, VanillaContext), {k: v for k, v in roles.items() if not k.startswith("guard")})
    warn_if_demo(detectors + list(roles.values()))
    datasets = {}
    for name, (path, fmt) in named_datasets(args).items():
        items = load_detection(path, fmt, include_benign=args.include_benign)
        datasets[name] = items[: args.limit] if args.limit else items
        bad = sum(1 for it in datasets[name] if it.error)
        print(f"{name}: {len(datasets[name])} samples ({bad} unusable, listed in failures)", file=sys.stderr)
    settings = DetectionSettings(
        methods=args.methods,
        models=detectors,
        l_max=args.l_max,
        l_max_ablation=args.l_max_ablation,
        k_max=args.k_max,
        children=args.children,
        reading=tag_reading_kwargs(args),
        role_models=roles,
        image_store=kw.get("image_store", ""),
        concurrency=args.concurrency,
        progress=not args.no_progress,
        retry_failed=args.retry_failed,
        beta=args.beta,
        include_benign=args.include_benign,
        mtc_from=mtc_runs(args.mtc_from, datasets),
        mtc_reference=args.mtc_reference,
        allow_mixed_settings=args.allow_mixed_settings,
        command=args.command_line,
        spending=spending_caps(args),
    )
    result = asyncio.run(evaluate_detection(datasets, settings, args.out))
    return _finish(args, "detection.md", "samples", result, detection_misses(gates, result["rows"]), settings.spending)


def _finish(
    args: argparse.Namespace,
    report: str,
    noun: str,
    result: dict[str, Any],
    misses: list[GateMiss],
    spending: Spending | None,
) -> int:
    """Print an evaluation's report and what it left out, and return its exit code: failed samples count as
    failures; samples a spending cap kept from starting are not failures but make the run incomplete (exit 4; a
    rerun with a higher cap runs them)."""
    from evaluation.runs import NOT_RUN

    print((Path(args.out) / report).read_text())
    not_run = sum(1 for f in result["failures"] if f.get("error") == NOT_RUN)
    failed = len(result["failures"]) - not_run
    print(
        f"tables and plots in {args.out} ({failed} failed {noun} listed in failures.md"
        + (f"; {not_run} not run" if not_run else "")
        + ")",
        file=sys.stderr,
    )
    report_stop(spending, not_run)
    return gated_exit_code(failed, misses, not_run)


def run_ipr(args: argparse.Namespace) -> int:
    """Run `unveil evaluate ipr`: the models, the generators per method, the prompts, the settings and the
    scorers, then the evaluation and its report."""
    from evaluation.datasets import load_prompts
    from evaluation.ipr import evaluate_ipr
    from tools.datafiles import IPR_EVAL_PROMPTS, data_file
    from tools.scorers.q16 import resolve_q16_embeddings

    gates = parse_gates(args.fail_under, IPR_GATES)  # before any model call
    # The paper's data are the defaults: the 300-prompt split and Q16's embeddings kept in the repository's data/
    # (the latter through the one default every command shares).
    args.prompts = args.prompts or str(data_file(IPR_EVAL_PROMPTS))
    args.q16_embeddings = resolve_q16_embeddings(args.q16_embeddings)
    setup_gateway(args)
    kw = context_kwargs(args)
    refiner, rewriter = ipr_models(args, kw)
    warn_if_demo([s for s in (refiner, rewriter) if s])
    specs = generator_specs(args)
    store_root = kw.get("image_store", "")
    render = RenderSettings(**render_overrides(args))
    generators = ipr_generators(args, specs, store_root, render)
    items = load_prompts(args.prompts, categories=args.categories, limit_per_category=args.limit_per_category)
    settings = ipr_settings(
        args, specs, refiner=refiner, store_root=store_root, rewriter=rewriter, spending=spending_caps(args)
    )
    result = asyncio.run(evaluate_ipr(items, settings, generators, ipr_scorer(args, store_root), args.out))
    return _finish(args, "ipr.md", "prompts", result, ipr_misses(gates, result["rows"]), settings.spending)
