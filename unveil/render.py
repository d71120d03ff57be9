"""A picture of a TAG that opens offline: both trees with edge probabilities, the toxic path highlighted.

Written with matplotlib (Agg), so `.png`, `.svg` and `.pdf` all work without a display.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HIGHLIGHT = "#c0392b"
NORMAL = "#7f8c8d"


def _layout(nodes: list[dict[str, Any]], x0: float, width: float) -> dict[str, tuple[float, float]]:
    by_layer: dict[int, list[dict[str, Any]]] = {}
    for n in nodes:
        by_layer.setdefault(n["layer"], []).append(n)
    pos = {}
    for layer, items in by_layer.items():
        for i, n in enumerate(items):
            pos[n["id"]] = (x0 + width * (i + 1) / (len(items) + 1), -layer)
    return pos


def _path_ids(nodes: list[dict[str, Any]], node_id: str | None) -> set[str]:
    by_id = {n["id"]: n for n in nodes}
    out: set[str] = set()
    while node_id is not None and node_id in by_id:
        out.add(node_id)
        node_id = by_id[node_id]["parent"]
    return out


def render_tag(result: dict[str, Any], path: str | Path) -> Path:
    """Draw `result` (an `unveil detect --json` record) to `path`."""
    trees = result.get("trees") or {"visual": result.get("visual", []), "textual": result.get("textual", [])}
    visual, textual = trees.get("visual", []), trees.get("textual", [])
    finding = result.get("finding")
    hv = _path_ids(visual, finding["visual"]["id"]) if finding else set()
    ht = _path_ids(textual, finding["textual"]["id"]) if finding else set()
    depth = max([n["layer"] for n in visual + textual] or [0]) + 1
    widest = max([sum(1 for n in visual if n["layer"] == l) for l in range(depth)] + [sum(1 for n in textual if n["layer"] == l) for l in range(depth)] + [1])
    fig, ax = plt.subplots(figsize=(max(10, 2.6 * widest * 2), 2.2 * depth + 2))
    for nodes, x0, title, hi in ((visual, 0.0, "Visual association tree", hv), (textual, 1.0, "Textual association tree", ht)):
        pos = _layout(nodes, x0, 1.0)
        ax.text(x0 + 0.5, 0.6, title, ha="center", fontsize=12, weight="bold")
        for n in nodes:
            if n["parent"] and n["parent"] in pos:
                (x1, y1), (x2, y2) = pos[n["parent"]], pos[n["id"]]
                on = n["id"] in hi
                ax.plot([x1, x2], [y1, y2], color=HIGHLIGHT if on else NORMAL, lw=2.5 if on else 1, zorder=1)
                ax.text((x1 + x2) / 2, (y1 + y2) / 2, f"{n['prob']:.2f}\n{n.get('association') or ''}", fontsize=7,
                        ha="center", va="center", color=HIGHLIGHT if on else "#34495e",
                        bbox=dict(fc="white", ec="none", alpha=0.8))
        for n in nodes:
            x, y = pos[n["id"]]
            on = n["id"] in hi
            ax.text(x, y, "\n".join(textwrap.wrap(n["concept"], 18)) + f"\np={n['path_prob']:.3f}", ha="center", va="center",
                    fontsize=8, zorder=2, bbox=dict(boxstyle="round", fc="#fdecea" if on else "#ecf0f1",
                                                    ec=HIGHLIGHT if on else NORMAL, lw=2 if on else 1))
        if finding:
            target = finding["visual"]["id"] if x0 == 0.0 else finding["textual"]["id"]
            if target in pos:
                if x0 == 0.0:
                    vpos = pos[target]
                else:
                    tpos = pos[target]
    if finding:
        ax.annotate("", xy=tpos, xytext=vpos, arrowprops=dict(arrowstyle="<->", color=HIGHLIGHT, lw=2, ls="--"))
    verdict = (f"TOXIC ({finding.get('category', '')}), MTC = {result.get('mtc', 0):.4f}" if finding
               else f"No toxic pair found, MTC = {result.get('mtc', 1.0):.2f}")
    explanation = "\n".join(textwrap.wrap(result.get("explanation", ""), 140)[:4])
    ax.set_title(verdict + ("\n" + explanation if explanation else ""), fontsize=10)
    ax.set_xlim(-0.05, 2.05)
    ax.set_ylim(-depth + 0.4, 1.0)
    ax.axis("off")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight", dpi=120)
    plt.close(fig)
    return out
