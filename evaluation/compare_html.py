"""The HTML report of `unveil compare --html FILE`: one self-contained page a CI job can attach.

No server, no script, no external asset (the style is inline), and every value from the files (ids, paths,
categories, model names) is HTML-escaped, so a hostile results file cannot put markup or a script in the page. It
shows the runs, the gates' outcome, the metric matrix (groups as rows, runs as columns, with each run's difference
from the baseline) and every shared sample's verdicts, the rows whose verdicts differ marked.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from evaluation.compare_runs import NO_LABELS

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #1d2330; }
table { border-collapse: collapse; margin: 0.4rem 0 1.2rem; }
th, td { border-bottom: 1px solid #dde1e8; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f5f8; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.differ td { background: #fff4d6; }
.bad { color: #a3261b; font-weight: 600; } .ok { color: #19703a; font-weight: 600; }
.muted { color: #667085; } .delta { color: #667085; font-size: 0.85em; }
code { overflow-wrap: anywhere; }
"""
METRICS = (("f", "F"), ("accuracy", "accuracy"), ("precision", "precision"), ("recall", "recall"))


def _e(value: object) -> str:
    """Any value as escaped HTML text."""
    return escape(str(value), quote=True)


def _num(value: object) -> str:
    """A metric as 4 decimals, `-` where there is none."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "-"
    return f"{value:.4f}"


def _runs_table(result: dict[str, Any], baseline: int) -> str:
    """The runs: name (the baseline marked), file, records, not shared, calls, cache hits, cost."""
    head = "<tr><th>#</th><th>run</th><th>file</th><th>records</th><th>not shared</th><th>calls</th>"
    head += "<th>cache hits</th><th>cost</th></tr>"
    rows = []
    for k, r in enumerate(result["runs"]):
        mark = " (baseline)" if k == baseline else ""
        rows.append(
            f"<tr><td>{k + 1}</td><td>{_e(r['name'])}{mark}</td><td><code>{_e(r['path'])}</code></td>"
            f"<td class='num'>{_e(r['records'])}</td><td class='num'>{_e(r['only'])}</td>"
            f"<td class='num'>{_e(r['calls'])}</td><td class='num'>{_e(r['cache_hits'])}</td>"
            f"<td class='num'>${float(r['cost_usd']):.4f}</td></tr>"
        )
    return f"<table id='runs'>{head}{''.join(rows)}</table>"


def _cell(g: dict[str, Any], key: str, k: int, baseline: int) -> str:
    """One run's value of a metric in a group, with its difference from the baseline's."""
    value = g["runs"][k][key]
    text = _num(value)
    if k != baseline and text != "-":
        base = g["runs"][baseline][key]
        if isinstance(base, (int, float)) and math.isfinite(base):
            text += f" <span class='delta'>({value - base:+.4f})</span>"
    return f"<td class='num'>{text}</td>"


def _matrix(result: dict[str, Any], key: str, title: str, baseline: int) -> str:
    """One metric as a matrix: groups as rows, runs as columns."""
    cols = "".join(f"<th>[{k + 1}] {_e(r['name'])}</th>" for k, r in enumerate(result["runs"]))
    rows = []
    for g in result["groups"]:
        name = "overall" if g["group"] == "overall" else f"{g['group']}={g['value']}"
        cells = "".join(_cell(g, key, k, baseline) for k in range(len(result["runs"])))
        rows.append(f"<tr><td>{_e(name)}</td><td class='num'>{_e(g['n'])}</td>{cells}</tr>")
    return f"<h3>{_e(title)}</h3><table class='matrix'><tr><th>group</th><th>n</th>{cols}</tr>{''.join(rows)}</table>"


def _samples(result: dict[str, Any]) -> str:
    """Every shared sample's verdict per run; the rows whose verdicts differ marked (class `differ`, `*`)."""
    cols = "".join(f"<th>[{k + 1}]</th>" for k in range(len(result["runs"])))
    rows = []
    for s in result["samples"]:
        verdicts = "".join(f"<td class='{'bad' if t else 'ok'}'>{'toxic' if t else 'safe'}</td>" for t in s["toxic"])
        label = "" if s["label"] is None else s["label"]
        rows.append(
            f"<tr class='{'differ' if s['differ'] else 'same'}'><td>{'*' if s['differ'] else ''}</td>"
            f"<td>{_e(s['id'])}</td>{verdicts}<td>{_e(label)}</td><td>{_e(s['category'])}</td>"
            f"<td>{_e(s['bin'] or '')}</td></tr>"
        )
    head = f"<tr><th></th><th>sample</th>{cols}<th>label</th><th>category</th><th>bin</th></tr>"
    return f"<table id='samples'>{head}{''.join(rows)}</table>"


def _gates(misses: list[str] | None) -> str:
    """The gates' outcome: nothing without gates, else passed or each miss."""
    if misses is None:
        return ""
    if not misses:
        return "<p id='gates' class='ok'>Every gate passed.</p>"
    items = "".join(f"<li>{_e(m)}</li>" for m in misses)
    return f"<div id='gates'><p class='bad'>{len(misses)} gate(s) missed:</p><ul>{items}</ul></div>"


def html_report(result: dict[str, Any], *, baseline: int = 0, misses: list[str] | None = None) -> str:
    """The report of a `compare_many` result as one HTML document; `misses` are the gates' misses (None: no gate
    was given)."""
    f = f"F{result['beta']:g}"
    counts = (
        f"{result['shared']} shared samples, {result['labelled']} with a ground-truth label; "
        f"{result['disagreements']} where the verdicts differ (marked *)"
    )
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>unveil compare</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Detection runs compared ({len(result['runs'])})</h1>",
        _runs_table(result, baseline),
        f"<p id='counts'>{_e(counts)}</p>",
        _gates(misses),
    ]
    if result["labelled"]:
        parts.append("<h2>Metrics</h2><p class='muted'>Differences from the baseline in brackets.</p>")
        parts += [_matrix(result, key, f if key == "f" else title, baseline) for key, title in METRICS]
    else:
        parts.append(f"<p id='no-labels' class='bad'>{_e(NO_LABELS)}</p>")
    parts += ["<h2>Samples</h2>", _samples(result), "</body></html>\n"]
    return "\n".join(parts)
