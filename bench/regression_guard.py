"""The GPU suite's regression guard: every figure of a run against the last and the best committed runs of the same GPU
model.

A figure is a number a part measured whose direction is known: images per second (higher is better), a GRPO step's
seconds (lower is better). Each figure of the new run is compared with the newest result under `bench/results/`
(by the date the suite wrote in it) that was made on the same GPU model (an H100 with an H100, whatever the count),
was not a `--tiny` run, comes from another commit, and has that figure, and with the best value of that figure
among all those runs. A figure more than `THRESHOLD` (10%) worse than either is a regression: the suite prints it
loudly, adds a row to its table and lists it in its JSON (`guard`). The best earlier value matters because a
regression that lands once becomes the last run: compared with the last run alone, every later run would look fine.

Warm-up seconds are not figures: they measure the state of the machine's compile cache (cold or warm), not the code.
A T2I rate whose timed rounds shared the host's CPUs with other processes (`bench/host_cpu.py`: the suite's other
jobs building models or compiling beside it) is not guarded: it measures the host's load as much as the code. It is
compared and printed (`!!! NOT GUARDED: ...`), never flagged, and never taken as a baseline; results written before
that record existed count as measured alone.

    python bench/regression_guard.py RESULT.json                 # compare one result with bench/results/
    python bench/regression_guard.py RESULT.json --results DIR   # ... with the results in DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from host_cpu import contended  # noqa: E402

RESULTS = ROOT / "bench" / "results"
THRESHOLD = 0.10  # a figure more than this fraction worse than its baseline is a regression
GRPO_SETTINGS = ("scheduler", "steps", "per_device_batch", "grad_accum", "images_per_prompt", "accel")


@dataclass(frozen=True)
class Figure:
    """One measured number and which way is better."""

    name: str
    value: float
    unit: str
    higher_is_better: bool
    part: str = ""  # the suite part that measured it
    not_guarded: str = ""  # why it is not comparable with figures measured alone (`host_cpu.contended`)


@dataclass(frozen=True)
class Comparison:
    """A figure beside its baseline: the change in percent (positive: better) and whether it regressed."""

    name: str
    value: float
    unit: str
    baseline: float
    baseline_commit: str
    baseline_machine: str
    baseline_file: str
    change_pct: float
    regressed: bool
    # The best value of this figure in any earlier committed run of the same GPU model (may be the baseline's).
    best: float = 0.0
    best_commit: str = ""
    best_file: str = ""
    best_change_pct: float = 0.0
    # The other suite parts that ran beside this figure's part, in the new run and in the baseline run.
    beside: tuple[str, ...] = ()
    baseline_beside: tuple[str, ...] = ()
    not_guarded: str = ""  # the figure's own `not_guarded`: compared and printed, never a regression

    def line(self) -> str:
        """One line for the log and the table."""
        word = "better" if self.change_pct >= 0 else "worse"
        text = (
            f"{self.value:.3g} {self.unit}, {abs(self.change_pct):.0f}% {word} than {self.baseline:.3g} at "
            f"{self.baseline_commit} ({self.baseline_machine})"
        )
        if self.best_file and self.best_file != self.baseline_file and self.best_change_pct < 0:
            worse = abs(self.best_change_pct)
            text += f"; {worse:.0f}% worse than the best earlier, {self.best:.3g} at {self.best_commit}"
        if set(self.beside) != set(self.baseline_beside):
            text += f" [measured beside {', '.join(self.beside) or 'nothing'}; the baseline beside "
            text += f"{', '.join(self.baseline_beside) or 'nothing'}]"
        if self.not_guarded:
            text += f"; not guarded: {self.not_guarded}"
        return text


def _number(value: Any) -> float | None:
    """`value` as a float (numbers, or strings such as "6.54"), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.split()[0])
        except (ValueError, IndexError):
            return None
    return None


def _t2i_figures(data: dict[str, Any]) -> list[Figure]:
    # The plain diffusers pipeline (`baseline_img_per_s`) is not a figure: it measures diffusers, not Unveil's path,
    # over the process's first few images on the GPU (0.35-0.56 images/s on one H100 within an hour at b5a3956).
    out = []
    for key, value in data.items():
        number = _number(value)
        if number is None or "." not in key:
            continue
        variant, _, what = key.partition(".")
        if what == "batched_img_per_s":
            # Its timed rounds are the span `host_cpu` records (the mix and the UNet alone come after them).
            note = contended(data.get(f"{variant}.host_cpu"))
            out.append(Figure(f"t2i: batched {variant}", number, "images/s", True, not_guarded=note))
        elif what == "mix_img_per_s":
            out.append(Figure(f"t2i: mix of {variant}", number, "images/s", True))
        elif what == "unet_only_img_per_s":
            out.append(Figure(f"t2i: UNet alone, {variant}", number, "images/s", True))
    return out


