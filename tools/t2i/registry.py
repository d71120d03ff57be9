"""`open_generator(spec, ...)`: one text-to-image generator per spec and options, per process.

The part of a spec before the first ':' picks its kind: one `tools.t2i.kind.GeneratorKind` record per kind, each in
its module of `tools/t2i/kinds/` (`diffusers:` for SD 1.x/2.x or SDXL, `sd-np:`, `sld-weak:` ... `sld-max:`,
`esd:`, `openai:`), collected in `GENERATOR_KINDS`; `registered:` names an object given to `register_generator`.
A pipeline spec may add `?accel=` (see `tools.t2i.fast`). The registry checks a spec's options and parameters
against its kind's record, so no code here names a kind. The spec grammar is documented in docs/tools.md; the
options, typed and documented, are `tools.t2i.options.GeneratorOptions` (a kind refuses any option not its own with
`UnsupportedOptionError`), and `check_generator(spec)` refuses a spec that cannot be opened here before any work.

Why one constructor: graphs, training and evaluation all open generators with `open_generator`, which takes the
image store and the over-long-prompt policy explicitly (`LONG_PROMPT_POLICIES`), so every command renders the same
prompt the same way. Callers with a generator object of their own `register_generator` it under a `registered:`
spec that any graph context can name, and a distributed engine installs itself with `set_remote_generators`, so
graph contexts and records are the same whichever process renders.
"""

from __future__ import annotations

import threading
from typing import Literal, Protocol, Unpack, get_args
from urllib.parse import parse_qs

from tools.extras import require_extra
from tools.image_store import ImageStore, get_image_store
from tools.t2i.base import ImageGenerator
from tools.t2i.errors import UnsupportedOptionError, renamed_note
from tools.t2i.kind import GeneratorKind
from tools.t2i.kinds import diffusers, esd, openai, sld
from tools.t2i.kinds.esd import ESD_NEGATIVE_DEFAULT as ESD_NEGATIVE_DEFAULT
from tools.t2i.options import GeneratorOptions, StoreLike

# Generator options that were renamed: refused with their new spelling.
RENAMED_OPTIONS = {"compile": 'accel="compile"'}
# One record per kind, each from its module in `tools/t2i/kinds/` (a new kind: its module and one entry here).
GENERATOR_KINDS: dict[str, GeneratorKind] = {
    kind.name: kind for kind in (diffusers.DIFFUSERS, diffusers.SD_NP, esd.ESD, openai.OPENAI, *sld.KINDS)
}
KINDS: tuple[str, ...] = tuple(GENERATOR_KINDS)

# The default spec of each use, in one place: IPR (the IPR paper's SD 1.4) and CTD generation (SD 1.5).
DEFAULT_IPR_GENERATOR = "diffusers:CompVis/stable-diffusion-v1-4"
DEFAULT_CTD_GENERATOR = "diffusers:stable-diffusion-v1-5/stable-diffusion-v1-5"
# Over-long prompts (past the CLIP text encoder's 77 tokens): "truncate" cuts them as diffusers' own pipelines do
# and as both papers did (the default of every command); "error" refuses them with a PromptError.
LongPrompts = Literal["truncate", "error"]
LONG_PROMPT_POLICIES: tuple[str, ...] = get_args(LongPrompts)
DEFAULT_LONG_PROMPTS: LongPrompts = "truncate"
REGISTERED = "registered"

_CACHE: dict[tuple[str, tuple[tuple[str, object], ...]], ImageGenerator] = {}
_REGISTERED: dict[str, ImageGenerator] = {}
_CACHE_LOCK = threading.Lock()


class RemoteGenerators(Protocol):
    """Where generators come from when a distributed engine renders (the run layer's Ray engine installs one)."""

    def open(self, spec: str, *, store: ImageStore, long_prompts: str, options: GeneratorOptions) -> ImageGenerator:
        """A generator that renders `spec` elsewhere and puts the images into `store` (same ids as local)."""
        ...


_REMOTE: list[RemoteGenerators] = []  # at most one: the engine of the current run


def _option_key(value: object) -> object:
    # Objects (clients, stores) are keyed by identity; plain values by value.
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    if isinstance(value, ImageStore):
        return ("store", str(value.root))
    return ("id", id(value))


def _resolve_store(store: StoreLike) -> ImageStore | None:
    if store is None or isinstance(store, ImageStore):
        return store
    return get_image_store(store)


def _check_options(spec: str, options: GeneratorOptions, allowed: frozenset[str]) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise UnsupportedOptionError(
            f"option(s) {', '.join(unknown)} not supported by text-to-image spec {spec!r}; "
            f"supported: {', '.join(sorted(allowed))}{renamed_note(unknown, RENAMED_OPTIONS)}"
        )


