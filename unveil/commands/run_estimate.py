"""The dry run's estimate of a job (`unveil run --dry-run`) and the cap note a capped command prints before it
starts: samples times calls and tokens per sample by method, each line priced at its own model's rate (TAG's calls
and tokens from `graphs.tag.cost`, which bench/tag_calls.py checks)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from tools.env import env_str
from unveil.commands.inputs import EXAMPLES, RunFileError, named_datasets

# Tokens a call is assumed to take (prompt, answer) where no finer model of the calls exists (vanilla, guards, IPR,
# CTD); TAG's calls and tokens come from `graphs.tag.cost`, which bench/tag_calls.py checks.
TOKENS_PER_CALL = (1500, 300)


@dataclass
class Estimate:
    """One line of a job's estimate: what runs, on how many samples, and per sample its model calls and
    (input, output) tokens on `model`; `note` says what the figures assume."""

    what: str
    samples: int
    calls: int
    model: str
    tokens: tuple[int, int]
    note: str = ""

    @property
    def cost(self) -> float:
        """The dollars of every sample at `model`'s rate in the price table (0 for local models)."""
        from agents.spec import ModelSpec
        from agents.usage import cost_of

        parsed = ModelSpec.parse(self.model)
        return self.samples * cost_of(parsed.provider, parsed.model, *self.tokens)


def _flat(what: str, samples: int, calls: int, model: str) -> Estimate:
    """An estimate of `calls` calls a sample at `TOKENS_PER_CALL` each."""
    return Estimate(what, samples, calls, model, (calls * TOKENS_PER_CALL[0], calls * TOKENS_PER_CALL[1]))


def _tag(args: argparse.Namespace, what: str, samples: int, model: str, l_max: int | None) -> list[Estimate]:
    """TAG's worst case a sample under the job's reading (`graphs.tag.cost`): nothing toxic and the roots
    extractor's cap of roots a tree, one line per model its roles run on (`--role-model`); the note gives the
    one-root case beside it."""
    from agents.tag.types import MAX_ROOTS
    from graphs.tag.context import TagContext
    from graphs.tag.cost import TagCost, worst_case, worst_case_by_role
    from runner.detect import detection_context

    reading = {k: getattr(args, k, None) for k in ("prune", "roots_mode")}
    models = {"model": model}
    for item in getattr(args, "role_model", None) or []:  # --role-model ROLE=SPEC: TAG's roles on their own models
        role, _, spec = item.partition("=")
        if f"{role.strip()}_model" in TagContext.__dataclass_fields__:
            models[f"{role.strip()}_model"] = spec.strip()
    ctx = detection_context(
        "tag",
        models,
        l_max=l_max,
        k_max=getattr(args, "k_max", None),
        children=getattr(args, "children", None),
        screen=bool(getattr(args, "screen", False)),
        announce=False,
        reading=reading,
    )
    assert isinstance(ctx, TagContext)  # the method is tag
    one = worst_case(ctx, roots=1)
    note = f"prune={ctx.prune}, {MAX_ROOTS} roots a tree; {one.calls} calls, {one.tokens:,} tokens with 1 root"
    by_model: dict[str, dict[str, TagCost]] = {}
    for role, cost in worst_case_by_role(ctx).items():
        by_model.setdefault(ctx.spec_for(role), {})[role] = cost
    rows = []
    for spec, costs in by_model.items():
        total = sum(costs.values(), TagCost())
        label = what if len(by_model) == 1 else f"{what} ({', '.join(costs)})"
        rows.append(Estimate(label, samples, total.calls, spec, (total.input_tokens, total.output_tokens), note))
    return rows


def detection(args: argparse.Namespace, method: str, samples: int, model: str, l_max: int | None) -> list[Estimate]:
    """A detection method's estimate on `samples` samples (TAG at most; one call for vanilla and guards)."""
    if method == "tag":
        return _tag(args, f"tag l_max={l_max}" if l_max else "tag", samples, model, l_max)
    return [_flat(method, samples, 1, model)]


def _lines(path: str | None) -> int:
    """Non-empty lines of a JSONL input, counted as the batch reader reads them (`tools.jsonl_files.iter_lines`:
    a regular file only, each line capped, none held whole); 0 when it cannot be found or opened. A FIFO or a device
    (`/dev/zero` read until memory ran out) is a `RunFileError` naming it."""
    from tools.jsonl_files import iter_lines
    from tools.safe_files import UnreadableFileError

    try:
        return sum(1 for _ in iter_lines(path or ""))
    except UnreadableFileError as exc:
        raise RunFileError(f"input: {exc}") from exc
    except OSError:
        return 0


