"""Model calls, tokens and wall time of TAG detection against a naive detector (the paper's complexity analysis).

The naive detector builds both full trees first (one expansion call per node; the same trees as TAG's default
reading: three children a parent, up to k_max per node) and then judges every cross-modal pair with one call each,
layer by layer. TAG (its default reading) expands each tree with one call a layer, judges a layer's new pairs in
calls of up to 200, and stops at the shallowest toxic layer. Both run on the same scripted model with injected
latency (`--latency`, seconds per call) and the same concurrency limit, so the wall times compare critical paths,
not sums. `--latency 0` is the smoke mode (tests/bench/test_bench_smoke.py): the counts do not depend on it.

    python bench/tag_calls.py [--latency 0.05] [--l-max 4] [--k-max 6]

Targets: <= 4 calls for a toxic root pair (two root graphs, the synergy review, the explainer); >= 30x fewer
calls than naive on benign samples; with `prune=per_layer`, <= 3*l_max + 3 calls for a benign sample.

A second table puts the readings of the paper (docs/tag.md) side by side on the same scripted samples: k_max per
node (`prune=per_node`, the default, §3.2 Step 2) or per layer (`per_layer`, §7's estimate, cheaper), and the
root concepts from two entity-graph calls (`roots_mode=separate`, the default) or one joint call (`joint`). The
`covert` sample hides its toxic pair on the least probable path (root -> c2 -> d2 in both trees, path probability
0.04 each), which per-layer pruning drops and per-node pruning keeps. The paper's optional screen (§10.2,
`screen_pairs`, off by default) is a third reading, `per_node+screen`: one screen call over a layer's new pairs
short-lists at most `screen_limit` (8) for the judge. The last lines give the worst case of a wide sample: a benign
one with `--wide-roots` (default 4, the cap) roots a tree, under each reading, beside the estimate `unveil run
--dry-run` prints for it (`graphs/tag/cost.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from agents.content import build_messages
from agents.gateway import Gateway, GatewaySettings, set_gateway
from agents.tag.expander import Expansion
from agents.tag.judges import PairJudgement
from agents.tag.roots import Roots
from agents.usage import RunUsage, merge_usage
from graphs.tag import TagContext, graph
from graphs.tag.tree import (
    Node,
    grow_layer,
    make_roots,
    new_pairs,
)

PROBS = (0.5, 0.3, 0.2)
# Children are named by layer (c0.. under the roots, d0.. under c-nodes, ...): a child equal to its parent is
# dropped by the tree rules, so every layer needs new names. Each rule matches the parents' concepts in the request.
LAYER_PREFIXES = "cdefgh"


def layer_children(prefix: str) -> list[dict]:
    """Three children named `prefix`0.. with probabilities 0.5, 0.3, 0.2."""
    return [{"concept": f"{prefix}{i}", "association": "similarity", "probability": p} for i, p in enumerate(PROBS)]


def expander_rules() -> list[dict]:
    """The expander's answers for every layer (12 parents' worth, matched to parents in order)."""
    pairs = reversed(list(zip(LAYER_PREFIXES, LAYER_PREFIXES[1:], strict=False)))
    rules = [
        {
            "when": f'"concept": "{parent}',
            "then": {"expansions": [{"parent_id": "?", "children": layer_children(child)}] * 12},
        }
        for parent, child in pairs
    ]
    return [*rules, {"when": "", "then": {"expansions": [{"parent_id": "?", "children": layer_children("c")}] * 12}}]


# The naive full search asks every node for k_max children (the paper's Step 2), so each layer holds k_max nodes.
NAIVE_CHILDREN = [{"concept": f"n{i}", "association": "similarity", "probability": 1 / 6} for i in range(6)]
NO_PAIRS = {"toxic_pairs": []}


IMAGE_GRAPH = {
    "entities": [
        {
            "id": "e1",
            "name": "white powder",
            "attributes": [{"association": "similarity", "value": "crystalline drug"}],
        },
        {"id": "e2", "name": "zip bag", "parent_id": "e1"},
    ],
    "relations": [{"source_id": "e2", "relation": "holds", "target_id": "e1"}],
}
TEXT_GRAPH = {
    "entities": [
        {"id": "e1", "name": "usual number", "attributes": [{"association": "cultural", "value": "dealer contact"}]}
    ],
    "relations": [],
}


def covert_pair(prune: str, l_max: int, k_max: int, children: int) -> str:
    """The pair id of root -> c2 -> d2 in both trees under `prune`, or '' when pruning drops it (simulated with
    the same expansion answers the graph gets)."""
    trees: dict[str, list[Node]] = {}
    for prefix, root in (("v", "white powder"), ("t", "usual number")):
        nodes = make_roots(prefix, [root])
        for layer in range(1, min(3, l_max)):
            frontier = [n for n in nodes if n["layer"] == layer - 1]
            entries = [{"parent_id": p["id"], "children": layer_children(LAYER_PREFIXES[layer - 1])} for p in frontier]
            nodes += grow_layer(
                frontier,
                entries,
                layer=layer,
                prefix=prefix,
                children_per_parent=children,
                k_max=k_max,
                allowed_types=["similarity"],
                prune=prune,
            )  # type: ignore[arg-type]
        trees[prefix] = nodes

    def find(nodes: list[Node]) -> str:
        by_id = {n["id"]: n for n in nodes}
        return next(
            (
                n["id"]
                for n in nodes
                if n["layer"] == 2 and n["concept"] == "d2" and by_id[n["parent"] or ""]["concept"] == "c2"
            ),
            "",
        )

    v, t = find(trees["v"]), find(trees["t"])
    return f"{v}|{t}" if v and t else ""


def screen_rules(target: str) -> list[dict]:
    """The optional screen's answers (`--screen`, the paper's §10.2 "Filtering out potential toxic pairs"): the
    toxic pair where the layer holds it, else a full short list of the layer's new pairs (every layer has at
    least three nodes a tree), so the judge still gets a call each layer, as a real screen's short list would."""
    rules = [{"when": f'"{target}"', "then": {"suspicious_pair_ids": [target]}}] if target else []
    for layer in range(LAYERS_SCREENED, 0, -1):
        ids = [f"v{layer}.{i}|t{layer}.{j}" for i in range(3) for j in range(3)][:SCREEN_LIMIT]
        rules.append({"when": f'"v{layer}.0|t{layer}.0"', "then": {"suspicious_pair_ids": ids}})
    return rules


