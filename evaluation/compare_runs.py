"""Two detection result files side by side (`unveil compare A B`, the web app's compare page).

On the samples both files finished (`status: ok` in each): the verdicts that differ, and, where the records carry
their ground truth (`label`, as the run files of `unveil evaluate detection` and a `detect --input` of labelled
pairs do), accuracy and F-score of each file and their difference, overall, per ground-truth `category` and per MTC
bin (the reference MTC a record carries, `ref_mtc`, else file A's own `mtc`); and the model calls and cost of each
file on those samples. Samples only one file has are counted, not compared.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evaluation import metrics
from evaluation.runs import usage_of
from tools.errors import UnveilError
from tools.jsonl_files import done_records


class CompareError(UnveilError, ValueError):
    """A file that cannot be compared (missing, or not a detection results file)."""


def _records(path: Path) -> dict[str, dict[str, Any]]:
    """The finished detection records of a results file, by id."""
    if not path.is_file():
        raise CompareError(f"{str(path)!r}: no such results file")
    records = done_records(path)
    ok = {sid: r for sid, r in records.items() if r.get("status", "ok") == "ok"}
    if records and not any("toxic" in r for r in ok.values()):
        raise CompareError(f"{str(path)!r}: not a detection results file (its records have no `toxic` verdict)")
    return ok


def _label(rec: dict[str, Any]) -> int | None:
    """A record's ground truth (1 toxic, 0 benign), or None where it carries none."""
    value = rec.get("label")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bin(a: dict[str, Any]) -> str | None:
    """The MTC bin of a shared sample: its reference MTC, else file A's own."""
    mtc = a.get("ref_mtc") if a.get("ref_mtc") is not None else a.get("mtc")
    return metrics.mtc_bin(float(mtc)) if isinstance(mtc, (int, float)) and math.isfinite(mtc) else None


def _scores(pairs: list[tuple[dict[str, Any], dict[str, Any]]], beta: float) -> dict[str, Any]:
    """Accuracy and F-score of A and B on labelled pairs, and B minus A."""
    labelled = [(a, b) for a, b in pairs if _label(a) is not None]
    labels = [_label(a) or 0 for a, _ in labelled]
    out: dict[str, Any] = {"n": len(labelled)}
    for name, pick in (("a", 0), ("b", 1)):
        c = metrics.confusion(labels, [bool(p[pick].get("toxic")) for p in labelled])
        out[f"{name}_accuracy"], out[f"{name}_f"] = metrics.accuracy(c), metrics.f_beta(c, beta)
    out["delta_accuracy"] = out["b_accuracy"] - out["a_accuracy"]
    out["delta_f"] = out["b_f"] - out["a_f"]
    return out


def compare_runs(a_path: str | Path, b_path: str | Path, *, beta: float = 2.0) -> dict[str, Any]:
    """The comparison of two detection result files (see the module docstring) as plain values."""
    a_recs, b_recs = _records(Path(a_path)), _records(Path(b_path))
    shared = [sid for sid in a_recs if sid in b_recs]
    pairs = [(a_recs[s], b_recs[s]) for s in shared]
    samples = [
        {
            "id": sid,
            "label": _label(a),
            "category": str(a.get("category") or ""),
            "bin": _bin(a),
            "a_toxic": bool(a.get("toxic")),
            "b_toxic": bool(b.get("toxic")),
            "a_mtc": a.get("mtc"),
            "b_mtc": b.get("mtc"),
            "differ": bool(a.get("toxic")) != bool(b.get("toxic")),
        }
        for sid, (a, b) in zip(shared, pairs, strict=True)
    ]
    groups: list[dict[str, Any]] = [{"group": "overall", "value": "all", **_scores(pairs, beta)}]
    for key in ("category", "bin"):
        values = sorted({str(s[key]) for s in samples if s[key]})
        for value in values:
            chosen = [p for p, s in zip(pairs, samples, strict=True) if str(s[key]) == value]
            groups.append({"group": key, "value": value, **_scores(chosen, beta)})
    cost = {}
    for name, recs in (("a", [a for a, _ in pairs]), ("b", [b for _, b in pairs])):
        total = usage_of(recs)["total"]
        cost[name] = {
            "calls": total["calls"],
            "cache_hits": total["cache_hits"],
            "cost_usd": round(total["cost_usd"], 6),
        }
    return {
        "a": str(a_path),
        "b": str(b_path),
        "beta": beta,
        "shared": len(shared),
        "only_a": len(a_recs) - len(shared),
        "only_b": len(b_recs) - len(shared),
        "disagreements": sum(1 for s in samples if s["differ"]),
        "groups": groups,
        "cost": cost,
        "samples": samples,
    }
