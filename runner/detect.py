"""Detection of one image-text pair through the TAG or vanilla graph, and the one context builder for both.

`unveil detect` and `unveil evaluate detection` both build their contexts with `detection_context` and run each
sample with `detect_one`, so the same settings give the same records whichever command ran them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from agents.providers.profiles import is_demo_spec
from agents.tag.roots import RootsMode
from graphs.ingest import grant_image_roots
from graphs.tag import TagContext
from graphs.vanilla import VanillaContext
from runner.context import check_model_fields, context_settings, explicit_context
from tools.env import env_str
from tools.errors import UnveilError

if TYPE_CHECKING:
    from graphs.guard import GuardContext

# The context of one detection method: TAG, vanilla or a guard model.
DetectionContext: TypeAlias = "TagContext | VanillaContext | GuardContext"

Method = Literal["tag", "vanilla"]
METHODS: tuple[str, ...] = ("tag", "vanilla")  # and guard:NAME (see `is_guard`)


def is_guard(method: str) -> bool:
    """Whether a detection method is a guard model (`guard:NAME` or `guard:template=FILE`)."""
    return method.startswith("guard:")


def guard_model(method: str, role_models: dict[str, str], models: list[str] | tuple[str, ...]) -> str:
    """The model spec that serves a guard method: `guard.NAME_model`, else `guard_model`, else the first model."""
    name = method.removeprefix("guard:")
    return role_models.get(f"guard.{name}_model") or role_models.get("guard_model") or (models[0] if models else "")


# The embedded 135M demo model is slow on CPU and its long prompts help nobody: a smaller search shows the same
# pipeline in a fraction of the time. They are defaults: a depth given on the command line or in the environment
# (`UNVEIL_L_MAX`) wins, see `demo_defaults`.
DEMO_DEPTHS = {"l_max": 2, "k_max": 2, "children_per_parent": 2}
# ... and one joint root call instead of the paper's two entity-graph calls (one call and ~1,100 tokens less a
# sample on bench/tag_calls.py), unless the caller chose the roots mode. The pruning keeps its default (per_node):
# at l_max=2 both readings make the same calls (one expander call a tree, one judge call), per_node only lists
# k_max children of every root instead of k_max nodes in all, so the demo shows the paper's reading.
DEMO_ROOTS_MODE: RootsMode = "joint"
# The TAG reading of a run, recorded in every record and result table (`tag_reading`).
READING_FIELDS = ("prune", "roots_mode", "l_max", "k_max", "children_per_parent", "toxic_pairs")
SAMPLE_FIELDS = ("image", "image_description", "text", "base_dir")


class DetectionMethodError(UnveilError, ValueError):
    """A detection method that is neither `tag`, `vanilla` nor `guard:NAME`."""


def detection_context(
    method: str,
    models: dict[str, str] | None = None,
    *,
    image_store: str = "",
    l_max: int | None = None,
    k_max: int | None = None,
    children: int | None = None,
    screen: bool = False,
    announce: bool = True,
    reading: dict[str, Any] | None = None,
) -> DetectionContext:
    """The graph context of a detection run.

    `models` maps context fields (`model`, `<role>_model`) to specs; fields the method's context lacks are
    refused with the valid names. Depths left as None use the environment, else the defaults, or the demo depths
    when every role runs on the embedded demo model (`tag_context`). `reading` holds the TAG readings the caller
    chose (`prune`, `roots_mode`, `toxic_pairs`; absent ones take the environment or the context's default); a
    toxic-pair file is read here once, so a bad one is one error before the first sample.
    """
    if is_guard(method):
        return _guard_context(method, models or {}, image_store)
    if method not in METHODS:
        raise DetectionMethodError(f"unknown detection method {method!r}: use tag, vanilla or guard:NAME")
    kw: dict[str, Any] = {k: v for k, v in (models or {}).items() if not k.startswith("guard")}
    # A role of either detector is accepted for both (one --role-model list serves `--methods vanilla,tag`);
    # a misspelt one is refused with the valid roles.
    check_model_fields((TagContext, VanillaContext), kw)
    if image_store:
        kw["image_store"] = image_store
    if method == "vanilla":
        own = set(VanillaContext.__dataclass_fields__)
        return explicit_context(VanillaContext, **{k: v for k, v in kw.items() if k in own})
    for name, value in (("l_max", l_max), ("k_max", k_max), ("children_per_parent", children)):
        if value is not None:
            kw[name] = value
    if screen:
        kw["screen_pairs"] = True
    kw.update({k: v for k, v in (reading or {}).items() if v is not None})
    return tag_context(kw, announce=announce)


def _guard_context(method: str, roles: dict[str, str], image_store: str) -> GuardContext:
    """The context of a guard method: its model (`guard_model`) and the run's default model and store."""
    from graphs.guard import GuardContext

    spec = guard_model(method, roles, [roles["model"]] if roles.get("model") else [])
    guard_kw: dict[str, Any] = {"guard": method.removeprefix("guard:"), "guard_model": spec}
    if roles.get("model"):
        guard_kw["model"] = roles["model"]
    if image_store:
        guard_kw["image_store"] = image_store
    return explicit_context(GuardContext, **guard_kw)


def tag_context(settings: dict[str, Any], *, announce: bool = True) -> TagContext:
    """A TAG context from the caller's `settings` (fields of `TagContext`), which win over `UNVEIL_<FIELD>`.

    When every role runs on the embedded demo model, the demo's smaller search (`demo_defaults`) takes the place of
    the field defaults it covers: the caller's settings and the environment still win, and the demo values are given
    to the constructor (nothing is changed on the context after it is built).
    """
    ctx = explicit_context(TagContext, **settings)
    demo = demo_defaults(settings) if all(is_demo_spec(spec) for spec in ctx.models().values()) else {}
    if demo:
        ctx = explicit_context(TagContext, **settings, **demo)
        if announce:
            print(
                f"demo settings for the embedded model: l_max={ctx.l_max}, k_max={ctx.k_max}, "
                f"{ctx.children_per_parent} children per parent, {ctx.roots_mode} root call, prune={ctx.prune}",
                file=sys.stderr,
            )
    if ctx.toxic_pairs:
        from agents.tag.toxic_pairs import load_toxic_pairs

        load_toxic_pairs(ctx.toxic_pairs)
    return ctx


def demo_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """The demo settings (`DEMO_DEPTHS`, `DEMO_ROOTS_MODE`) that neither `settings` nor `UNVEIL_<FIELD>` gives.

    A depth the caller chose (`l_max` or `k_max`, on the command line or in the environment) turns the demo search
    off: the caller asked for a search of that size, not the demo's. The children and the roots mode are kept one
    by one."""

    def given(name: str) -> bool:
        return name in settings or env_str(f"UNVEIL_{name.upper()}") is not None

    if given("l_max") or given("k_max"):
        return {}
    demo: dict[str, Any] = {**DEMO_DEPTHS, "roots_mode": DEMO_ROOTS_MODE}
    return {name: value for name, value in demo.items() if not given(name)}


def tag_reading(ctx: DetectionContext) -> dict[str, Any] | None:
    """The TAG reading of a context (`READING_FIELDS`: prune, roots_mode, l_max, k_max, children_per_parent and the
    toxic-pair file), or None for a context that builds no TAG (vanilla, guard)."""
    if not isinstance(ctx, TagContext):
        return None
    return {name: getattr(ctx, name) for name in READING_FIELDS}


def detection_settings(ctx: DetectionContext, method: str) -> dict[str, Any]:
    """What makes a detection output's records (its identity, see `runner.output_identity.OutputIdentity`): the
    method, every role's model and the graph settings of `ctx`, and the content of a toxic-pair file (an edited
    set changes the records as another file would)."""
    settings = {"method": method, **context_settings(ctx)}
    if isinstance(ctx, TagContext) and ctx.toxic_pairs:
        from agents.tag.toxic_pairs import fingerprint

        settings["toxic_pairs_sha256"] = fingerprint(ctx.toxic_pairs)
    return settings


def check_detection_config(method: str) -> None:
    """Settings errors of a detection method that would otherwise fail every sample (an unknown guard, a template
    file that cannot be read): raised once, as an `UnveilError` naming the setting, before the first sample."""
    if is_guard(method):
        from agents.guard import get_guard

        get_guard(method)


# The input a detection record keeps, so a result shows what was judged: the text, the image description, the image
# as the sample named it (path, URL or store id); `image_id` and `image_path` (the stored copy) come from the graph.
INPUT_FIELDS = ("text", "image_description", "image")
# The ground truth a batch input may carry, kept under the names the run files of `unveil evaluate detection` use
# (`label` 1 toxic / 0 benign, `category`), so `unveil compare` scores a `detect --input` output as it scores those;
# the method's own category (vanilla, guards) then moves to `predicted_category`, as it does there.
TRUTH_FIELDS = ("label", "category")
# What a batch record keeps of its input line, a failed one included.
BATCH_INPUT_FIELDS = (*INPUT_FIELDS, *TRUTH_FIELDS)


def with_ground_truth(rec: dict[str, Any], sample: dict[str, Any]) -> dict[str, Any]:
    """A batch record with its input's ground truth (`TRUTH_FIELDS`, null where the input line has none) and the
    method's category as `predicted_category` (null where it named none)."""
    out = {k: v for k, v in rec.items() if k != "category"}
    # vanilla and guards name a category beside the verdict; TAG in its finding
    out["predicted_category"] = rec["category"] if "category" in rec else (rec.get("finding") or {}).get("category")
    out.update({k: sample.get(k) for k in TRUTH_FIELDS})
    return out


def result_record(out: dict[str, Any], ctx: DetectionContext, sample: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON record of a detection: the sample's input (`INPUT_FIELDS`, null where the sample had none), the
    graph output (with `image_id` and `image_path`, null without an image), the model specs used and, for TAG, the
    reading that built the trees (`tag_reading`)."""
    rec: dict[str, Any] = {k: (sample or {}).get(k) for k in INPUT_FIELDS}
    rec.update({k: v for k, v in out.items() if k not in (*INPUT_FIELDS, "base_dir")})
    rec.setdefault("image_id", None)
    rec.setdefault("image_path", None)
    rec["models"] = ctx.models()
    reading = tag_reading(ctx)
    if reading is not None:
        rec["tag_reading"] = reading
    if "visual" in rec:
        rec["trees"] = {"visual": rec.pop("visual"), "textual": rec.pop("textual")}
    return rec


async def detect_one(sample: dict[str, Any], ctx: DetectionContext, method: str) -> dict[str, Any]:
    """Run one sample (`image`, `image_description`, `text`, `base_dir`) through the chosen graph."""
    from graphs.guard import graph as guard_graph
    from graphs.tag import graph as tag_graph
    from graphs.vanilla import graph as vanilla_graph

    # The graphs take the same sample fields; their typed signatures differ only in the context class.
    graph: Any = vanilla_graph if method == "vanilla" else guard_graph if is_guard(method) else tag_graph
    fields = {k: sample.get(k) for k in SAMPLE_FIELDS if sample.get(k) is not None}
    # The run layer's callers (the CLI, evaluation) read their own dataset folder and store: they grant them here,
    # in this process. The graphs never trust a sample's base_dir or a context's folders (an SDK caller sets those).
    with grant_image_roots([fields.get("base_dir") or "", getattr(ctx, "image_store", "")]):
        out = await graph.ainvoke(fields, context=ctx)
    return result_record(out, ctx, fields)