LAYERS_SCREENED = 9  # deeper than any --l-max the bench is run with
SCREEN_LIMIT = 8  # TagContext.screen_limit's default


def script_for(kind: str, covert: str = "") -> dict:
    """Scripted answers for an overt, medium (toxic pair at layer 2), covert (toxic pair `covert`) or benign
    sample."""
    target = {"medium": "v2.0|t2.0", "covert": covert}.get(kind, "")
    toxic_pair = {"toxic_pairs": [{"pair_id": target, "category": "drugs", "reason": "hidden sale"}]}
    root_pair = {"toxic_pairs": [{"pair_id": "v0.0|t0.0", "category": "drugs", "reason": "overt"}]}
    judge_rules = ([{"when": f'"{target}"', "then": toxic_pair}] if target else []) + [{"when": "", "then": NO_PAIRS}]
    # Only the naive detector judges the root pair with the pair judge (TAG uses the synergy review).
    naive_rules = ([{"when": '"v0.0|t0.0"', "then": root_pair}] if kind == "overt" else []) + judge_rules
    return {
        "root_extractor.image": [{"when": "", "then": IMAGE_GRAPH}],
        "root_extractor.text": [{"when": "", "then": TEXT_GRAPH}],
        "root_extractor": [{"when": "", "then": {"visual_roots": ["white powder"], "textual_roots": ["usual number"]}}],
        "naive_roots": [{"when": "", "then": {"visual_roots": ["white powder"], "textual_roots": ["usual number"]}}],
        "root_judge": [
            {
                "when": "",
                "then": {
                    "toxic": kind == "overt",
                    "visual_id": "v0.0",
                    "textual_id": "t0.0",
                    "category": "drugs",
                    "reason": "r",
                },
            }
        ],
        "expander": expander_rules(),
        "pair_screen": screen_rules(target),
        "pair_judge": judge_rules,
        "explainer": [{"when": "", "then": {"explanation": "e", "hidden_meaning": "h"}}],
        # the naive expander's children are named by layer too (its request carries the layer number)
        "naive_expander": [
            {
                "when": f'<data name="layer">\n{layer}\n',
                "then": {
                    "expansions": [
                        {
                            "parent_id": "?",
                            "children": [dict(c, concept=f"{c['concept']}.{layer}") for c in NAIVE_CHILDREN],
                        }
                    ]
                },
            }
            for layer in range(1, 10)
        ],
        "naive_judge": naive_rules,
    }


class _Usage:
    def __init__(self) -> None:
        self.usage: RunUsage | None = None

    def add(self, u: RunUsage) -> None:
        self.usage = merge_usage(self.usage, u)