def _grpo_figures(part: str, data: dict[str, Any]) -> list[Figure]:
    measured = data.get("measured")
    if not isinstance(measured, dict):
        return []
    out = []
    # A step at other settings (scheduler, steps, batch, UNet path) is another figure, not a baseline.
    raw = data.get("settings")
    settings: dict[str, Any] = raw if isinstance(raw, dict) else {}
    at = ", ".join(f"{k}={settings[k]}" for k in GRPO_SETTINGS if k in settings)
    label = f"{part}: GRPO step, {data.get('processes', 1)} process(es)" + (f" ({at})" if at else "")
    step = _number(measured.get("step_s"))
    if step is not None:
        out.append(Figure(label, step, "s", False))
    render, images = _number(measured.get("rendering (SD)")), _number(measured.get("images"))
    if render and images:
        out.append(Figure(label.replace("GRPO step", "GRPO rendering"), images / render, "images/s", True))
    return out


def _scale_figures(part: str, data: dict[str, Any]) -> list[Figure]:
    out = []
    accel = data.get("accel", "auto")
    for row in data.get("rows") or []:
        if not isinstance(row, dict):
            continue
        rate = _number(row.get("images/s"))
        if rate is not None:
            name = f"scale: {row.get('engine')} engine, {row.get('GPUs')} GPU(s), accel {accel}"
            out.append(Figure(name, rate, "images/s", True))
    return out


def figures(result: dict[str, Any]) -> dict[str, Figure]:
    """The figures of one suite result, by name (parts that did not measure a figure give none)."""
    found: list[Figure] = []
    for part, record in (result.get("parts") or {}).items():
        data = record.get("data") if isinstance(record, dict) else None
        if not isinstance(data, dict):
            continue
        if part == "t2i":
            made = _t2i_figures(data)
        elif part.startswith("grpo"):
            made = _grpo_figures(part, data)
        elif part.startswith("scale"):
            made = _scale_figures(part, data)
        else:
            continue
        found += [replace(f, part=part) for f in made]
    return {f.name: f for f in found}


def beside(result: dict[str, Any], part: str) -> list[str]:
    """The other parts of `result` that ran while `part` ran (from each part's `started_s` and `seconds`): a figure
    measured beside other GPU jobs on one machine can be slower than one measured alone."""
    parts = result.get("parts") or {}

    def span(name: str) -> tuple[float, float] | None:
        record = parts.get(name)
        if not isinstance(record, dict):
            return None
        start, seconds = _number(record.get("started_s")), _number(record.get("seconds"))
        return None if start is None or seconds is None else (start, start + seconds)

    own = span(part)
    if own is None:
        return []
    others = ((name, span(name)) for name in parts if name != part)
    return sorted(name for name, s in others if s is not None and s[0] < own[1] and own[0] < s[1])


