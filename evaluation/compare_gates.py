"""The gates of `unveil compare`: a CI job's pass/fail on a comparison of detection result files.

Two kinds, both checked on the runs compared against the baseline (every run but the baseline, which is the
`--fail-if-worse-than` file, else the first one given):

- `--fail-under METRIC[@LEVEL=VALUE]=LEAST`: the metric of the group (`overall` without `@`; `category=drugs`,
  `bin=high`) must reach LEAST, e.g. `f2=0.7`, `f2@category=drugs=0.7`, `recall@bin=high=0.5`;
- `--fail-if-worse-than RUN --by DELTA`: each `--worse-on METRIC[@LEVEL=VALUE]` (default the F-score, overall) may
  fall at most DELTA below the baseline's.

A group with no labelled shared sample has no value: its gate is missed (a comparison that scored nothing never
passes). The metrics are those of `evaluate detection`'s gates: accuracy, precision, recall and the F-score named by
its beta (`f2` by default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluation import metrics
from evaluation.compare_runs import GROUP_LEVELS
from evaluation.gates import GateError, detection_gates


@dataclass(frozen=True)
class Target:
    """A metric of one group: `f2` overall, or `f2` in `category=drugs`."""

    metric: str
    level: str = "overall"
    value: str = "all"

    def __str__(self) -> str:
        """As written on the command line: `f2` or `f2@category=drugs`."""
        return self.metric if self.level == "overall" else f"{self.metric}@{self.level}={self.value}"


@dataclass(frozen=True)
class FloorGate:
    """One `--fail-under TARGET=LEAST`."""

    target: Target
    least: float


def parse_target(text: str, beta: float, flag: str) -> Target:
    """`METRIC` or `METRIC@LEVEL=VALUE` as a `Target`; an unknown metric or level is refused naming the valid ones."""
    names = list(detection_gates(beta))
    metric, at, where = text.strip().partition("@")
    metric = metric.strip().lower()
    if metric not in names:
        raise GateError(f"{flag} {text!r}: {metric!r} is not a metric; use one of {', '.join(names)}")
    if not at:
        return Target(metric)
    level, eq, value = where.partition("=")
    level, value = level.strip().lower(), value.strip()
    if level not in GROUP_LEVELS or not eq or not value:
        raise GateError(f"{flag} {text!r}: after '@' give LEVEL=VALUE with LEVEL one of {', '.join(GROUP_LEVELS)}")
    if level == "bin" and value not in metrics.MTC_BINS:
        raise GateError(f"{flag} {text!r}: an MTC bin is one of {', '.join(metrics.MTC_BINS)}")
    return Target(metric, level, value)


def parse_floor_gates(values: Sequence[str], beta: float) -> list[FloorGate]:
    """`--fail-under` values (`METRIC[@LEVEL=VALUE]=LEAST`) as gates; the number is what follows the last '='."""
    gates = []
    for text in values:
        spec, sep, number = text.rpartition("=")
        if not sep or not spec:
            raise GateError(
                f"--fail-under {text!r}: expected METRIC=VALUE or METRIC@LEVEL=NAME=VALUE (f2@category=drugs=0.7)"
            )
        try:
            least = float(number)
        except ValueError:
            raise GateError(f"--fail-under {text!r}: {number!r} is not a number") from None
        if not math.isfinite(least):
            raise GateError(f"--fail-under {text!r}: expected a finite number")
        gates.append(FloorGate(parse_target(spec, beta, "--fail-under"), least))
    return gates


def value_of(result: dict[str, Any], target: Target, run: int) -> float | None:
    """A run's value of a target in a `compare_many` result, or None where the group has no labelled sample."""
    key = "f" if target.metric.startswith("f") else target.metric
    for g in result["groups"]:
        if g["group"] == target.level and str(g["value"]) == target.value and g["n"]:
            raw = g["runs"][run][key]
            return float(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else None
    return None


def floor_misses(result: dict[str, Any], gates: Sequence[FloorGate], checked: Sequence[int]) -> list[str]:
    """One line per (gate, run) whose value is under the gate's least value or missing."""
    misses = []
    for gate in gates:
        for k in checked:
            name = result["runs"][k]["name"]
            value = value_of(result, gate.target, k)
            if value is None:
                misses.append(f"{name}: {gate.target} has no value (no labelled shared sample there)")
            elif value < gate.least:
                misses.append(f"{name}: {gate.target} = {value:.4f} is under {gate.least:g}")
    return misses


def worse_misses(
    result: dict[str, Any], targets: Sequence[Target], baseline: int, checked: Sequence[int], by: float
) -> list[str]:
    """One line per (target, run) that falls more than `by` below the baseline run (or has no value to compare)."""
    misses = []
    base_name = result["runs"][baseline]["name"]
    for target in targets:
        base = value_of(result, target, baseline)
        for k in checked:
            name = result["runs"][k]["name"]
            value = value_of(result, target, k)
            if base is None or value is None:
                misses.append(f"{name}: {target} cannot be compared with the baseline (no labelled shared sample)")
            elif value < base - by - 1e-12:  # a float's last bit is no regression
                misses.append(
                    f"{name}: {target} = {value:.4f} is worse than the baseline's {base:.4f} ({base_name}) "
                    f"by {base - value:.4f}, more than {by:g}"
                )
    return misses
