"""Shared bookkeeping of evaluation runs: per-configuration JSONL files, usage totals, failure lists, slugs.

Each configuration (a method with its models and settings) writes its own resumable JSONL through
`runner.batch.run_batch`, so a rerun skips every sample already done and a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agents.usage import RunUsage, empty_usage, merge_usage, without_calls
from tools.jsonl_files import done_records

NOT_RUN = "not run (stopped before this sample)"  # a sample a spending cap kept from starting: no record, no failure


def slug(*parts: Any) -> str:
    """A file-name-safe name for a configuration, unique per configuration.

    The readable part alone is not unique (`x_y` and `x-y` both read `x-y`, and long specs are cut), and a run file
    shared by two detector specs would report a model that never ran with the other's scores: whenever the
    readable part differs from the text, a hash of the exact text is appended."""
    text = "_".join(str(p) for p in parts if p not in (None, ""))
    clean = re.sub(r"[^A-Za-z0-9.=-]+", "-", text).strip("-")[:150] or "run"
    if clean != text:
        clean = f"{clean[:139]}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:10]}"
    return clean


def usage_of(records: Iterable[dict[str, Any]]) -> RunUsage:
    """Usage summed over the records of a run (records without usage count as zero)."""
    total = empty_usage()
    for rec in records:
        if isinstance(rec.get("usage"), dict) and "total" in rec["usage"]:
            total = merge_usage(total, without_calls(rec["usage"]))
    return total


def cost_columns(usage: RunUsage) -> dict[str, Any]:
    """The cost fields every result row carries."""
    t = usage["total"]
    return {
        "calls": t["calls"],
        "cache_hits": t["cache_hits"],
        "input_tokens": t["input_tokens"],
        "output_tokens": t["output_tokens"],
        "cost_usd": round(t["cost_usd"], 6),
    }


def split_records(path: Path, ids: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ok records, failed records) of `path` for the given sample ids, in the ids' order."""
    done = done_records(path)
    ok, failed = [], []
    for sid in ids:
        rec = done.get(sid)
        if rec is None:
            failed.append({"id": sid, "status": "failed", "error": NOT_RUN})
        elif rec.get("status") == "ok":
            ok.append(rec)
        else:
            failed.append(rec)
    return ok, failed


def as_json(value: object) -> str:
    """Compact JSON for a CSV cell (model specs, settings)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
