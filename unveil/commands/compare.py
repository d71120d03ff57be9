"""`unveil compare A B`: two detection result files side by side on the samples they share
(`evaluation.compare_runs`): the verdicts that differ, accuracy and F-score deltas per category and MTC bin, and
the calls and cost of each."""

from __future__ import annotations

import argparse
import math
from typing import Any

from unveil.commands.common import bounded_float, json_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `compare` subcommand."""
    p = sub.add_parser(
        "compare",
        help="compare two detection result files: differing verdicts, metric deltas, cost",
        description="A and B are results of `unveil detect --input` or run files of `unveil evaluate detection` "
        "(OUT/runs/DATASET/*.jsonl). Metrics need the records' ground truth (`label`).",
    )
    p.add_argument("a", help="the first results file (the baseline)")
    p.add_argument("b", help="the second results file")
    p.add_argument("--only-disagreements", action="store_true", help="list only the samples whose verdicts differ")
    p.add_argument("--beta", type=bounded_float(0.0, 100.0, above=True), default=2.0, help="F-score beta (default 2)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=run)


def _num(value: object, signed: bool = False) -> str:
    """A metric for the table: 4 decimals, `-` for a missing value."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def format_comparison(result: dict[str, Any], only_disagreements: bool) -> str:
    """The comparison as text: counts, the metric table, cost, then the samples."""
    f = f"F{result['beta']:g}"
    lines = [
        f"A: {result['a']}",
        f"B: {result['b']}",
        f"{result['shared']} shared samples ({result['only_a']} only in A, {result['only_b']} only in B); "
        f"{result['disagreements']} verdicts differ",
        "",
        f"{'group':<24} {'n':>5} {'acc A':>8} {'acc B':>8} {'Δacc':>8} {f + ' A':>8} {f + ' B':>8} {'Δ' + f:>8}",
    ]
    for g in result["groups"]:
        name = "overall" if g["group"] == "overall" else f"{g['group']}={g['value']}"
        lines.append(
            f"{name[:24]:<24} {g['n']:>5} {_num(g['a_accuracy']):>8} {_num(g['b_accuracy']):>8} "
            f"{_num(g['delta_accuracy'], True):>8} {_num(g['a_f']):>8} {_num(g['b_f']):>8} "
            f"{_num(g['delta_f'], True):>8}"
        )
    for side in ("a", "b"):
        c = result["cost"][side]
        lines.append(f"{side.upper()}: {c['calls']} calls, {c['cache_hits']} cache hits, ${c['cost_usd']:.4f}")
    lines += ["", "id  A  B  label  category  bin"]
    for s in result["samples"]:
        if only_disagreements and not s["differ"]:
            continue
        mark = "*" if s["differ"] else " "
        verdict = {True: "toxic", False: "safe"}
        lines.append(
            f"{mark}{s['id']}  {verdict[s['a_toxic']]}  {verdict[s['b_toxic']]}  "
            f"{'-' if s['label'] is None else s['label']}  {s['category'] or '-'}  {s['bin'] or '-'}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the comparison."""
    from evaluation.compare_runs import compare_runs

    result = compare_runs(args.a, args.b, beta=args.beta)
    if args.only_disagreements:
        result["samples"] = [s for s in result["samples"] if s["differ"]]
    print(json_text(result) if args.json else format_comparison(result, args.only_disagreements))
    return 0