def _main_model(args: argparse.Namespace) -> str:
    """The spec most of a job's calls go to: --model, else $UNVEIL_MODEL, else the default."""

    from agents.spec import DEFAULT_SPEC

    return str(getattr(args, "model", None) or env_str("UNVEIL_MODEL") or DEFAULT_SPEC)


def _evaluate_detection(args: argparse.Namespace) -> list[Estimate]:
    """One estimate per configuration of `evaluate detection`."""
    from evaluation.datasets import load_detection

    total = 0
    for path, fmt in named_datasets(args).values():
        items = load_detection(path, fmt, include_benign=args.include_benign)
        total += len(items[: args.limit] if args.limit else items)
    rows = []
    for model in args.detectors or [_main_model(args)]:
        for method in args.methods:
            depths = [args.l_max, *args.l_max_ablation] if method == "tag" else [None]
            rows += [row for d in depths for row in detection(args, method, total, model, d)]
    return rows


def _evaluate_ipr(args: argparse.Namespace) -> list[Estimate]:
    """One estimate per method of `evaluate ipr` (generators and scorers make no model calls)."""
    from evaluation.datasets import load_prompts
    from tools.datafiles import IPR_EVAL_PROMPTS, data_file

    items = load_prompts(
        args.prompts or data_file(IPR_EVAL_PROMPTS),
        categories=args.categories,
        limit_per_category=args.limit_per_category,
    )
    per = (1 if args.with_rewriter else 0) + args.images_per_prompt * max(args.ipr_t_max, default=0)
    return [_flat(f"{m}", len(items), per, args.refiner_model or _main_model(args)) for m in args.methods]


def _generate(args: argparse.Namespace) -> list[Estimate]:
    """`generate`: the scene's own calls on the main model, each blind judge's on its own model (`--blind-models`,
    cycled), and the MTC reference's TAG where one is named."""
    rounds, blind = args.max_rounds or 3, 4 if args.n_blind is None else args.n_blind
    rows = [_flat("ctd", args.n, 1 + 2 * rounds, _main_model(args))]
    specs = [s.strip() for s in (args.blind_models or "").split(",") if s.strip()] or [_main_model(args)]
    judges = [specs[i % len(specs)] for i in range(blind)]
    rows += [_flat("ctd blind judges", args.n, rounds * judges.count(s), s) for s in dict.fromkeys(judges)]
    if args.mtc_reference:
        rows += _tag(args, "ctd mtc reference (tag)", args.n, args.mtc_reference, args.mtc_l_max)
    return rows


def estimate(args: argparse.Namespace) -> list[Estimate]:
    """The estimates of one job: sample counts from its inputs, calls and tokens per sample by method (an upper
    bound for TAG and IPR, which can stop early; cache hits cost nothing)."""
    from tools.t2i.defaults import IPR_T_MAX

    if args.command == "detect":
        n = 1 if args.text else _lines(args.input) if args.input else _lines(str(_examples()))
        return detection(args, args.method, n, _main_model(args), args.l_max)
    if args.command == "refine":
        n = _lines(args.input) if args.input else 1
        return [_flat("ipr", n, args.t_max if args.t_max is not None else IPR_T_MAX, args.refiner or _main_model(args))]
    if args.command == "generate":
        return _generate(args)
    return _evaluate_detection(args) if args.evaluation == "detection" else _evaluate_ipr(args)


def _examples() -> Path:
    """The bundled example pairs `unveil detect` runs without --input."""
    return EXAMPLES


def over_cap(args: argparse.Namespace, calls: int, cost: float) -> str | None:
    """A warning when a job's estimate exceeds its own --max-calls or --max-cost, else None."""
    max_calls, max_cost = getattr(args, "max_calls", None), getattr(args, "max_cost", None)
    if max_cost is not None and cost > max_cost:
        return f"estimate ${cost:.2f} exceeds --max-cost {max_cost:g}: the job stops starting samples at the cap"
    if max_calls is not None and calls > max_calls:
        return f"estimate {calls} calls exceeds --max-calls {max_calls}: the job stops starting samples at the cap"
    return None


def cap_note(args: argparse.Namespace) -> str | None:
    """The line a command run with --max-cost or --max-calls prints before it starts: the dry run's estimate of
    the whole command against its caps (None where it cannot be worked out; the command then says why itself)."""
    try:
        rows = estimate(args)
    except Exception:  # noqa: BLE001 - the note is advice; the command runs and reports its own input's errors
        return None
    calls, cost = sum(r.samples * r.calls for r in rows), sum(r.cost for r in rows)
    warning = over_cap(args, calls, cost)
    return f"estimate: at most {calls} model calls, about ${cost:.2f} (as `unveil run --dry-run` prices it)" + (
        f"; {warning}" if warning else "; within the caps"
    )
