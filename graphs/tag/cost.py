"""What one TAG detection costs where nothing stops the search early: model calls and tokens, worked out from the
reading (prune, roots, depth, batching, screen) the way the graph makes its calls.

The dry run of `unveil run` prices jobs with it, and `tests/graphs/test_tag_cost.py` holds it to the calls and
tokens `bench/tag_calls.py` measures (docs/tag.md). The calls are exact for a benign sample: two root calls (one
joint), the synergy review, then per layer one expander call per tree and `MAX_PARENTS_PER_CALL` parents, and the
layer's new pairs judged in calls of `max_pairs_per_call` (or, with the screen, one screen call over all of them
and one judge call over its short list). A toxic sample stops at its layer and costs less, plus one explainer call.

Tokens are text tokens counted as the scripted provider counts them (characters / 4), from a fixed part a call
(the role's prompt) and a part per parent or per pair (its path as data), fitted on the bench's samples; an image
block sent to a vision model's judge adds its provider's image tokens per judge call, and longer concept names
add to every pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from agents.tag.expander import MAX_PARENTS_PER_CALL
from agents.tag.types import MAX_ROOTS
from graphs.tag.context import TagContext

# (input tokens a call, input tokens an item, output tokens a call, output tokens an item); an item is a parent of
# the expander, a candidate pair of the judge and the screen. Fitted on bench/tag_calls.py's benign samples with
# 1, 2 and 4 roots a tree (docs/tag.md): the judge's pair is its two paths as data, about 125 characters.
ROOTS_TOKENS = (480, 0, 60, 0)
EXPANDER_TOKENS = (600, 21, 0, 80)
JUDGE_TOKENS = (445, 31.5, 5, 0)
SCREEN_TOKENS = (300, 31.5, 5, 0)


@dataclass(frozen=True)
class TagCost:
    """Model calls, input and output tokens, and cross-modal pairs of one detection."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    pairs: int = 0

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TagCost) -> TagCost:
        return TagCost(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.pairs + other.pairs,
        )


def _calls(n: int, items: float, tokens: tuple[float, float, float, float], pairs: int = 0) -> TagCost:
    """`n` calls over `items` items in all, at `tokens`' rates."""
    return TagCost(n, round(n * tokens[0] + items * tokens[1]), round(n * tokens[2] + items * tokens[3]), pairs)


def layer_sizes(ctx: TagContext, roots: int) -> list[int]:
    """Nodes of each layer of one tree (roots first) when every parent gets all the children it asks for."""
    per_node = ctx.prune == "per_node"
    per_parent = min(ctx.children_per_parent, ctx.k_max) if per_node else ctx.children_per_parent
    sizes = [roots]
    for _ in range(1, ctx.l_max):
        grown = sizes[-1] * per_parent
        sizes.append(grown if per_node else min(ctx.k_max, grown))
    return sizes


def _judged(ctx: TagContext, pairs: int) -> dict[str, TagCost]:
    """The calls that judge one layer's `pairs` new pairs, by role: in chunks, or screened first."""
    if not pairs:
        return {}
    if ctx.screen_pairs:
        short = min(ctx.screen_limit, pairs)
        return {"screen": _calls(1, pairs, SCREEN_TOKENS), "pair_judge": _calls(1, short, JUDGE_TOKENS, short)}
    return {"pair_judge": _calls(ceil(pairs / ctx.max_pairs_per_call), pairs, JUDGE_TOKENS, pairs)}


def worst_case_by_role(ctx: TagContext, roots: int = MAX_ROOTS) -> dict[str, TagCost]:
    """`worst_case` by the role whose model makes the calls (`TagContext.spec_for`): `root_extractor`,
    `expander`, `pair_judge` (the synergy review and the pair judge) and `screen`."""
    sizes = layer_sizes(ctx, roots)
    by_role = {
        "root_extractor": _calls(1 if ctx.roots_mode == "joint" else 2, 0, ROOTS_TOKENS),
        "expander": TagCost(),
        "pair_judge": _calls(1, roots * roots, JUDGE_TOKENS, roots * roots),
    }
    for layer in range(1, len(sizes)):
        frontier = sizes[layer - 1]
        if not frontier:
            break
        by_role["expander"] += _calls(2 * ceil(frontier / MAX_PARENTS_PER_CALL), 2 * frontier, EXPANDER_TOKENS)
        before, now = sum(sizes[:layer]), sum(sizes[: layer + 1])
        for role, cost in _judged(ctx, now * now - before * before).items():
            by_role[role] = by_role.get(role, TagCost()) + cost
    return by_role


def worst_case(ctx: TagContext, roots: int = MAX_ROOTS) -> TagCost:
    """The calls and tokens of one detection under `ctx`'s reading on a sample with `roots` roots a tree (the
    roots extractor's cap by default) where no pair is toxic, so every layer is built and judged."""
    return sum(worst_case_by_role(ctx, roots).values(), TagCost())