async def naive_detect(
    gw: Gateway, spec: str, l_max: int, k_max: int, prune: str = "per_node", children: int = 3
) -> tuple[bool, RunUsage]:
    """Full trees (one call per node) of the same shape as TAG's (`children` per parent, pruned by `prune`), then
    one call per pair, layer by layer."""
    acc = _Usage()
    sys_prompt = "naive"
    res = await gw.structured(
        role="naive_roots", spec=spec, schema=Roots, messages=build_messages(sys_prompt, {"x": "roots"})
    )
    acc.add(res.usage)
    trees = {"v": make_roots("v", res.value.visual_roots), "t": make_roots("t", res.value.textual_roots)}

    async def expand_node(prefix: str, node: dict, layer: int) -> list[dict]:
        r = await gw.structured(
            role=f"naive_expander.{prefix}",
            spec=spec,
            schema=Expansion,
            messages=build_messages(sys_prompt, {"parent": node["id"], "layer": layer}),
        )
        acc.add(r.usage)
        return [dict(e.model_dump(), parent_id=node["id"]) for e in r.value.expansions[:1]]

    for layer in range(1, l_max):
        for prefix in ("v", "t"):
            frontier = [n for n in trees[prefix] if n["layer"] == layer - 1]
            entries = await asyncio.gather(*[expand_node(prefix, n, layer) for n in frontier])
            trees[prefix] += grow_layer(
                frontier,
                [e for es in entries for e in es],
                layer=layer,
                prefix=prefix,
                children_per_parent=children,
                k_max=k_max,
                allowed_types=["similarity"],
                prune=prune,  # type: ignore[arg-type]
            )

    async def judge(v: dict, t: dict) -> bool:
        pid = f"{v['id']}|{t['id']}"
        r = await gw.structured(
            role="naive_judge",
            spec=spec,
            schema=PairJudgement,
            messages=build_messages(sys_prompt, {"candidate_pairs": [{"pair_id": pid}]}),
        )
        acc.add(r.usage)
        return any(p.pair_id == pid for p in r.value.toxic_pairs)

    for layer in range(0, l_max):
        pairs = new_pairs(trees["v"], trees["t"], layer)
        verdicts = await asyncio.gather(*[judge(v, t) for v, t in pairs])
        if any(verdicts):
            return True, acc.usage  # type: ignore[return-value]
    return False, acc.usage  # type: ignore[return-value]


def _totals(usage: RunUsage) -> tuple[int, int]:
    total = usage["total"]
    return total["calls"], total["input_tokens"] + total["output_tokens"]


async def run_tag(spec: str, concurrency: int, **settings: object) -> tuple[dict, float]:
    """One TAG detection of the bench sample on its own gateway; (output, wall seconds)."""
    set_gateway(Gateway(GatewaySettings(cache_path=None, max_concurrency=concurrency)))
    t0 = time.perf_counter()
    out = await graph.ainvoke(
        {"image_description": "a bag of white powder", "text": "text the usual number"},
        context=TagContext(model=spec, **settings),
    )  # type: ignore[arg-type]
    return out, time.perf_counter() - t0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--l-max", type=int, default=4)
    parser.add_argument("--k-max", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent calls per backend")
    parser.add_argument(
        "--wide-roots", type=int, choices=range(5), default=4, help="roots a tree of the wide benign sample (0: skip)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tag-bench-"))
    rows = []
    for kind in ("overt", "medium", "benign"):
        path = tmp / f"{kind}.json"
        # naive roles share the TAG script's rules (the pair judge's rules match on the pair id)
        path.write_text(json.dumps(script_for(kind)))
        spec = f"scripted:{path}?latency={args.latency}"
        out, tag_wall = await run_tag(spec, args.concurrency, l_max=args.l_max, k_max=args.k_max)
        gw2 = Gateway(GatewaySettings(cache_path=None, max_concurrency=args.concurrency))
        t0 = time.perf_counter()
        naive_toxic, naive_usage = await naive_detect(gw2, spec, args.l_max, args.k_max)
        naive_wall = time.perf_counter() - t0
        tag_calls, tag_tokens = _totals(out["usage"])
        naive_calls, naive_tokens = _totals(naive_usage)
        rows.append(
            {
                "sample": kind,
                "toxic": out["toxic"],
                "mtc": round(out["mtc"], 4),
                "tag_calls": tag_calls,
                "tag_tokens": tag_tokens,
                "tag_wall_s": round(tag_wall, 2),
                "naive_toxic": naive_toxic,
                "naive_calls": naive_calls,
                "naive_tokens": naive_tokens,
                "naive_wall_s": round(naive_wall, 2),
                "calls_ratio": round(naive_calls / max(1, tag_calls), 1),
            }
        )
    cols = list(rows[0])
    print(f"l_max={args.l_max} k_max={args.k_max} latency={args.latency}s/call concurrency={args.concurrency}")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    benign = rows[-1]
    print(
        f"\ntargets: overt calls {rows[0]['tag_calls']} <= 4: {rows[0]['tag_calls'] <= 4}; "
        f"benign ratio {benign['calls_ratio']}x >= 30x: {benign['calls_ratio'] >= 30}"
    )
    await readings_table(args, tmp)


