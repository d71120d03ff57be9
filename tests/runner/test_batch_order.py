"""A batch that asks for it (`BatchRun(input_order=True)`, as `unveil detect` and `evaluate detection` do) leaves
its output in the input's order, whatever order concurrent samples finished in or earlier runs wrote."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


async def test_samples_that_finish_last_first_are_written_in_the_inputs_order(tmp_path: Path) -> None:
    items = [BatchItem(f"s{k}", {"n": k}) for k in range(4)]
    done = {it.id: asyncio.Event() for it in items}

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        nxt = f"s{record['n'] + 1}"
        if nxt in done:  # each sample waits for the next one: they finish last to first, without timing
            await done[nxt].wait()
        done[sample_id].set()
        return {"n": record["n"]}

    out = tmp_path / "out.jsonl"
    summary = await run_batch(items, worker, BatchRun(out, concurrency=4, progress=False, input_order=True))
    assert summary.completed == 4 and _ids(out) == ["s0", "s1", "s2", "s3"]

    unordered = tmp_path / "unordered.jsonl"
    for e in done.values():
        e.clear()
    await run_batch(items, worker, BatchRun(unordered, concurrency=4, progress=False))
    assert _ids(unordered) == ["s3", "s2", "s1", "s0"]  # appended as they finished: what input_order undoes


async def test_a_resumed_run_puts_earlier_records_in_their_place(tmp_path: Path) -> None:
    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        return {"n": record["n"]}

    out = tmp_path / "out.jsonl"
    earlier = [BatchItem("s2", {"n": 2}), BatchItem("gone", {"n": 9})]  # `gone` is no longer in the input
    await run_batch(earlier, worker, BatchRun(out, progress=False, input_order=True))
    items = [BatchItem(f"s{k}", {"n": k}) for k in range(3)]
    summary = await run_batch(items, worker, BatchRun(out, concurrency=1, progress=False, input_order=True))
    assert summary.skipped == 1 and _ids(out) == ["s0", "s1", "s2", "gone"]
