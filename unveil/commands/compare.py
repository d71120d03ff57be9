"""`unveil compare A B [C ...]`: detection result files side by side on the samples they share
(`evaluation.compare_runs`): the verdicts that differ, accuracy and F-score per category and MTC bin (with B-minus-A
deltas for two files, a matrix of runs for more), the calls, cache hits and cost of each; a self-contained HTML
report (`--html`) and gates a CI job can fail on (`--fail-under`, `--fail-if-worse-than`, `evaluation.compare_gates`).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from tools.errors import CommandLineError
from unveil.commands.common import bounded_float, json_text, new_file_path

GATE_EXIT = 3  # as the evaluate commands' --fail-under


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `compare` subcommand."""
    p = sub.add_parser(
        "compare",
        help="compare detection result files: differing verdicts, metrics per group, cost; HTML report, CI gates",
        description="Each RUN is a results file of `unveil detect --input` or a run file of `unveil evaluate "
        "detection` (OUT/runs/DATASET/*.jsonl); they are compared on the samples all of them finished. Metrics need "
        "the records' ground truth (`label`, which detect keeps from its input lines). Two files: B minus A; more: "
        "a matrix, groups as rows and runs as columns. Exit 0; 1 when the files cannot be compared (missing, not "
        f"results, no sample in common); {GATE_EXIT} when a gate was missed.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="results files; the first is the baseline")
    p.add_argument("--only-disagreements", action="store_true", help="list only the samples whose verdicts differ")
    p.add_argument("--beta", type=bounded_float(0.0, 100.0, above=True), default=2.0, help="F-score beta (default 2)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument(
        "--html",
        metavar="FILE",
        type=new_file_path,
        help="also write the comparison as one self-contained HTML page (no server, no external asset)",
    )
    p.add_argument(
        "--fail-under",
        action="append",
        default=[],
        metavar="METRIC[@LEVEL=NAME]=VALUE",
        help=f"exit {GATE_EXIT} when a run other than the baseline is under VALUE on METRIC (accuracy, precision, "
        "recall, f2 with the default beta), overall or in one group: f2=0.7, f2@category=drugs=0.7, "
        "recall@bin=high=0.5 (repeatable)",
    )
    p.add_argument(
        "--fail-if-worse-than",
        metavar="RUN",
        help=f"the baseline results file (added as the first run unless given as one): exit {GATE_EXIT} when another "
        "run is worse on --worse-on by more than --by",
    )
    p.add_argument(
        "--by",
        type=bounded_float(0.0, 1.0),
        default=0.0,
        help="how much worse than the baseline a run may be (default 0)",
    )
    p.add_argument(
        "--worse-on",
        action="append",
        default=[],
        metavar="METRIC[@LEVEL=NAME]",
        help="what --fail-if-worse-than compares (repeatable; default the F-score, overall)",
    )
    p.set_defaults(func=run)


def _num(value: object, signed: bool = False) -> str:
    """A metric for the table: 4 decimals, `-` for a missing value."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _group_name(g: dict[str, Any]) -> str:
    """A group row's name: `overall`, `category=NAME` or `bin=BIN`."""
    return "overall" if g["group"] == "overall" else f"{g['group']}={g['value']}"


def _width(groups: list[dict[str, Any]]) -> int:
    """The group column's width: its longest name, whole (a category is never cut)."""
    return max([24, *(len(_group_name(g)) for g in groups)])


def format_comparison(result: dict[str, Any], only_disagreements: bool) -> str:
    """Two files (the `as_pair` form) as text: counts, the metric table, cost, then the samples."""
    from evaluation.compare_runs import NO_LABELS

    f = f"F{result['beta']:g}"
    lines = [
        f"A: {result['a_name']}  ({result['a']})",
        f"B: {result['b_name']}  ({result['b']})",
        f"{result['shared']} shared samples ({result['only_a']} only in A, {result['only_b']} only in B); "
        f"{result['disagreements']} verdicts differ",
        "",
    ]
    if result["labelled"]:
        w = _width(result["groups"])
        lines.append(
            f"{'group':<{w}} {'n':>5} {'acc A':>8} {'acc B':>8} {'Δacc':>8} {f + ' A':>8} {f + ' B':>8} {'Δ' + f:>8}"
        )
        for g in result["groups"]:
            lines.append(
                f"{_group_name(g):<{w}} {g['n']:>5} {_num(g['a_accuracy']):>8} {_num(g['b_accuracy']):>8} "
                f"{_num(g['delta_accuracy'], True):>8} {_num(g['a_f']):>8} {_num(g['b_f']):>8} "
                f"{_num(g['delta_f'], True):>8}"
            )
    else:
        lines.append(f"note: {NO_LABELS}")
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


def format_matrix(result: dict[str, Any], only_disagreements: bool, baseline: int) -> str:
    """N files (a `compare_many` result) as text: the runs, then F-score and accuracy with groups as rows and runs as
    columns, then the samples with each run's verdict."""
    from evaluation.compare_runs import NO_LABELS

    lines = []
    for k, r in enumerate(result["runs"]):
        mark = " (baseline)" if k == baseline else ""
        lines.append(
            f"[{k + 1}] {r['name']}{mark}  ({r['path']}): {r['only']} not shared; {r['calls']} calls, "
            f"{r['cache_hits']} cache hits, ${r['cost_usd']:.4f}"
        )
    lines += [f"{result['shared']} shared samples; {result['disagreements']} where the verdicts differ", ""]
    cols = "".join(f"{'[' + str(k + 1) + ']':>9}" for k in range(len(result["runs"])))
    if result["labelled"]:
        w = _width(result["groups"])
        for key, title in (("f", f"F{result['beta']:g}"), ("accuracy", "accuracy")):
            lines.append(f"{title:<{w}} {'n':>5}{cols}")
            for g in result["groups"]:
                cells = "".join(f"{_num(s[key]):>9}" for s in g["runs"])
                lines.append(f"{_group_name(g):<{w}} {g['n']:>5}{cells}")
            lines.append("")
    else:
        lines += [f"note: {NO_LABELS}", ""]
    lines.append(f"id{cols}  label  category  bin")
    for s in result["samples"]:
        if only_disagreements and not s["differ"]:
            continue
        verdicts = "".join(f"{'toxic' if t else 'safe':>9}" for t in s["toxic"])
        lines.append(
            f"{'*' if s['differ'] else ' '}{s['id']}{verdicts}  {'-' if s['label'] is None else s['label']}  "
            f"{s['category'] or '-'}  {s['bin'] or '-'}"
        )
    return "\n".join(lines)


def _paths(args: argparse.Namespace) -> tuple[list[str], int]:
    """The files to compare and the baseline's index: the --fail-if-worse-than file (put first unless it is one
    of the runs), else the first run."""
    paths = list(args.runs)
    baseline = 0
    if args.fail_if_worse_than:
        given = Path(args.fail_if_worse_than).resolve()
        same = [k for k, p in enumerate(paths) if Path(p).resolve() == given]
        if same:
            baseline = same[0]
        else:
            paths.insert(0, args.fail_if_worse_than)
    elif args.worse_on or args.by:
        raise CommandLineError("--worse-on and --by need --fail-if-worse-than RUN (the baseline)")
    if len(paths) < 2:
        raise CommandLineError("give two results files or more (or one with --fail-if-worse-than BASELINE)")
    return paths, baseline


def _disjoint(result: dict[str, Any]) -> str:
    """Why nothing could be compared: the files share no finished sample."""
    sizes = ", ".join(f"{r['path']!r} {r['records']}" for r in result["runs"])
    return (
        f"the files share no finished sample (finished records: {sizes}); compare results of the same input "
        "(the same ids)"
    )


def run(args: argparse.Namespace) -> int:
    """Compare, print, write the HTML report, then check the gates (exit `GATE_EXIT` on a miss)."""
    from evaluation.compare_gates import Target, floor_misses, parse_floor_gates, parse_target, worse_misses
    from evaluation.compare_html import html_report
    from evaluation.compare_runs import CompareError, as_pair, compare_many
    from tools.atomic_files import atomic_write_text

    paths, baseline = _paths(args)
    floors = parse_floor_gates(args.fail_under, args.beta)  # refused before any file is read
    targets = [parse_target(t, args.beta, "--worse-on") for t in args.worse_on] or [Target(f"f{args.beta:g}")]
    result = compare_many(list(paths), beta=args.beta)
    if not result["shared"]:
        raise CompareError(_disjoint(result))
    gated = bool(floors or args.fail_if_worse_than)
    checked = [k for k in range(len(paths)) if k != baseline]
    misses = floor_misses(result, floors, checked)
    if args.fail_if_worse_than:
        misses += worse_misses(result, targets, baseline, checked, args.by)
    if args.html:
        atomic_write_text(args.html, html_report(result, baseline=baseline, misses=misses if gated else None))
        print(f"HTML report written to {args.html}", file=sys.stderr)
    if args.only_disagreements:
        result["samples"] = [s for s in result["samples"] if s["differ"]]
    shown = as_pair(result) if len(paths) == 2 else {**result, "baseline": baseline}
    if args.json:
        print(json_text({**shown, "gate_misses": misses} if gated else shown))
    elif len(paths) == 2:
        print(format_comparison(shown, args.only_disagreements))
    else:
        print(format_matrix(result, args.only_disagreements, baseline))
    for miss in misses:
        print(f"gate missed: {miss}", file=sys.stderr)
    return GATE_EXIT if misses else 0