async def readings_table(args: argparse.Namespace, tmp: Path) -> None:
    """The paper's readings side by side: k_max per node (default) or per layer; roots from two graph calls
    (default) or one joint call. Prints calls / tokens / found MTC per sample kind, and the per-layer target."""
    per_layer_benign = 0
    print("\nreadings (calls / tokens / found MTC; '-' = not found, MTC 1):")
    kinds = ("overt", "medium", "covert", "benign")
    print("roots_mode | prune | " + " | ".join(f"{k} calls | {k} tokens | {k} mtc" for k in kinds))
    for roots_mode, reading in READINGS:
        prune, screen = reading.split("+")[0], reading.endswith("+screen")
        cells = []
        for kind in kinds:
            covert = covert_pair(prune, args.l_max, args.k_max, 3) if kind == "covert" else ""
            path = tmp / f"{kind}-{roots_mode}-{prune}.json"
            path.write_text(json.dumps(script_for(kind, covert)))
            out, _ = await run_tag(
                f"scripted:{path}?latency={args.latency}",
                args.concurrency,
                l_max=args.l_max,
                k_max=args.k_max,
                roots_mode=roots_mode,
                prune=prune,
                screen_pairs=screen,
            )
            calls, tokens = _totals(out["usage"])
            cells += [str(calls), str(tokens), f"{out['mtc']:.4f}" if out["toxic"] else "-"]
            if (roots_mode, reading, kind) == ("separate", "per_layer", "benign"):
                per_layer_benign = calls
        print(f"{roots_mode} | {reading} | " + " | ".join(cells))
    limit = 3 * args.l_max + 3
    print(f"target: per_layer benign calls {per_layer_benign} <= {limit}: {per_layer_benign <= limit}")
    if args.wide_roots:
        await wide_benign(args, tmp)


# The readings side by side: (roots_mode, prune), `+screen` with the paper's optional screen (a named option, off
# by default: `screen_pairs`, `unveil detect --screen`).
READINGS = [
    ("separate", "per_node"),
    ("separate", "per_layer"),
    ("separate", "per_node+screen"),
    ("joint", "per_node"),
    ("joint", "per_layer"),
]

# Root names of the wide sample: none starts with a layer prefix (c, d, e ...), which the expander rules match.
WIDE_ROOTS = {"v": ["powder", "scale", "bag", "rolled note"], "t": ["usual number", "tonight", "pay up front", "quiet"]}


def wide_script(roots: int) -> dict:
    """The benign sample's script with `roots` roots a tree (at most 4)."""
    script = script_for("benign")
    for role, prefix in (("root_extractor.image", "v"), ("root_extractor.text", "t")):
        entities = [{"name": x} for x in WIDE_ROOTS[prefix][:roots]]
        script[role] = [{"when": "", "then": {"entities": entities, "relations": []}}]
    joint = {"visual_roots": WIDE_ROOTS["v"][:roots], "textual_roots": WIDE_ROOTS["t"][:roots]}
    script["root_extractor"] = [{"when": "", "then": joint}]  # roots_mode=joint
    return script


async def measure_wide(
    tmp: Path, roots: int, *, latency: float = 0.0, concurrency: int = 8, **settings: object
) -> tuple[int, int, int]:
    """(calls, tokens, pairs judged) of TAG under `settings` on the benign sample with `roots` roots a tree: the
    worst case that `graphs.tag.cost.worst_case` estimates (tests/graphs/test_tag_cost.py compares the two)."""
    path = tmp / f"wide-benign-{roots}.json"
    path.write_text(json.dumps(wide_script(roots)))
    out, _ = await run_tag(f"scripted:{path}?latency={latency}", concurrency, **settings)
    calls, tokens = _totals(out["usage"])
    return calls, tokens, out["pairs_judged"]


async def wide_benign(args: argparse.Namespace, tmp: Path) -> None:
    """The worst case of a sample with `--wide-roots` roots a tree: nothing to find, so every layer is built and
    judged. Prints calls / tokens / pairs judged for each pruning, with the screen, and what `unveil run
    --dry-run` estimates for it (`graphs.tag.cost`)."""
    from graphs.tag.cost import worst_case

    n = args.wide_roots
    print(f"\nwide benign sample ({n} roots a tree; calls / tokens / pairs judged / estimated calls / tokens):")
    for reading in ("per_node", "per_layer", "per_node+screen"):
        settings = {
            "l_max": args.l_max,
            "k_max": args.k_max,
            "prune": reading.split("+")[0],
            "screen_pairs": reading.endswith("+screen"),
        }
        calls, tokens, pairs = await measure_wide(
            tmp, n, latency=args.latency, concurrency=args.concurrency, **settings
        )
        est = worst_case(TagContext(model="scripted:bench", **settings), roots=n)
        print(f"wide | {reading} | {calls} | {tokens} | {pairs} | {est.calls} | {est.tokens}")


if __name__ == "__main__":
    asyncio.run(main())
