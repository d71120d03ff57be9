"""Spending caps are hard at the door of each model call (issue 45: `--max-cost 1` spent $1.97).

The cap used to stop only new samples: four TAG detections started together each made all their calls, so the
run spent about four samples' worth whatever the cap. Now a call that would start at or past the cap is not started
(`agents.limits.CallBudget`, installed by the batch): its sample ends unrecorded, as a sample never started, and a
rerun with a higher cap runs it. The model is a real OpenAI-compatible server on loopback (`tests/faultserver.py`)
with a price from `$UNVEIL_PRICES`, through `unveil detect` in the process.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer

from agents.gateway import get_gateway
from agents.limits import CallBudget, SpendingCapReached
from agents.usage import price_table
from tests.cli_args import run_cli as main
from tools.jsonl_files import done_records

PRICE_IN = 10.0  # dollars per million input tokens: a TAG call of about 1,000 tokens costs a cent


def answers() -> dict[str, Any]:
    """A benign TAG on the server: one root a modality, fresh children for every parent, no toxic pair."""
    names = itertools.count()

    def expansion(body: dict[str, Any]) -> dict[str, Any]:
        entry = {
            "parent_id": "?",
            "children": [
                {"concept": f"concept {next(names)}", "association": "similarity", "probability": p}
                for p in (0.5, 0.3, 0.2)
            ],
        }
        return {"expansions": [entry] * 12}  # the same 3 names for every parent: dropped only when equal to it

    return {
        "EntityGraph": {"entities": [{"name": "powder"}], "relations": []},
        "RootVerdict": {"toxic": False, "reason": "nothing"},
        "Expansion": expansion,
        "PairJudgement": {"toxic_pairs": []},
    }


@pytest.fixture
def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`openai:fake-model` priced at `PRICE_IN` a million input tokens (nothing for output)."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai:fake-model": [PRICE_IN, 0.0]}))
    monkeypatch.setenv("UNVEIL_PRICES", str(prices))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    price_table.cache_clear()
    yield
    price_table.cache_clear()


def pairs(path: Path, n: int) -> Path:
    """`n` benign pairs."""
    rows = [{"id": f"s{k}", "text": f"meet at the usual place {k}", "image_description": "a bag"} for k in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def detect(server: FaultServer, data: Path, out: Path, *extra: str) -> int:
    return main(
        ["detect", "--input", str(data), "--output", str(out), "--model", server.spec(), "--cache", "off"]
        + ["--l-max", "3", "--concurrency", "4", "--no-progress", *extra]
    )


def test_max_cost_stops_the_calls_of_samples_in_flight(
    tmp_path: Path, priced: None, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One request at a time on the backend, so at most one call is in flight when the cap is reached; the four
    # samples still run at once (--concurrency 4). A sample makes 9 calls, about $0.11: all four, $0.43.
    monkeypatch.setenv("UNVEIL_MAX_CONCURRENCY", "1")
    data, out = pairs(tmp_path / "pairs.jsonl", 4), tmp_path / "out.jsonl"
    with FaultServer(answers()) as server:
        assert detect(server, data, out, "--max-cost", "0.25") == 4  # incomplete: the cap stopped it (exit 4)
        spent = get_gateway().usage["total"]["cost_usd"]
        dearest = max(len(json.dumps(b)) for b in server.bodies) / 4 * PRICE_IN / 1e6
        made = len(server.bodies)
        # without the door every sample in flight made all its calls: $0.43 spent under a cap of $0.25
        assert 0.25 <= spent < 0.25 + dearest  # only the call in flight at the cap passes it
        records = done_records(out)
        assert len(records) < 4 and all(r["status"] == "ok" for r in records.values())  # stopped: no record
        err = capsys.readouterr().err
        assert "spending cap reached" in err
        # the cost is stated before the run, against the cap (TAG's worst case: 4 samples x 22 calls, 4 roots a tree)
        assert "estimate: at most 88 model calls, about $" in err and "exceeds --max-cost 0.25" in err
        assert detect(server, data, out) == 0  # no cap: the samples the cap stopped run now
        assert len(done_records(out)) == 4 and len(server.bodies) > made


def test_max_calls_is_never_passed_by_samples_in_flight(tmp_path: Path, priced: None, capsys) -> None:
    data, out = pairs(tmp_path / "pairs.jsonl", 4), tmp_path / "out.jsonl"
    with FaultServer(answers()) as server:
        assert detect(server, data, out, "--max-calls", "10") == 4  # incomplete: the cap stopped it (exit 4)
        assert len(server.bodies) == 10  # four samples in flight; the eleventh call was not started
    assert (
        all(r["status"] == "ok" for r in done_records(out).values()) and len(done_records(out)) <= 1
    )  # a TAG sample takes 9 calls: at most one finished, none failed
    assert "spending cap reached: 10 model calls (--max-calls 10)" in capsys.readouterr().err


def test_the_budget_refuses_at_the_cap_and_ever_after() -> None:
    budget = CallBudget(None, 1.0, cost=0.5)
    budget.admit("expander", 0.4)  # $0.90 spent: under the cap, the call starts
    with pytest.raises(SpendingCapReached, match=r"\$1\.0000 \(--max-cost 1\); the pair_judge call"):
        budget.admit("pair_judge", 0.5)
    with pytest.raises(SpendingCapReached):
        budget.admit("explainer", 0.0)  # refused once, refused after: the batch stops
