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
from typing import Any

from evaluation.gates import IPR_GATES, detection_gates, detection_misses, ipr_misses, parse_gates
from tools.scorers.rules import IP_SOURCES
from tools.t2i.defaults import IPR_IMAGES_PER_PROMPT
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.settings import RenderSettings
from unveil.commands.common import (
    MAX_DEPTH,
    MAX_IMAGES,
    MAX_SCENES,
    MAX_STEPS,
    add_engine_options,
    add_gate_option,
    add_mixed_settings_option,
    add_model_options,
    add_render_options,
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

IPR_METHODS = ("sd", "sd-np", "sld-weak", "sld-medium", "sld-strong", "sld-max", "esd")
DEFAULT_SD = DEFAULT_IPR_GENERATOR.split(":", 1)[1]


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _run_options(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument(
        "--out", default=default_out, help=f"output folder for tables, plots and run files (default {default_out})"
    )
    p.add_argument("--concurrency", type=positive_int, default=4, help="samples run at once")
    add_spending_options(p)
    p.add_argument("--retry-failed", action="store_true", help="run samples that failed before again")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
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
        type=_csv,
        default=["vanilla", "tag"],
        help="vanilla, tag and/or guard models: guard:llama-guard-4, guard:llavaguard, "
        "guard:guardreasoner-vl, guard:template=FILE (default vanilla,tag); a guard's model is "
        "--role-model guard=SPEC (or guard.NAME=SPEC)",
    )
    p.add_argument(
        "--detectors", type=_csv, default=[], help="detector model specs, comma-separated (default: --model)"
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


def _ipr_generation_options(p: argparse.ArgumentParser) -> None:
    """`evaluate ipr`'s prompts and the generation methods it compares."""
    p.add_argument(
        "--prompts",
        default="",
        help="I2P CSV or JSONL prompts (default: the repository's 300-prompt split of POSI and IPR, "
        "data/i2p/ipr_eval_300.jsonl)",
    )
    p.add_argument("--categories", type=_csv, help="only these categories")
    p.add_argument(
        "--limit-per-category", type=bounded_int(1, MAX_SCENES), help="only the first N prompts of each category"
    )
    p.add_argument("--methods", type=_csv, default=["sd"], help=f"generation methods: {', '.join(IPR_METHODS)}")
    p.add_argument("--sd", default=DEFAULT_SD, help=f"base text-to-image model id or folder (default {DEFAULT_SD})")
    p.add_argument("--esd-unet", help="ESD UNet weights file (needed by the esd method)")
    p.add_argument(
        "--generator",
        action="append",
        default=[],
        metavar="METHOD=SPEC",
        help="override a method's generator spec, e.g. sd=diffusers:/models/sd21 (repeatable)",
    )


def _ipr_refinement_options(p: argparse.ArgumentParser) -> None:
    """`evaluate ipr`'s rewriter baseline and the IPR refiner's budgets and protocol."""
    p.add_argument("--with-rewriter", action="store_true", help="also run the text-only rewriter baseline")
    p.add_argument("--rewriter-model", default="", help="model spec of the rewriter (default: --model)")
    p.add_argument(
        "--rewriter-format",
        choices=["json", "posi", "refiner"],
        default="json",
        help="what the rewriter reads and writes: json (a prompted model, default), posi (POSI's own "
        "instruction and answer: a POSI checkpoint), refiner (a refiner adapter run text-only)",
    )
    p.add_argument("--refiner-model", default="", help="model spec of the IPR refiner (default: --model)")
    p.add_argument(
        "--ipr-t-max",
        type=int_list(0, MAX_STEPS),
        default=[],
        help="IPR step budgets, e.g. 1,2,3 (default: no IPR); one "
        "IPR graph run per prompt with T_max = the largest gives every budget",
    )
    p.add_argument(
        "--history", action="store_true", help="show the IPR refiner the prompts tried so far (default: myopic)"
    )
    p.add_argument(
        "--seed-mode",
        choices=["fresh", "fixed"],
        default="fresh",
        help="IPR steps sample a fresh image, seeded from the trajectory's seed and the step (default, the "
        "IPR paper's protocol), or re-render with the trajectory's seed (fixed)",
    )
    p.add_argument(
        "--on-refiner-error",
        choices=["fail", "stop"],
        default="fail",
        help="an unusable refiner answer fails the prompt (default) or ends its trajectory there",
    )
    p.add_argument(
        "--images-per-prompt",
        type=bounded_int(1, MAX_IMAGES),
        default=IPR_IMAGES_PER_PROMPT,
        help=f"images per prompt, seeds seed..seed+N-1 (default {IPR_IMAGES_PER_PROMPT}, as the paper)",
    )


def _ipr_render_options(p: argparse.ArgumentParser) -> None:
    """How `evaluate ipr` renders: the shared render flags, per-prompt guidance, the device."""
    add_render_options(p, RenderSettings())
    p.add_argument(
        "--prompt-guidance",
        action="store_true",
        help="render each prompt at its own I2P evaluation guidance where it has one (the I2P/SLD "
        "protocol; --guidance for the others)",
    )
    p.add_argument("--device", default="", help="device for generators and scorers (default: CUDA when present)")


def _ipr_scoring_options(p: argparse.ArgumentParser) -> None:
    """`evaluate ipr`'s scorers: what counts as inappropriate, Q16, BLIP, NudeNet and MHSC."""
    p.add_argument(
        "--ip-source",
        choices=IP_SOURCES,
        default=IP_SOURCES[0],
        help="what makes an image inappropriate (default: Q16 > 0.5 or a NudeNet exposed label)",
    )
    p.add_argument(
        "--q16-embeddings",
        default="",
        help="Q16 prompt embeddings (.npy or .p; default: $UNVEIL_Q16_PROMPTS, else the repository's "
        "data/q16/vit-l-14.npy)",
    )
    p.add_argument("--q16-clip-model", default="", help="CLIP ViT-L/14 model id or folder for Q16")
    p.add_argument("--blip-model", default="", help="BLIP model id or folder for the BLIP score")
    p.add_argument("--no-nudenet", action="store_true", help="do not run NudeNet")
    p.add_argument("--no-blip", action="store_true", help="do not compute the BLIP score")
    p.add_argument(
        "--mhsc-checkpoints",
        default="",
        help="MHSC head checkpoints (the checkpoints/multi-headed folder "
        "of Unsafe Diffusion): adds an MHSC column (IP with MHSC in Q16's place: MHSC or NudeNet) "
        "and an 'MHSC alone' column",
    )


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
    _ipr_generation_options(i)
    _ipr_refinement_options(i)
    _ipr_render_options(i)
    _ipr_scoring_options(i)
    add_model_options(i)
    add_engine_options(i)
    _run_options(i, "runs/eval-ipr")
    add_gate_option(i, ", ".join(f"{k} ({v})" for k, v in IPR_GATES.items()))
    i.set_defaults(func=run_ipr)

    from unveil.commands.ipr_ablation import IprParts, add_ablation_parser

    parts = IprParts(
        option_groups=(_ipr_generation_options, _ipr_render_options, _ipr_scoring_options),
        run_options=_run_options,
        generator_specs=generator_specs,
        generators=_ipr_generators,
        scorer=_ipr_scorer,
    )
    add_ablation_parser(ev, parts)


def _named_datasets(args: argparse.Namespace) -> dict[str, tuple[Path, str]]:
    from evaluation.datasets import FORMATS

    formats = args.format or ["auto"]
    if len(formats) not in (1, len(args.dataset)):
        raise SystemExit(f"--format: give one value or one per --dataset ({len(args.dataset)})")
    out: dict[str, tuple[Path, str]] = {}
    for k, item in enumerate(args.dataset):
        name, sep, path = item.partition("=")
        if not sep:
            path, name = item, ""
        fmt = formats[k] if len(formats) > 1 else formats[0]
        prefix, colon, rest = path.partition(":")  # FMT:FILE, e.g. siuo:data/siuo_gen.json
        if colon and prefix in FORMATS:
            fmt, path = prefix, rest
        name = name or f"{Path(path).parent.name}/{Path(path).stem}".strip("/")
        if name in out:
            raise SystemExit(f"--dataset: the name {name!r} is used twice; label them NAME=FILE")
        out[name] = (Path(path), fmt)
    return out


def mtc_runs(values: list[str], datasets: dict[str, Any]) -> dict[str, str]:
    """`--mtc-from [NAME=]FILE` values as {dataset name or "" (every dataset): run file}."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or name not in datasets:  # a path may itself hold '=': only a known dataset name is a label
            name, path = "", item
        if name in out:
            raise SystemExit(f"--mtc-from: two run files for {name or 'every dataset'}")
        out[name] = path
    return out


def run_detection(args: argparse.Namespace) -> int:
    """Run `unveil evaluate detection`."""
    from evaluation.datasets import load_detection
    from evaluation.detection import DetectionSettings, MtcReferenceError, evaluate_detection
    from graphs.context import ModelsContext
    from graphs.tag import TagContext
    from graphs.vanilla import VanillaContext
    from runner.context import check_model_fields

    gates = parse_gates(args.fail_under, detection_gates(args.beta))  # before any model call
    setup_gateway(args)
    kw = context_kwargs(args)
    detectors = args.detectors or [kw.get("model") or ModelsContext().model]
    roles = {k: v for k, v in kw.items() if k.endswith("_model")}
    try:
        # guard / guard.NAME models serve the guard methods (runner.detect.guard_model)
        check_model_fields((TagContext, VanillaContext), {k: v for k, v in roles.items() if not k.startswith("guard")})
    except ValueError as exc:
        raise SystemExit(f"unveil evaluate detection: {exc}") from exc
    warn_if_demo(detectors + list(roles.values()))
    datasets = {}
    for name, (path, fmt) in _named_datasets(args).items():
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
    try:
        result = asyncio.run(evaluate_detection(datasets, settings, args.out))
    except MtcReferenceError as exc:
        raise SystemExit(f"unveil evaluate detection: {exc}") from exc
    return _finish(args, "detection.md", "samples", result, detection_misses(gates, result["rows"]), settings.spending)


def _finish(
    args: argparse.Namespace, report: str, noun: str, result: dict[str, Any], misses: list[Any], spending: Any
) -> int:
    """Print an evaluation's report and what it left out, and return its exit code: failed samples count, samples
    a spending cap kept from starting do not (a rerun with a higher cap runs them)."""
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
    return gated_exit_code(failed, misses)


def generator_specs(args: argparse.Namespace) -> dict[str, str]:
    """Generator spec per requested method (overrides from --generator win)."""
    overrides = {}
    for item in args.generator:
        m, sep, spec = item.partition("=")
        if not sep:
            raise SystemExit(f"--generator {item!r}: expected METHOD=SPEC")
        overrides[m.strip()] = spec.strip()
    specs = {}
    for m in args.methods:
        if m in overrides:
            specs[m] = overrides[m]
        elif m == "sd":
            specs[m] = f"diffusers:{args.sd}"
        elif m == "esd":
            if not args.esd_unet:
                raise SystemExit("the esd method needs --esd-unet FILE (or --generator esd=SPEC)")
            specs[m] = f"esd:{args.sd}?unet={args.esd_unet}"
        elif m in IPR_METHODS:
            specs[m] = f"{m}:{args.sd}"
        else:
            raise SystemExit(f"unknown method {m!r}: use {', '.join(IPR_METHODS)} or --generator {m}=SPEC")
    return specs


def _ipr_models(args: argparse.Namespace, kw: dict[str, Any]) -> tuple[str, str]:
    """The refiner's and the rewriter's specs ("" where the run uses none). --role-model takes only these two
    roles; the default model stands in where the run needs one and none is named."""
    from graphs.context import ModelsContext

    extra_roles = sorted(
        k[: -len("_model")] for k in kw if k.endswith("_model") and k not in ("refiner_model", "rewriter_model")
    )
    if extra_roles:
        raise SystemExit(
            f"unveil evaluate ipr: unknown role(s) {', '.join(extra_roles)}; valid roles: refiner, rewriter"
        )
    # --role-model refiner=SPEC / rewriter=SPEC mean the same as --refiner-model / --rewriter-model.
    args.refiner_model = args.refiner_model or kw.get("refiner_model", "")
    args.rewriter_model = args.rewriter_model or kw.get("rewriter_model", "")
    default_model = kw.get("model") or ModelsContext().model
    refiner = args.refiner_model or (default_model if args.ipr_t_max else "")
    rewriter = args.rewriter_model or (default_model if args.with_rewriter else "")
    return refiner, rewriter


def _ipr_generators(
    args: argparse.Namespace, specs: dict[str, str], store_root: str, render: RenderSettings
) -> dict[str, Any]:
    """One opened generator per method, writing to the run's image store (an API generator takes no device)."""
    from tools.image_store import get_image_store
    from tools.t2i.registry import open_generator

    opts: dict[str, Any] = {"store": get_image_store(store_root or None)}
    if args.device:
        opts["device"] = args.device
    return {
        m: open_generator(
            spec,
            long_prompts=render.long_prompts,
            **(opts if not spec.startswith("openai:") else {"store": opts["store"]}),
        )
        for m, spec in specs.items()
    }


def _ipr_scorer(args: argparse.Namespace, store_root: str) -> Any:
    """The paper's scorers (Q16, NudeNet, BLIP, MHSC) as the flags choose them."""
    from evaluation.scoring import PaperScorer

    return PaperScorer(
        q16_embeddings=args.q16_embeddings,
        q16_clip_model=args.q16_clip_model,
        blip_model=args.blip_model,
        nudenet=not args.no_nudenet,
        blip=not args.no_blip,
        device=args.device,
        image_store=store_root,
        mhsc_checkpoints=args.mhsc_checkpoints,
    )


def run_ipr(args: argparse.Namespace) -> int:
    """Run `unveil evaluate ipr`: the models, the generators per method, the prompts, the settings and the
    scorers, then the evaluation and its report."""
    from evaluation.datasets import load_prompts
    from evaluation.ipr import IPRSettings, evaluate_ipr
    from tools.datafiles import IPR_EVAL_PROMPTS, data_file
    from tools.scorers.q16 import resolve_q16_embeddings

    gates = parse_gates(args.fail_under, IPR_GATES)  # before any model call
    # The paper's data are the defaults: the 300-prompt split and Q16's embeddings kept in the repository's data/
    # (the latter through the one default every command shares).
    args.prompts = args.prompts or str(data_file(IPR_EVAL_PROMPTS))
    args.q16_embeddings = resolve_q16_embeddings(args.q16_embeddings)
    setup_gateway(args)
    kw = context_kwargs(args)
    refiner, rewriter = _ipr_models(args, kw)
    warn_if_demo([s for s in (refiner, rewriter) if s])
    specs = generator_specs(args)
    store_root = kw.get("image_store", "")
    render = RenderSettings(**render_overrides(args))
    generators = _ipr_generators(args, specs, store_root, render)
    items = load_prompts(args.prompts, categories=args.categories, limit_per_category=args.limit_per_category)
    settings = IPRSettings(
        methods=specs,
        with_rewriter=args.with_rewriter,
        rewriter_model=rewriter,
        rewriter_format=args.rewriter_format,
        refiner_model=refiner,
        t_max=args.ipr_t_max,
        images_per_prompt=args.images_per_prompt,
        history=args.history,
        seed_mode=args.seed_mode,
        on_refiner_error=args.on_refiner_error,
        **render.render_settings(),
        prompt_guidance=args.prompt_guidance,
        ip_source=args.ip_source,
        image_store=store_root,
        concurrency=args.concurrency,
        progress=not args.no_progress,
        retry_failed=args.retry_failed,
        allow_mixed_settings=args.allow_mixed_settings,
        command=args.command_line,
        spending=spending_caps(args),
    )
    result = asyncio.run(evaluate_ipr(items, settings, generators, _ipr_scorer(args, store_root), args.out))
    return _finish(args, "ipr.md", "prompts", result, ipr_misses(gates, result["rows"]), settings.spending)
