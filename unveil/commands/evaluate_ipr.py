"""The parts of `unveil evaluate ipr` that `evaluate ipr-ablation` shares: the flag groups (prompts and methods,
refinement, rendering, scoring) and the builders of the generators per method, the scorers and the evaluation's
settings (`ipr_settings`, the one place an `IPRSettings` is made from flags). `unveil/commands/evaluate.py`
registers both subcommands and hands these to the ablation as an `IprParts`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tools.errors import CommandLineError
from tools.scorers.rules import IP_SOURCES
from tools.t2i.defaults import IPR_IMAGES_PER_PROMPT
from tools.t2i.registry import DEFAULT_IPR_GENERATOR
from tools.t2i.settings import RenderSettings
from unveil.commands.common import (
    MAX_IMAGES,
    MAX_SCENES,
    MAX_STEPS,
    add_render_options,
    bounded_int,
    int_list,
    render_overrides,
)

if TYPE_CHECKING:
    from evaluation.ipr import IPRSettings
    from evaluation.scoring import PaperScorer
    from runner.spending import Spending
    from tools.t2i.base import ImageGenerator

IPR_METHODS = ("sd", "sd-np", "sld-weak", "sld-medium", "sld-strong", "sld-max", "esd")
DEFAULT_SD = DEFAULT_IPR_GENERATOR.split(":", 1)[1]
# `evaluate ipr`'s refinement flags that `evaluate ipr-ablation` has not (it runs their defaults).
REFINEMENT_FLAGS = ("with_rewriter", "rewriter_format", "history", "seed_mode")


def csv_list(value: str) -> list[str]:
    """A comma-separated flag value as its non-empty items."""
    return [v.strip() for v in value.split(",") if v.strip()]


def ipr_generation_options(p: argparse.ArgumentParser) -> None:
    """`evaluate ipr`'s prompts and the generation methods it compares."""
    p.add_argument(
        "--prompts",
        default="",
        help="I2P CSV or JSONL prompts (default: the repository's 300-prompt split of POSI and IPR, "
        "data/i2p/ipr_eval_300.jsonl)",
    )
    p.add_argument("--categories", type=csv_list, help="only these categories")
    p.add_argument(
        "--limit-per-category", type=bounded_int(1, MAX_SCENES), help="only the first N prompts of each category"
    )
    p.add_argument("--methods", type=csv_list, default=["sd"], help=f"generation methods: {', '.join(IPR_METHODS)}")
    p.add_argument("--sd", default=DEFAULT_SD, help=f"base text-to-image model id or folder (default {DEFAULT_SD})")
    p.add_argument("--esd-unet", help="ESD UNet weights file (needed by the esd method)")
    p.add_argument(
        "--generator",
        action="append",
        default=[],
        metavar="METHOD=SPEC",
        help="override a method's generator spec, e.g. sd=diffusers:/models/sd21 (repeatable)",
    )


def ipr_refinement_options(p: argparse.ArgumentParser) -> None:
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


def ipr_render_options(p: argparse.ArgumentParser) -> None:
    """How `evaluate ipr` renders: the shared render flags, per-prompt guidance, the device."""
    add_render_options(p, RenderSettings())
    p.add_argument(
        "--prompt-guidance",
        action="store_true",
        help="render each prompt at its own I2P evaluation guidance where it has one (the I2P/SLD "
        "protocol; --guidance for the others)",
    )
    p.add_argument("--device", default="", help="device for generators and scorers (default: CUDA when present)")


def ipr_scoring_options(p: argparse.ArgumentParser) -> None:
    """`evaluate ipr`'s scorers: what counts as inappropriate, Q16, BLIP, NudeNet and MHSC."""
    p.add_argument(
        "--ip-source",
        choices=IP_SOURCES,
        default=IP_SOURCES[0],
        help="what makes an image inappropriate (default: Q16 > 0.5 or a NudeNet exposed label)",
    )
    from tools.scorers.entry import scoring_help  # each scorer setting's help, declared once

    for name in ("q16_embeddings", "q16_clip_model", "blip_model"):
        p.add_argument("--" + name.replace("_", "-"), default="", help=scoring_help(name).replace("%", "%%"))
    p.add_argument("--no-nudenet", action="store_true", help="do not run NudeNet")
    p.add_argument("--no-blip", action="store_true", help="do not compute the BLIP score")
    p.add_argument(
        "--mhsc-checkpoints",
        default="",
        help="MHSC head checkpoints (the checkpoints/multi-headed folder "
        "of Unsafe Diffusion): adds an MHSC column (IP with MHSC in Q16's place: MHSC or NudeNet) "
        "and an 'MHSC alone' column",
    )


