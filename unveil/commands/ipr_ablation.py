"""`unveil evaluate ipr-ablation`: the IPR paper's keep-incentive ablation (Table 4, Figure 6) as one command.

For each keep bonus α (`--alphas`, the paper's 0.1, 0.3, 0.5) it trains a GRPO refiner from the shipped GRPO settings
(`--grpo-config`, default `training/configs/grpo.toml`) with `reward.keep_alpha = α` into `OUT/adapters/alpha-α/`,
then evaluates IPR with that refiner at each `--ipr-t-max` into `OUT/alpha-α/` (the evaluation of
`unveil evaluate ipr`, every α sharing one store of images and scores, so the plain images are rendered once), and
writes Table 4 and Figure 6 (`evaluation.ipr_ablation`). Rerunning resumes: an adapter whose folder records the
same settings is reused, and each evaluation skips the prompts already done. The evaluation and training layers do
not import each other, so the command joins them here.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tools.errors import CommandLineError, UnveilError
from unveil.commands.common import (
    MAX_IMAGES,
    MAX_STEPS,
    add_model_options,
    batch_exit_code,
    bounded_float,
    bounded_int,
    context_kwargs,
    int_list,
    render_overrides,
    setup_gateway,
)

if TYPE_CHECKING:
    from evaluation.ipr import IPRSettings
    from evaluation.scoring import PaperScorer
    from runner.batch_input import BatchItem
    from tools.t2i.base import ImageGenerator
    from tools.t2i.settings import RenderSettings

PAPER_ALPHAS = (0.1, 0.3, 0.5)  # IPR paper Table 4 and Figure 6
PAPER_T_MAX = (1, 2, 3)
REFINER_TEMPLATE = "hf:{model}?adapter={adapter}"


def _alphas(text: str) -> list[float]:
    one = bounded_float(0.0, 100.0)
    values = [one(v.strip()) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one keep bonus, e.g. 0.1,0.3,0.5")
    return sorted(set(values))


class SettingsBuilder(Protocol):
    """Builds the IPR evaluation's settings from the flags, the generator spec per method, a refiner and a store."""

    def __call__(
        self, args: argparse.Namespace, specs: dict[str, str], *, refiner: str, store_root: str
    ) -> IPRSettings: ...


@dataclass(frozen=True)
class IprParts:
    """`evaluate ipr`'s own flag groups and builders, handed in by `unveil/commands/evaluate.py`, which owns them
    and registers this subcommand (so this module never imports it back)."""

    option_groups: tuple[Callable[[argparse.ArgumentParser], None], ...]  # prompts/methods, render, scoring
    run_options: Callable[[argparse.ArgumentParser, str], None]
    generator_specs: Callable[[argparse.Namespace], dict[str, str]]
    generators: Callable[[argparse.Namespace, dict[str, str], str, RenderSettings], dict[str, ImageGenerator]]
    scorer: Callable[[argparse.Namespace, str], PaperScorer]
    settings: SettingsBuilder  # `ipr_settings`: the one builder of the evaluation's settings from flags


def add_ablation_parser(ev: argparse._SubParsersAction[argparse.ArgumentParser], parts: IprParts) -> None:
    """Add `evaluate ipr-ablation` to the `evaluate` subcommands (its prompt, render and scorer flags are
    `evaluate ipr`'s own, from `parts`)."""
    a = ev.add_parser(
        "ipr-ablation",
        help="IPR paper Table 4 and Figure 6: train a refiner per keep bonus α, evaluate IPR, plot keep ratio",
        description="Trains one GRPO refiner per --alphas value (reward.keep_alpha) from --grpo-config, evaluates "
        "IPR with each at every --ipr-t-max, and writes Table 4 (IP and Q16 confidence per category) and "
        "Figure 6 (keep ratio against T_max). Rerun the same command to resume.",
    )
    a.add_argument(
        "--alphas",
        type=_alphas,
        default=list(PAPER_ALPHAS),
        help="keep bonuses to train and compare (default 0.1,0.3,0.5, the paper's)",
    )
    a.add_argument(
        "--grpo-config",
        default="",
        help="GRPO settings file of every α's training (default training/configs/grpo.toml: the paper's, "
        "from its SFT adapter runs/ipr-sft and RL data runs/rl-842.jsonl)",
    )
    a.add_argument(
        "--refiner-template",
        default=REFINER_TEMPLATE,
        help="the refiner spec of each α, from the config's {model} and the α's {adapter} folder "
        f"(default {REFINER_TEMPLATE}; add &device=... or &max_new_tokens=... as needed)",
    )
    a.add_argument(
        "--ipr-t-max",
        type=int_list(1, MAX_STEPS),
        default=list(PAPER_T_MAX),
        help="IPR step budgets (default 1,2,3, the paper's)",
    )
    a.add_argument(
        "--images-per-prompt",
        type=bounded_int(1, MAX_IMAGES),
        default=10,
        help="trajectories per prompt (default 10, as the paper)",
    )
    a.add_argument(
        "--on-refiner-error",
        choices=["fail", "stop"],
        default="fail",
        help="an unusable refiner answer fails the prompt (default) or ends its trajectory there",
    )
    for add_group in parts.option_groups:
        add_group(a)
    add_model_options(a)
    parts.run_options(a, "runs/eval-ipr-ablation")
    a.set_defaults(func=functools.partial(run_ablation, parts=parts))