def _committed(folder: Path) -> set[Path] | None:
    """The files of `folder` that git tracks (None where git cannot tell: every file then counts)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "."], cwd=folder, capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {(folder / name).resolve() for name in listed.split("\0") if name}


def baselines(
    result: dict[str, Any], folder: Path = RESULTS, *, exclude: Path | None = None
) -> list[tuple[Path, dict]]:
    """The committed results in `folder` that a run of `result` is compared with: the same GPU model, not tiny,
    another commit, made before it; newest first (by the date each one records)."""
    model = result.get("gpu_model")
    before = str(result.get("date") or "9999")
    own = str(result.get("commit", "")).split("+")[0]
    tracked = _committed(folder)
    found = []
    for path in sorted(folder.glob("*.json")):
        if exclude is not None and path.resolve() == exclude.resolve():
            continue
        if tracked is not None and path.resolve() not in tracked:
            continue
        try:
            other = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(other, dict) or other.get("tiny") or other.get("gpu_model") != model:
            continue
        theirs = str(other.get("commit", "")).split("+")[0]
        if own and theirs and (theirs.startswith(own) or own.startswith(theirs)):
            continue
        if str(other.get("date", "")) >= before:
            continue  # a later run is no baseline for an earlier one (checking an old result)
        found.append((path, other))
    found.sort(key=lambda item: str(item[1].get("date", "")), reverse=True)
    return found


def _change(figure: Figure, base: Figure) -> float:
    """The change of `figure` against `base` as a fraction (positive: better)."""
    ratio = figure.value / base.value
    return ratio - 1 if figure.higher_is_better else 1 - ratio


def compare(result: dict[str, Any], against: list[tuple[Path, dict]], threshold: float = THRESHOLD) -> list[Comparison]:
    """Each figure of `result` beside the same figure in the newest of `against` that has it, and beside the best
    value of it in any of `against`."""
    earlier = [(path, other, figures(other)) for path, other in against]
    out = []
    for name, figure in figures(result).items():
        having = [(p, o, f[name]) for p, o, f in earlier if name in f and f[name].value > 0 and not f[name].not_guarded]
        if not having:
            continue
        path, other, base = having[0]
        best_path, best_other, best = max(having, key=lambda item: _change(item[2], base))
        change, best_change = _change(figure, base), _change(figure, best)
        out.append(
            Comparison(
                name=name,
                value=figure.value,
                unit=figure.unit,
                baseline=base.value,
                baseline_commit=str(other.get("commit", "?"))[:12],
                baseline_machine=str(other.get("machine", "?")),
                baseline_file=path.name,
                change_pct=round(100 * change, 1),
                regressed=not figure.not_guarded and min(change, best_change) < -threshold,
                best=best.value,
                best_commit=str(best_other.get("commit", "?"))[:12],
                best_file=best_path.name,
                best_change_pct=round(100 * best_change, 1),
                beside=tuple(beside(result, figure.part)),
                baseline_beside=tuple(beside(other, base.part)),
                not_guarded=figure.not_guarded,
            )
        )
    return out


def guard_report(result: dict[str, Any], folder: Path = RESULTS, *, exclude: Path | None = None) -> dict[str, Any]:
    """The guard's JSON: every comparison, and the names of the figures that regressed."""
    comparisons = compare(result, baselines(result, folder, exclude=exclude))
    return {
        "threshold_pct": round(100 * THRESHOLD),
        "gpu_model": result.get("gpu_model"),
        "comparisons": [asdict(c) for c in comparisons],
        "regressions": [c.name for c in comparisons if c.regressed],
        "not_guarded": [c.name for c in comparisons if c.not_guarded],
    }


def guard_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    """Table rows: one per regression (loud) and per figure not guarded, then one summary row."""
    rows = []
    comparisons = [Comparison(**c) for c in report.get("comparisons", [])]
    for c in comparisons:
        if c.regressed:
            rows.append({"part": "guard", "what": c.name, "result": f"REGRESSION: {c.line()}", "target": "no worse"})
        elif c.not_guarded:
            rows.append({"part": "guard", "what": c.name, "result": f"NOT GUARDED: {c.line()}", "target": "alone"})
    regressed = len(report.get("regressions", []))
    summary = (
        f"{len(comparisons)} figure(s) compared with the last and best committed results on {report.get('gpu_model')}; "
        f"{regressed} more than {report.get('threshold_pct')}% worse"
        + (f", {len(report['not_guarded'])} not guarded (not measured alone)" if report.get("not_guarded") else "")
        if comparisons
        else f"no committed result on {report.get('gpu_model')} to compare with"
    )
    rows.append({"part": "guard", "what": "regression guard", "result": summary, "target": "0 worse"})
    return rows


def loud_lines(report: dict[str, Any]) -> list[str]:
    """The lines printed for the regressions and for the figures not guarded, each impossible to miss in a log."""
    comparisons = [Comparison(**raw) for raw in report.get("comparisons", [])]
    return [f"!!! REGRESSION: {c.name}: {c.line()}" for c in comparisons if c.regressed] + [
        f"!!! NOT GUARDED: {c.name}: {c.line()} (rerun the part alone: --parts t2i)"
        for c in comparisons
        if c.not_guarded
    ]


def main(argv: list[str] | None = None) -> int:
    """Compare one result file with the committed ones; exit 1 when a figure regressed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", help="a gpu_suite JSON")
    ap.add_argument("--results", default=str(RESULTS), help="the folder of committed results (default bench/results)")
    args = ap.parse_args(argv)
    path = Path(args.result)
    report = guard_report(json.loads(path.read_text(encoding="utf-8")), Path(args.results), exclude=path)
    for line in loud_lines(report):
        print(line, flush=True)
    for row in guard_rows(report):
        print(f"{row['what']}: {row['result']}")
    return 1 if report["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
