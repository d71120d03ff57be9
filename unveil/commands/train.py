"""`unveil train build-data | sft | grpo`: the IPR refiner's dataset, supervised fine-tuning and GRPO.

Every SFT/GRPO setting (see `training/config.py`) is a flag named after it (`--learning-rate`, `--lora-r`,
`--reward-scale`, ...), and `--config FILE` (TOML/YAML/JSON) supplies any of them; flags win over the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, TypeVar

from tools.env import BOOL_WORDS, SettingError, parse_bool
from tools.errors import CommandLineError
from tools.extras import require_extra
from tools.t2i.registry import DEFAULT_IPR_GENERATOR, check_generator
from tools.t2i.settings import RenderSettings
from unveil.commands.common import (
    MAX_SCENES,
    add_mixed_settings_option,
    add_model_options,
    add_render_options,
    bounded_float,
    bounded_int,
    output_identity,
    positive_int,
    render_overrides,
    report_batch,
    seed_int,
    setup_gateway,
)

if TYPE_CHECKING:  # training (and torch) is imported only when a training command runs
    from collections.abc import Callable
    from dataclasses import Field

    from training.config import TrainSettings

S = TypeVar("S", bound="TrainSettings")


def _parse_bool(text: str) -> bool:
    try:
        return parse_bool("value", text)
    except SettingError:
        raise argparse.ArgumentTypeError(f"expected {BOOL_WORDS}, got {text!r}") from None


def _add_fields(parser: argparse.ArgumentParser, cls: type, prefix: str = "") -> None:
    """A flag per dataclass field, with the field's `description` metadata as help; defaults stay None so only
    given flags override the config file."""
    for f in fields(cls):
        if f.name == "reward":
            continue
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        flag = "--" + (prefix + f.name).replace("_", "-")
        dest = prefix + f.name
        what = f.metadata.get("description", "")
        if isinstance(default, bool):
            # the words the flag takes (yes/no), not Python's True/False
            shown = "yes" if default else "no"
            parser.add_argument(flag, dest=dest, type=_parse_bool, metavar="BOOL", help=f"{what} (default {shown})")
        elif isinstance(default, list):
            parser.add_argument(
                flag,
                dest=dest,
                type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                metavar="A,B",
                help=f"{what} (default {','.join(default)})",
            )
        else:
            parser.add_argument(flag, dest=dest, type=_number_type(f, default), help=f"{what} (default {default!r})")


def _number_type(f: Field[Any], default: object) -> Callable[[str], object]:
    """The argparse type of a settings field: numbers bounded as `unveil.commands.common` bounds every numeric
    flag (a field's `min` metadata, else none below; finite; at most `MAX_SETTING`), other values as their type."""
    if isinstance(default, float):
        return bounded_float(float(f.metadata.get("min", -MAX_SETTING)), MAX_SETTING)
    if isinstance(default, int):
        return bounded_int(int(f.metadata.get("min", -MAX_SETTING)), MAX_SETTING)
    return type(default) if default is not None else str


MAX_SETTING = 10**9  # far above any step count, batch size or rate a run uses; stops a typo from allocating it


def _overrides(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    from training.reward import RewardSettings

    names = {f.name for f in fields(cls)} | {f"reward_{f.name}" for f in fields(RewardSettings)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def _register_build_data(tsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `unveil train build-data`: render prompts and label them, the SFT dataset."""
    b = tsub.add_parser(
        "build-data",
        help="render prompts and label them with a VLM: the SFT dataset",
        description="Renders each prompt, asks the labeller role for a reason and keep/safer prompt, "
        "and appends one record per prompt to --output (resumable).",
    )
    b.add_argument(
        "--prompts", required=True, help="prompts file (JSONL/JSON/CSV/TXT), e.g. POSI's 3,390 toxic prompts"
    )
    b.add_argument("--prompt-field", help="field holding the prompt (default prompt/input/text/query)")
    b.add_argument("--limit", type=bounded_int(1, MAX_SCENES), help="only the first N prompts")
    b.add_argument("--output", required=True, help="labelled JSONL (rerunning skips ids already in it)")
    b.add_argument("--labeller", help="labeller model spec (default: --role-model labeller=..., else --model)")
    b.add_argument(
        "--generator", default=DEFAULT_IPR_GENERATOR, help=f"text-to-image spec (default {DEFAULT_IPR_GENERATOR})"
    )
    b.add_argument("--seed", type=seed_int, default=0, help="base seed; a record's own seed wins (default 0)")
    b.add_argument(
        "--concurrency", type=positive_int, default=8, help="prompts rendered and labelled at once (default 8)"
    )
    b.add_argument(
        "--max-cost",
        type=bounded_float(0.0, 1e9),
        default=0.0,
        help="stop starting samples past this USD spend (0: none)",
    )
    b.add_argument(
        "--allow-demo-labeller",
        action="store_true",
        help="label with the embedded demo model anyway (checks the pipeline; the labels are noise)",
    )
    b.add_argument("--retry-failed", action="store_true", help="run the failed prompts of --output again")
    b.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_mixed_settings_option(b)
    add_render_options(b, RenderSettings())
    add_model_options(b)
    b.set_defaults(func=run_build_data)


def _register_trainers(tsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `unveil train sft`, `grpo` and `esd`, whose flags are their settings' fields."""
    from training.config import GRPOSettings, SFTSettings
    from training.esd import ESDSettings
    from training.reward import RewardSettings

    s = tsub.add_parser("sft", help="supervised fine-tuning (LoRA) of the refiner with TRL's SFTTrainer")
    s.add_argument("--config", help="TOML/YAML/JSON settings file (flags override it)")
    _add_fields(s, SFTSettings)
    s.set_defaults(func=run_sft_command)

    g = tsub.add_parser(
        "grpo",
        help="GRPO of the refiner on the single-generation surrogate reward",
        description="Multi-GPU: accelerate launch --num_processes N -m unveil.cli train grpo ...",
    )
    g.add_argument("--config", help="TOML/YAML/JSON settings file (flags override it)")
    _add_fields(g, GRPOSettings)
    _add_fields(g, RewardSettings, prefix="reward_")
    g.set_defaults(func=run_grpo_command)

    e = tsub.add_parser(
        "esd",
        help="erase a concept from an SD 1.x UNet (ESD-u, the IPR paper's ESD baseline)",
        description="Fine-tunes the non-cross-attention UNet layers with negative guidance 1 "
        "(Gandikota et al. 2023) and writes a UNet state dict for the "
        "esd:<model>?unet=<file> generator.",
    )
    _add_fields(e, ESDSettings)
    e.set_defaults(func=run_esd_command)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `unveil train` and its subcommands."""
    p = sub.add_parser("train", help="train the IPR prompt refiner (dataset, SFT, GRPO)")
    tsub = p.add_subparsers(dest="train_command", required=True)
    _register_build_data(tsub)
    _register_trainers(tsub)


def _settings(args: argparse.Namespace, cls: type[S]) -> S:
    """`cls` from its defaults, then the `--config` file, then the flags given."""
    from training.config import build_settings, read_config_file

    config = read_config_file(args.config) if args.config else {}
    return build_settings(cls, config, _overrides(args, cls))


def run_build_data(args: argparse.Namespace) -> int:
    """Run `unveil train build-data`."""
    from agents.spec import DEFAULT_SPEC
    from tools.image_store import get_image_store
    from training.build_data import BuildDataSettings, build_data_settings, build_sft_records, prompt_items
    from unveil.commands.common import warn_if_demo

    check_generator(args.generator)  # a missing 't2i' extra fails here, before any prompt is labelled
    gateway = setup_gateway(args)
    roles = dict(item.split("=", 1) for item in args.role_model if "=" in item)
    unknown = sorted(set(roles) - {"labeller"})
    if unknown:
        raise CommandLineError(f"unknown role(s) {', '.join(unknown)}; valid roles: labeller")
    labeller = args.labeller or roles.get("labeller") or args.model or DEFAULT_SPEC
    warn_if_demo([labeller])
    if not gateway.vision(labeller):
        print(f"warning: {labeller} does not take images; the labeller should be a vision model", file=sys.stderr)
    settings = BuildDataSettings(
        labeller=labeller,
        generator=args.generator,
        seed=args.seed,
        concurrency=args.concurrency,
        max_cost_usd=args.max_cost,
        allow_demo_labeller=args.allow_demo_labeller,
        **render_overrides(args),
    )
    items = prompt_items(args.prompts, field=args.prompt_field, limit=args.limit)
    store = get_image_store(args.image_store or None)
    identity = output_identity(args, "train build-data", build_data_settings(settings))
    summary = asyncio.run(
        build_sft_records(
            items,
            args.output,
            settings,
            store=store,
            retry_failed=args.retry_failed,
            progress=not args.no_progress,
            identity=identity,
            inputs=(args.prompts,),
        )
    )
    total = gateway.usage["total"]
    print(
        f"labeller calls={total['calls']} cache_hits={total['cache_hits']} cost=${total['cost_usd']:.4f}",
        file=sys.stderr,
    )
    return report_batch(summary, args.output, done="labelled")


def run_sft_command(args: argparse.Namespace) -> int:
    """Run `unveil train sft`."""
    require_extra("train", "unveil train sft")
    from training.config import SFTSettings
    from training.sft import run_sft

    result = run_sft(_settings(args, SFTSettings))
    print(json.dumps(result, indent=1, default=str))
    return 0


def run_grpo_command(args: argparse.Namespace) -> int:
    """Run `unveil train grpo`."""
    require_extra("train", "unveil train grpo")
    from training.config import GRPOSettings
    from training.grpo import run_grpo

    settings = _settings(args, GRPOSettings)
    check_generator(settings.generator)  # the reward renders
    if settings.scorer == "tools":  # the reward's CLIP score is open_clip's
        require_extra("scores", "unveil train grpo (scorer 'tools': the reward's CLIP score)", ("open_clip",))
    result = run_grpo(settings)
    print(json.dumps(result, indent=1, default=str))
    return 0


def run_esd_command(args: argparse.Namespace) -> int:
    """Run `unveil train esd`."""
    require_extra("t2i", "unveil train esd")
    from training.esd import ESDSettings, run_esd

    result = run_esd(ESDSettings(**_overrides(args, ESDSettings)))
    print(
        json.dumps(
            {k: v for k, v in result.items() if k != "losses"} | {"final_loss": result["losses"][-1]},
            indent=1,
            default=str,
        )
    )
    print(f"use it with: --generator '{result['generator_spec']}'", file=sys.stderr)
    return 0