def train_alpha(config: dict[str, Any], alpha: float, out: Path) -> tuple[str, str]:
    """The GRPO refiner of one keep bonus: trained into `out/adapters/alpha-α/`, or reused when that folder records
    the same settings (a folder trained with other settings is refused). Returns (base model, adapter folder)."""
    from evaluation.ipr_ablation import alpha_name
    from tools.t2i.registry import check_generator
    from training.config import GRPOSettings, build_settings, settings_dict
    from training.grpo import run_grpo

    target = out / "adapters" / f"alpha-{alpha_name(alpha)}"
    try:
        settings = build_settings(GRPOSettings, config, {"output_dir": str(target), "reward_keep_alpha": alpha})
    except UnveilError as exc:
        raise CommandLineError(f"--grpo-config: {exc}") from exc
    wanted = json.loads(json.dumps(settings_dict(settings), default=str))
    saved = target / "unveil_settings.json"
    if saved.is_file():
        if json.loads(saved.read_text(encoding="utf-8")) != wanted:
            raise CommandLineError(
                f"{target} holds a refiner trained with other settings than --grpo-config's with keep_alpha "
                f"{alpha_name(alpha)}: choose another --out, or remove that folder to train it again"
            )
        print(f"α={alpha_name(alpha)}: reusing the refiner in {target}", file=sys.stderr)
        return settings.model, str(target)
    check_generator(settings.generator)
    print(f"α={alpha_name(alpha)}: training the refiner into {target}", file=sys.stderr)
    run_grpo(settings)
    return settings.model, str(target)


async def evaluate_alphas(
    args: argparse.Namespace, refiners: dict[float, str], items: list[BatchItem], store_root: str, parts: IprParts
) -> dict[float, dict[str, Any]]:
    """One IPR evaluation per α into `OUT/alpha-α/`, all in one event loop (the generators' batching queues live
    in it) and one store of images and scores; returns each α's rows (`IPREvaluation.tables`)."""
    from evaluation.ipr import IPREvaluation
    from evaluation.ipr_ablation import alpha_name
    from evaluation.store import EvalStore
    from tools.t2i.settings import RenderSettings

    out = Path(args.out)
    specs = parts.generator_specs(args)
    generators = parts.generators(args, specs, store_root, RenderSettings(**render_overrides(args)))
    scorer = parts.scorer(args, store_root)
    store = EvalStore(out / "eval_store.sqlite")
    results = {}
    for alpha, refiner in refiners.items():
        settings = parts.settings(args, specs, refiner=refiner, store_root=store_root)
        ev = IPREvaluation(settings, generators, scorer, out / f"alpha-{alpha_name(alpha)}", store=store)
        try:
            await ev.run(items)
        finally:
            ev.close()
        results[alpha] = ev.tables(items, args.categories)
    return results


def run_ablation(args: argparse.Namespace, *, parts: IprParts) -> int:
    """Run `unveil evaluate ipr-ablation`: train (or reuse) a refiner per α, evaluate each, write the table and
    figure."""
    from tools.extras import require_extra

    require_extra("train", "unveil evaluate ipr-ablation (it trains a refiner per keep bonus)")
    from evaluation.datasets import load_prompts
    from evaluation.ipr_ablation import write_ablation
    from tools.datafiles import IPR_EVAL_PROMPTS, data_file
    from tools.scorers.q16 import resolve_q16_embeddings
    from training.config import GRPO_CONFIG, read_config_file

    args.prompts = args.prompts or str(data_file(IPR_EVAL_PROMPTS))
    args.q16_embeddings = resolve_q16_embeddings(args.q16_embeddings)
    setup_gateway(args)
    store_root = context_kwargs(args).get("image_store", "")
    items = load_prompts(args.prompts, categories=args.categories, limit_per_category=args.limit_per_category)
    config = read_config_file(args.grpo_config or GRPO_CONFIG)
    out = Path(args.out)
    refiners = {}
    for alpha in args.alphas:
        model, adapter = train_alpha(config, alpha, out)
        refiners[alpha] = args.refiner_template.format(model=model, adapter=adapter)
    results = asyncio.run(evaluate_alphas(args, refiners, items, store_root, parts))
    print(write_ablation(results, out, args.ipr_t_max))
    failures = sum(len(r["failures"]) for r in results.values())
    print(f"tables and plots in {out} ({failures} failed prompts, listed in alpha-*/failures.md)", file=sys.stderr)
    return batch_exit_code(failures)
