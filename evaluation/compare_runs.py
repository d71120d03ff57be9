"""Detection result files side by side (`unveil compare A B [C ...]`, the web app's compare page).

On the samples every file finished (`status: ok` in each): the verdicts that differ, and, where the records carry
their ground truth (`label`, as the run files of `unveil evaluate detection` and a `detect --input` of labelled
pairs do), accuracy, precision, recall and F-score of each file, overall, per ground-truth `category` and per MTC
bin (the reference MTC a record carries, `ref_mtc`, else the first file's own `mtc`); and the model calls, cache hits
and cost of each file on those samples. Samples only some files have are counted, not compared.

`compare_many` gives the matrix of N files (groups as rows, runs as columns); `compare_runs` the two-file view with
B-minus-A deltas that the CLI prints for two files and the web page shows.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation import metrics
from evaluation.runs import usage_of
from runner.output_identity import read_identity
from tools.errors import UnveilError
from tools.jsonl_files import done_records

GROUP_LEVELS = ("category", "bin")  # the levels a group row (and a per-group gate) names besides `overall`
NO_LABELS = (
    "no shared sample carries a ground-truth label, so nothing is scored: only the verdicts are compared. "
    "Give the input lines a `label` (1 toxic, 0 benign) and a `category`; `unveil detect --input` keeps them"
)


class CompareError(UnveilError, ValueError):
    """A file that cannot be compared (missing, a folder, or not a detection results file)."""


@dataclass(frozen=True)
class Run:
    """One results file: its path, a name saying what made it, and its finished records by id."""

    path: Path
    name: str
    records: dict[str, dict[str, Any]]


def _folder_hint(path: Path) -> str:
    """What to compare instead of a folder: the run files of an evaluation's output folder, if it has any."""
    found = sorted(p for p in path.rglob("*.jsonl") if p.parent.parent.name == "runs" or p.parent.name == "runs")
    if not found:
        return "give a results file of `unveil detect --input` or a run file of `unveil evaluate detection`"
    shown = ", ".join(str(p) for p in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    return f"compare its run files (OUT/runs/DATASET/*.jsonl): {shown}"


def _records(path: Path) -> dict[str, dict[str, Any]]:
    """The finished detection records of a results file, by id."""
    if path.is_dir():
        raise CompareError(f"{str(path)!r} is a folder, not a results file: {_folder_hint(path)}")
    if not path.is_file():
        raise CompareError(f"{str(path)!r}: no such results file")
    records = done_records(path)
    ok = {sid: r for sid, r in records.items() if r.get("status", "ok") == "ok"}
    if records and not any("toxic" in r for r in ok.values()):
        raise CompareError(f"{str(path)!r}: not a detection results file (its records have no `toxic` verdict)")
    return ok


def _method_of(path: Path, records: dict[str, dict[str, Any]]) -> str:
    """The detection method of a results file: its settings sidecar's, else what its records show."""
    identity = read_identity(path)
    method = (identity or {}).get("settings", {}).get("method") if identity else None
    if isinstance(method, str) and method:
        return method
    first = next(iter(records.values()), {})
    if first.get("guard"):
        return f"guard:{first['guard']}"
    return "tag" if "trees" in first or "tag_reading" in first else "vanilla" if "reason" in first else ""


def run_name(path: Path, records: dict[str, dict[str, Any]]) -> str:
    """What made a results file, for people: its method and the model most of its calls used."""
    specs: Counter[str] = Counter()
    for rec in records.values():
        models = rec.get("models")
        if isinstance(models, dict):
            specs.update(str(v) for v in models.values() if v)
    method = _method_of(path, records)
    model = specs.most_common(1)[0][0] if specs else ""
    return " ".join(p for p in (method, f"[{model}]" if model else "") if p) or path.stem


def load_run(path: str | Path) -> Run:
    """A results file as a `Run` (refused with a `CompareError` naming it when it is none)."""
    p = Path(path)
    records = _records(p)
    return Run(p, run_name(p, records), records)


def label_of(rec: dict[str, Any]) -> int | None:
    """A record's ground truth (1 toxic, 0 benign), or None where it carries none."""
    value = rec.get("label")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bin(first: dict[str, Any]) -> str | None:
    """The MTC bin of a shared sample: its reference MTC, else the first file's own."""
    mtc = first.get("ref_mtc") if first.get("ref_mtc") is not None else first.get("mtc")
    return metrics.mtc_bin(float(mtc)) if isinstance(mtc, (int, float)) and math.isfinite(mtc) else None


def _scores(labels: list[int], verdicts: list[bool], beta: float) -> dict[str, Any]:
    """One run's scores on labelled samples."""
    c = metrics.confusion(labels, verdicts)
    return {
        "accuracy": metrics.accuracy(c),
        "precision": metrics.precision(c),
        "recall": metrics.recall(c),
        "f": metrics.f_beta(c, beta),
        **c.as_dict(),
    }


def _group(samples: list[dict[str, Any]], n_runs: int, beta: float) -> dict[str, Any]:
    """The labelled count and every run's scores on a group of shared samples."""
    labelled = [s for s in samples if s["label"] is not None]
    labels = [int(s["label"]) for s in labelled]
    return {
        "n": len(labelled),
        "runs": [_scores(labels, [s["toxic"][k] for s in labelled], beta) for k in range(n_runs)],
    }


def _groups(samples: list[dict[str, Any]], n_runs: int, beta: float) -> list[dict[str, Any]]:
    """Overall, then each ground-truth category (sorted), then each MTC bin (low to high)."""
    out = [{"group": "overall", "value": "all", **_group(samples, n_runs, beta)}]
    for key in GROUP_LEVELS:
        present = {str(s[key]) for s in samples if s[key]}
        values = [b for b in metrics.MTC_BINS if b in present] if key == "bin" else sorted(present)
        for value in values:
            chosen = [s for s in samples if str(s[key]) == value]
            out.append({"group": key, "value": value, **_group(chosen, n_runs, beta)})
    return out


def compare_many(paths: list[str | Path], *, beta: float = 2.0) -> dict[str, Any]:
    """The comparison of N detection result files (see the module docstring) as plain values: `runs` (path, name,
    records, calls, cache hits, cost), `groups` (one row per group, one score entry per run), `samples` (each shared
    sample's verdict per run, `differ` where they disagree), the shared and labelled counts."""
    runs = [load_run(p) for p in paths]
    first = runs[0].records
    shared = [sid for sid in first if all(sid in r.records for r in runs[1:])]
    samples = []
    for sid in shared:
        verdicts = [bool(r.records[sid].get("toxic")) for r in runs]
        samples.append(
            {
                "id": sid,
                "label": label_of(first[sid]),
                "category": str(first[sid].get("category") or ""),
                "bin": _bin(first[sid]),
                "toxic": verdicts,
                "mtc": [r.records[sid].get("mtc") for r in runs],
                "differ": len(set(verdicts)) > 1,
            }
        )
    run_rows = []
    for r in runs:
        total = usage_of([r.records[s] for s in shared])["total"]
        run_rows.append(
            {
                "path": str(r.path),
                "name": r.name,
                "records": len(r.records),
                "only": len(r.records) - len(shared),
                "calls": total["calls"],
                "cache_hits": total["cache_hits"],
                "cost_usd": round(total["cost_usd"], 6),
            }
        )
    return {
        "beta": beta,
        "runs": run_rows,
        "shared": len(shared),
        "labelled": sum(1 for s in samples if s["label"] is not None),
        "disagreements": sum(1 for s in samples if s["differ"]),
        "groups": _groups(samples, len(runs), beta),
        "samples": samples,
    }


def as_pair(result: dict[str, Any]) -> dict[str, Any]:
    """A two-file `compare_many` result in the A/B form (`a_accuracy`, `delta_f`, ...) with B-minus-A deltas."""
    a, b = result["runs"]
    groups = []
    for g in result["groups"]:
        sa, sb = g["runs"]
        groups.append(
            {
                "group": g["group"],
                "value": g["value"],
                "n": g["n"],
                "a_accuracy": sa["accuracy"],
                "a_f": sa["f"],
                "b_accuracy": sb["accuracy"],
                "b_f": sb["f"],
                "delta_accuracy": sb["accuracy"] - sa["accuracy"],
                "delta_f": sb["f"] - sa["f"],
            }
        )
    samples = [
        {
            **{k: s[k] for k in ("id", "label", "category", "bin", "differ")},
            "a_toxic": s["toxic"][0],
            "b_toxic": s["toxic"][1],
            "a_mtc": s["mtc"][0],
            "b_mtc": s["mtc"][1],
        }
        for s in result["samples"]
    ]
    cost = {side: {k: run[k] for k in ("calls", "cache_hits", "cost_usd")} for side, run in (("a", a), ("b", b))}
    return {
        "a": a["path"],
        "b": b["path"],
        "a_name": a["name"],
        "b_name": b["name"],
        "beta": result["beta"],
        "shared": result["shared"],
        "labelled": result["labelled"],
        "only_a": a["only"],
        "only_b": b["only"],
        "disagreements": result["disagreements"],
        "groups": groups,
        "cost": cost,
        "samples": samples,
    }


def compare_runs(a_path: str | Path, b_path: str | Path, *, beta: float = 2.0) -> dict[str, Any]:
    """The comparison of two detection result files in the A/B form (`as_pair`)."""
    return as_pair(compare_many([a_path, b_path], beta=beta))