def parse_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """Split `kind:model?key=value&...` into (kind, model, query); raises on an unknown kind."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UnsupportedOptionError(
            f"text-to-image spec {spec!r} must look like 'kind:model'; kinds: {', '.join(KINDS)}"
        )
    kind, rest = spec.split(":", 1)
    if kind not in GENERATOR_KINDS:
        raise UnsupportedOptionError(f"text-to-image spec {spec!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    model, _, query_text = rest.partition("?")
    if not model:
        raise UnsupportedOptionError(f"text-to-image spec {spec!r} names no model")
    query = {k: v[-1] for k, v in parse_qs(query_text, keep_blank_values=True).items()}
    return kind, model, query


def check_generator(spec: str) -> None:
    """Refuse a spec that cannot be opened here: a malformed spec, a diffusers kind without the 't2i' extra
    (`tools.extras.MissingExtraError`), or a Hub id that is neither cached nor downloadable now
    (`tools.hub.HubUnavailableError`: offline, `HF_HUB_OFFLINE`, the hub unreachable; said at once, not after a
    minute of hub retries). Commands call it before any work, so a run never fails at its first render.
    """
    if isinstance(spec, str) and spec.startswith(f"{REGISTERED}:"):
        return
    kind, model, _query = parse_spec(spec)
    if GENERATOR_KINDS[kind].pipeline:
        require_extra("t2i", f"text-to-image spec {spec!r}")
        from tools.t2i.pipeline_loading import looks_like_path

        if not looks_like_path(model):
            from tools.hub import hub_access

            hub_access(model, "model_index.json", what="text-to-image model")


def _build(spec: str, store: StoreLike, options: GeneratorOptions) -> ImageGenerator:
    name, model, query = parse_spec(spec)
    kind = GENERATOR_KINDS[name]
    _check_options(spec, options, kind.options)
    unknown = sorted(set(query) - set(kind.params))
    if unknown and not kind.params:
        raise UnsupportedOptionError(f"text-to-image spec {spec!r}: {name} takes no '?' parameters")
    if unknown:
        raise UnsupportedOptionError(
            f"text-to-image spec {spec!r}: parameter(s) {unknown} not supported ({name} takes "
            f"{', '.join(p + '=' for p in kind.params)}{' only' if len(kind.params) == 1 else ''})"
        )
    if kind.pipeline:
        # The spec and options first (an old spelling is named at once, offline too), then whether the model can
        # be had.
        check_generator(spec)
    return kind.build(spec, model, query, _resolve_store(store), options)


def _truncation(spec: str, long_prompts: str) -> GeneratorOptions:
    """The over-long-prompt option of a pipeline kind's generator (an API kind has its own limits): {} otherwise."""
    kind = GENERATOR_KINDS.get(str(spec).partition(":")[0])
    return {"truncate_long_prompts": long_prompts == "truncate"} if kind is None or kind.pipeline else {}


def get_generator(spec: str, *, store: StoreLike = None, **options: Unpack[GeneratorOptions]) -> ImageGenerator:
    """The process-wide generator for `spec`, `store` and `options` (see the module docstring for all three)."""
    given: dict[str, object] = {**options, "store": store} if store is not None else dict(options)
    key = (spec, tuple(sorted((k, _option_key(v)) for k, v in given.items())))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = _build(spec, store, options)
        return _CACHE[key]


def open_generator(
    spec: str,
    *,
    store: StoreLike = None,
    long_prompts: str = DEFAULT_LONG_PROMPTS,
    load: bool = False,
    **options: Unpack[GeneratorOptions],
) -> ImageGenerator:
    """The generator for `spec` writing into `store`, with the over-long-prompt policy `long_prompts`.

    A `registered:NAME` spec returns the object given to `register_generator` (which keeps its own store and
    policy). Other options are the backend's (see the module docstring). `load=True` loads a lazily loaded
    pipeline now: graph nodes open generators in a worker thread, and loading there keeps the model's file
    reads and imports off the event loop (`langgraph dev` refuses blocking calls on it).
    """
    if long_prompts not in LONG_PROMPT_POLICIES:
        raise UnsupportedOptionError(f"long_prompts {long_prompts!r}: use {' or '.join(LONG_PROMPT_POLICIES)}")
    if isinstance(spec, str) and spec.startswith(f"{REGISTERED}:"):
        with _CACHE_LOCK:
            found = _REGISTERED.get(spec)
        if found is None:
            raise UnsupportedOptionError(f"text-to-image spec {spec!r}: nothing is registered under that name")
        return found
    resolved = _resolve_store(store) or get_image_store(None)
    with _CACHE_LOCK:
        remote = _REMOTE[0] if _REMOTE else None
    if remote is not None:
        parse_spec(spec)  # a bad spec is refused here, as the local path does, not on a remote worker
        return remote.open(spec, store=resolved, long_prompts=long_prompts, options=options.copy())
    opts = options.copy()
    opts.update(_truncation(spec, long_prompts))
    generator = get_generator(spec, store=resolved, **opts)
    if load and isinstance(getattr(type(generator), "pipeline", None), property):
        _ = generator.pipeline  # type: ignore[attr-defined]
    return generator


def build_local_generator(
    spec: str, *, store: ImageStore, long_prompts: str = DEFAULT_LONG_PROMPTS, **options: Unpack[GeneratorOptions]
) -> ImageGenerator:
    """The local generator `open_generator` gives without a remote engine (what a render worker runs)."""
    opts = options.copy()
    opts.update(_truncation(spec, long_prompts))
    return get_generator(spec, store=store, **opts)


def set_remote_generators(remote: RemoteGenerators | None) -> None:
    """Route `open_generator` (every spec but `registered:`) through a distributed engine, or back to local."""
    with _CACHE_LOCK:
        _REMOTE.clear()
        if remote is not None:
            _REMOTE.append(remote)


def register_generator(name: str, generator: ImageGenerator) -> str:
    """Register a generator object under `registered:NAME` (replacing any earlier one); returns the spec."""
    spec = f"{REGISTERED}:{name}"
    with _CACHE_LOCK:
        _REGISTERED[spec] = generator
    return spec


def unregister_generator(spec: str) -> None:
    """Forget a registered generator."""
    with _CACHE_LOCK:
        _REGISTERED.pop(spec, None)


def clear_generator_cache() -> None:
    """Forget cached generators and pipelines (tests; freeing GPU memory)."""
    from tools.t2i.diffusers_backend import clear_pipeline_cache

    with _CACHE_LOCK:
        _CACHE.clear()
    clear_pipeline_cache()