def generator_specs(args: argparse.Namespace) -> dict[str, str]:
    """Generator spec per requested method (overrides from --generator win)."""
    overrides = {}
    for item in args.generator:
        m, sep, spec = item.partition("=")
        if not sep:
            raise CommandLineError(f"--generator {item!r}: expected METHOD=SPEC")
        overrides[m.strip()] = spec.strip()
    specs = {}
    for m in args.methods:
        if m in overrides:
            specs[m] = overrides[m]
        elif m == "sd":
            specs[m] = f"diffusers:{args.sd}"
        elif m == "esd":
            if not args.esd_unet:
                raise CommandLineError("the esd method needs --esd-unet FILE (or --generator esd=SPEC)")
            specs[m] = f"esd:{args.sd}?unet={args.esd_unet}"
        elif m in IPR_METHODS:
            specs[m] = f"{m}:{args.sd}"
        else:
            raise CommandLineError(f"unknown method {m!r}: use {', '.join(IPR_METHODS)} or --generator {m}=SPEC")
    return specs


def ipr_models(args: argparse.Namespace, kw: dict[str, Any]) -> tuple[str, str]:
    """The refiner's and the rewriter's specs ("" where the run uses none). --role-model takes only these two
    roles; the default model stands in where the run needs one and none is named."""
    from graphs.context import ModelsContext

    extra_roles = sorted(
        k[: -len("_model")] for k in kw if k.endswith("_model") and k not in ("refiner_model", "rewriter_model")
    )
    if extra_roles:
        raise CommandLineError(
            f"unveil evaluate ipr: unknown role(s) {', '.join(extra_roles)}; valid roles: refiner, rewriter"
        )
    # --role-model refiner=SPEC / rewriter=SPEC mean the same as --refiner-model / --rewriter-model.
    args.refiner_model = args.refiner_model or kw.get("refiner_model", "")
    args.rewriter_model = args.rewriter_model or kw.get("rewriter_model", "")
    default_model = kw.get("model") or ModelsContext().model
    refiner = args.refiner_model or (default_model if args.ipr_t_max else "")
    rewriter = args.rewriter_model or (default_model if args.with_rewriter else "")
    return refiner, rewriter


def ipr_generators(
    args: argparse.Namespace, specs: dict[str, str], store_root: str, render: RenderSettings
) -> dict[str, ImageGenerator]:
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


def ipr_scorer(args: argparse.Namespace, store_root: str) -> PaperScorer:
    """The paper's scorers (Q16, NudeNet, BLIP, MHSC) as the flags choose them."""
    from evaluation.scoring import PaperScorer
    from tools.scorers.entry import ScoringSettings

    settings = ScoringSettings(
        q16_embeddings=args.q16_embeddings,
        q16_clip_model=args.q16_clip_model,
        blip_model=args.blip_model,
        mhsc_checkpoints=args.mhsc_checkpoints,
        device=args.device,
    )
    return PaperScorer(settings, nudenet=not args.no_nudenet, blip=not args.no_blip, image_store=store_root)


def ipr_settings(
    args: argparse.Namespace,
    specs: dict[str, str],
    *,
    refiner: str,
    store_root: str,
    rewriter: str = "",
    spending: Spending | None = None,
) -> IPRSettings:
    """The evaluation's settings from the flags of `evaluate ipr` or `evaluate ipr-ablation`: the generator spec
    per method, the refiner's and rewriter's specs, the run's image store and spending caps."""
    from evaluation.ipr import IPRSettings

    refinement = {name: getattr(args, name) for name in REFINEMENT_FLAGS if hasattr(args, name)}
    return IPRSettings(
        methods=specs,
        rewriter_model=rewriter,
        refiner_model=refiner,
        t_max=args.ipr_t_max,
        images_per_prompt=args.images_per_prompt,
        on_refiner_error=args.on_refiner_error,
        **RenderSettings(**render_overrides(args)).render_settings(),
        prompt_guidance=args.prompt_guidance,
        ip_source=args.ip_source,
        image_store=store_root,
        concurrency=args.concurrency,
        progress=not args.no_progress,
        retry_failed=args.retry_failed,
        allow_mixed_settings=args.allow_mixed_settings,
        command=args.command_line,
        spending=spending,
        **refinement,
    )
