"""Quality gates of the evaluate commands (`--fail-under METRIC=VALUE`): the pass/fail of a CI job.

A gate names a quality metric where higher is better and the least value every configuration must reach. It is
checked on the `overall` row of every configuration the run scored (each dataset x detector x method for
detection; each method x variant x T_max for IPR). A configuration without a value for the metric (no sample
scored, or a keep ratio of a variant that never refines) is skipped; a gate that no configuration could be
checked against fails, so a run that scored nothing never passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tools.errors import UnveilError

# IPR's IP (inappropriate probability) is lower-is-better: its gate is on the safe share, 1 - IP.
IPR_GATES = {"safe": "share of images not inappropriate (1 - IP)", "blip": "BLIP score", "keep_ratio": "keep ratio"}


class GateError(UnveilError, ValueError):
    """A `--fail-under` value that names no metric of the command, or is not METRIC=NUMBER."""


@dataclass(frozen=True)
class Gate:
    """One `--fail-under METRIC=VALUE`."""

    metric: str
    least: float


@dataclass(frozen=True)
class GateMiss:
    """A configuration whose metric fell below its gate (`value` None: no configuration had a value)."""

    gate: Gate
    config: str
    value: float | None

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.gate.metric}: no configuration has a value (gate {self.gate.least:g})"
        return f"{self.config}: {self.gate.metric} = {self.value:.4f} is under {self.gate.least:g}"


def detection_gates(beta: float) -> dict[str, str]:
    """The metrics `evaluate detection` can gate on (the F-score is named by its beta, e.g. `f2`)."""
    return {
        "accuracy": "accuracy",
        "precision": "precision",
        "recall": "recall",
        f"f{beta:g}": f"F-score with beta {beta:g}",
    }


def parse_gates(values: Sequence[str], valid: Iterable[str]) -> list[Gate]:
    """`METRIC=VALUE` strings as gates; an unknown metric or a value that is no finite number is refused, naming
    the valid metrics."""
    names = list(valid)
    gates = []
    for text in values:
        metric, sep, number = text.partition("=")
        metric = metric.strip().lower()
        if not sep or metric not in names:
            raise GateError(f"--fail-under {text!r}: expected METRIC=VALUE with METRIC one of {', '.join(names)}")
        try:
            least = float(number)
        except ValueError:
            raise GateError(f"--fail-under {text!r}: {number!r} is not a number") from None
        if not math.isfinite(least):
            raise GateError(f"--fail-under {text!r}: expected a finite number")
        gates.append(Gate(metric, least))
    return gates


def _value(row: dict[str, Any], metric: str) -> float | None:
    """A row's value of a gate's metric (IPR's `safe` is 1 - IP), or None where it has none."""
    raw = (
        (1.0 - row["ip"] if isinstance(row.get("ip"), (int, float)) else None) if metric == "safe" else row.get(metric)
    )
    if not isinstance(raw, (int, float)) or isinstance(raw, bool) or not math.isfinite(raw):
        return None
    return float(raw)


def check_gates(
    gates: Sequence[Gate], rows: Sequence[dict[str, Any]], label: Callable[[dict[str, Any]], str]
) -> list[GateMiss]:
    """Every miss of `gates` on the overall `rows` (one per configuration; `label(row)` names it)."""
    misses: list[GateMiss] = []
    for gate in gates:
        checked = 0
        for row in rows:
            value = _value(row, gate.metric)
            if value is None:
                continue
            checked += 1
            if value < gate.least:
                misses.append(GateMiss(gate, str(label(row)), value))
        if not checked:
            misses.append(GateMiss(gate, "", None))
    return misses


def detection_misses(gates: Sequence[Gate], rows: Sequence[dict[str, Any]]) -> list[GateMiss]:
    """The misses of a detection run's long rows (their `overall` bin per configuration)."""
    overall = [r for r in rows if r.get("bin") == "overall"]
    return check_gates(
        gates,
        overall,
        lambda r: (
            f"{r['dataset']} {r['method']}"
            + (f" (l_max={r['l_max']})" if r.get("l_max") else "")
            + f" [{r['detector']}]"
        ),
    )


def ipr_misses(gates: Sequence[Gate], rows: Sequence[dict[str, Any]]) -> list[GateMiss]:
    """The misses of an IPR run's long rows (their `overall` category per method, variant and budget)."""
    overall = [r for r in rows if r.get("category") == "overall"]
    return check_gates(gates, overall, lambda r: r["label"])
