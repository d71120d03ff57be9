"""Spending caps of the batch commands (`--max-calls`, `--max-cost`): what a run's records spent, against the caps.

The cap sums the records' own usage, not a process-wide counter: records are the values that say what each sample
spent, and they survive a restart, so a rerun counts what earlier runs of the same outputs spent and goes on where
the cap stopped it. A cap keeps new samples from starting (`runner.batch.run_batch`'s `stop`) and, through the
gateway (`held_to_caps`, `agents.limits.CallBudget`), new model calls of the samples in flight: a call that would
start at or past a cap is not started, and its sample ends unrecorded, like the samples never started (not as
failures), so a rerun with a higher cap runs exactly them (the calls it had made come back from the response
cache). Only the calls already in flight at the cap can pass `--max-cost`, each by its own price.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agents.gateway import get_gateway
from agents.limits import CallBudget

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
    budget: CallBudget | None = None  # the gateway's view of the caps while a batch runs (`held_to_caps`)

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

    def call_budget(self, gateway_cost: float) -> CallBudget:
        """The gateway's budget for a batch that starts now, the gateway having booked `gateway_cost` dollars so
        far: what the records spent or, where more, what an earlier batch's budget saw spent (a sample stopped
        at the cap spent without a record)."""
        calls, cost, refused = self.calls, self.cost, None
        if self.budget is not None:
            calls, cost = max(calls, self.budget.calls), max(cost, self.budget.cost + gateway_cost)
            refused = self.budget.refused
        self.budget = CallBudget(self.max_calls, self.max_cost, calls=calls, cost=cost - gateway_cost)
        self.budget.refused = refused
        return self.budget

    def stop(self) -> str | None:
        """Why no new sample may start (a cap is reached, or the gateway refused a call at it), or None."""
        if self.budget is not None and self.budget.refused:
            return f"{STOPPED}: {self.budget.refused}"
        if self.max_calls is not None and self.calls >= self.max_calls:
            return f"{STOPPED}: {self.calls} model calls (--max-calls {self.max_calls})"
        if self.max_cost is not None and self.cost >= self.max_cost:
            return f"{STOPPED}: ${self.cost:.4f} (--max-cost {self.max_cost:g})"
        return None


@contextmanager
def held_to_caps(spending: Spending | None) -> Iterator[None]:
    """Hold the process gateway's requests to `spending`'s caps for the body (nothing without a cap)."""
    if spending is None or not spending.capped:
        yield
        return
    gateway = get_gateway()
    previous = gateway.budget
    gateway.budget = spending.call_budget(gateway.usage["total"]["cost_usd"])
    try:
        yield
    finally:
        gateway.budget = previous
