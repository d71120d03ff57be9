"""Spending caps of the batch commands (`--max-calls`, `--max-cost`): what a run's records spent, against the caps.

The cap sums the records' own usage, not a process-wide counter: records are the values that say what each sample
spent, and they survive a restart, so a rerun counts what earlier runs of the same outputs spent and goes on where
the cap stopped it. A cap only keeps new samples from starting (`runner.batch.run_batch`'s `stop`): samples in
flight finish and are written, and samples never started are not recorded at all (not as failures), so a rerun
with a higher cap runs exactly them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

STOPPED = "spending cap reached"


def record_spend(rec: dict[str, Any]) -> tuple[int, float]:
    """(model calls, dollars) one record spent: its usage total (a cache hit is no call), else its `cost_usd`."""
    usage = rec.get("usage")
    total = (usage.get("total") if isinstance(usage, dict) else None) or {}
    calls = int(total.get("calls", 0) or 0)
    cost = float(rec.get("cost_usd") or total.get("cost_usd") or 0.0)
    return calls, cost


@dataclass
class Spending:
    """The model calls and dollars counted so far against the caps (None: no cap); shared by every output of one
    command, so an evaluation's cap holds across all its configurations."""

    max_calls: int | None = None
    max_cost: float | None = None
    calls: int = 0
    cost: float = 0.0
    _seen: set[tuple[str, str]] = field(default_factory=set)

    @property
    def capped(self) -> bool:
        """Whether any cap is set."""
        return self.max_calls is not None or self.max_cost is not None

    def add(self, rec: dict[str, Any], *, output: str = "", sample_id: str | None = None) -> None:
        """Count one record (once per output and id when both are given: an earlier record counted at the start
        of a run is not counted again)."""
        if sample_id is not None:
            if (output, sample_id) in self._seen:
                return
            self._seen.add((output, sample_id))
        calls, cost = record_spend(rec)
        self.calls += calls
        self.cost += cost

    def add_earlier(self, output: str, records: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Count the records an output already holds (earlier runs' spending)."""
        for sample_id, rec in records:
            self.add(rec, output=output, sample_id=sample_id)

    def stop(self) -> str | None:
        """Why no new sample may start (a cap is reached), or None."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            return f"{STOPPED}: {self.calls} model calls (--max-calls {self.max_calls})"
        if self.max_cost is not None and self.cost >= self.max_cost:
            return f"{STOPPED}: ${self.cost:.4f} (--max-cost {self.max_cost:g})"
        return None
