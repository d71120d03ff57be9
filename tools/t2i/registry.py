"""`open_generator(spec, ...)`: one text-to-image generator per spec and options, per process.

The part of a spec before the first ':' picks the backend: `diffusers:` (SD 1.x/2.x or SDXL), `sd-np:`,
`sld-weak:` ... `sld-max:`, `esd:`, `openai:` and `registered:`; a diffusers spec may add `?accel=` (see
`tools.t2i.fast`). The spec grammar is documented in docs/tools.md; the options, typed and documented, are
`tools.t2i.options.GeneratorOptions` (a backend refuses any option not its own with `UnsupportedOptionError`), and
`check_generator(spec)` refuses a spec that cannot be opened here before any work.

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

from tools.env import parse_bool
from tools.extras import require_extra
from tools.image_store import ImageStore, get_image_store
from tools.t2i.base import ImageGenerator
from tools.t2i.errors import UnsupportedOptionError, renamed_note
from tools.t2i.options import (
    DIFFUSERS_OPTIONS,
    OPENAI_OPTIONS,
    DiffusersOptions,
    GeneratorOptions,
    OpenAIOptions,
    StoreLike,
)
from tools.t2i.variants import SAFETY_NEGATIVE_PROMPT, SLD_CONFIGS

# Generator options that were renamed: refused with their new spelling.
RENAMED_OPTIONS = {"compile": 'accel="compile"'}
KINDS = ("diffusers", "sd-np", "esd", "openai") + tuple(f"sld-{name}" for name in SLD_CONFIGS)

# The default spec of each use, in one place: IPR (the IPR paper's SD 1.4) and CTD generation (SD 1.5).
DEFAULT_IPR_GENERATOR = "diffusers:CompVis/stable-diffusion-v1-4"
DEFAULT_CTD_GENERATOR = "diffusers:stable-diffusion-v1-5/stable-diffusion-v1-5"
# Over-long prompts (past the CLIP text encoder's 77 tokens): "truncate" cuts them as diffusers' own pipelines do
# and as both papers did (the default of every command); "error" refuses them with a PromptError.
LongPrompts = Literal["truncate", "error"]
LONG_PROMPT_POLICIES: tuple[str, ...] = get_args(LongPrompts)
DEFAULT_LONG_PROMPTS: LongPrompts = "truncate"
REGISTERED = "registered"
# `esd:...?np=`: whether an ESD spec adds the safety negative prompt at inference ("0": the IPR paper's rows).
ESD_NEGATIVE_DEFAULT = "0"

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
    if kind not in KINDS:
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
    if kind != "openai":
        require_extra("t2i", f"text-to-image spec {spec!r}")
        from tools.t2i.pipeline_loading import looks_like_path

        if not looks_like_path(model):
            from tools.hub import hub_access

            hub_access(model, "model_index.json", what="text-to-image model")


def _build(spec: str, store: StoreLike, options: GeneratorOptions) -> ImageGenerator:
    kind, model, query = parse_spec(spec)
    if kind == "openai":
        _check_options(spec, options, OPENAI_OPTIONS)
        if query:
            raise UnsupportedOptionError(f"text-to-image spec {spec!r}: openai takes no '?' parameters")
        from tools.t2i.openai_backend import OpenAIImageGenerator

        openai_options: OpenAIOptions = options  # checked above: no other keys
        return OpenAIImageGenerator(model, store=_resolve_store(store), **openai_options)

    _check_options(spec, options, DIFFUSERS_OPTIONS)
    # `accel` may ride in the spec (`diffusers:MODEL?accel=eager`), so any graph context or command can pick the
    # UNet path without a setting of its own.
    allowed_query = {"unet", "np", "accel"} if kind == "esd" else {"accel"}
    if set(query) - allowed_query:
        raise UnsupportedOptionError(
            f"text-to-image spec {spec!r}: parameter(s) {sorted(set(query) - allowed_query)} not supported"
            + (" (esd takes unet=, np= and accel=)" if kind == "esd" else f" ({kind} takes accel= only)")
        )
    # The spec and options first (an old spelling is named at once, offline too), then whether the model can be had.
    check_generator(spec)
    opts: DiffusersOptions = options.copy()  # checked above: no other keys
    if "accel" in query:
        opts["accel"] = query["accel"]
    from tools.t2i.diffusers_backend import DiffusersGenerator

    variant, unet_file, negative = "plain", None, None
    if kind == "sd-np":
        variant, negative = "sd-np", SAFETY_NEGATIVE_PROMPT
    elif kind.startswith("sld-"):
        variant = kind
    elif kind == "esd":
        unet_file = query.get("unet")
        if not unet_file:
            raise UnsupportedOptionError(f"text-to-image spec {spec!r}: esd needs ?unet=<UNet weights file>")
        variant = "esd"
        # The IPR paper's ESD rows render without SD-NP's negative prompt: Table 5's Template-prompt column has
        # ESD at 0.70 beside SD's 0.72 and SD-NP's 0.44 (App. A's list is the concept ESD erased, not a prompt
        # at inference). `np=1` adds the list as a named option.
        negative = SAFETY_NEGATIVE_PROMPT if parse_bool(f"{spec}: np", query.get("np", ESD_NEGATIVE_DEFAULT)) else None
    opts.setdefault("negative_prompt", negative)  # the caller's negative prompt, else the variant's
    return DiffusersGenerator(spec, model, variant=variant, unet_file=unet_file, store=_resolve_store(store), **opts)


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
    if not str(spec).startswith("openai:"):
        opts["truncate_long_prompts"] = long_prompts == "truncate"
    generator = get_generator(spec, store=resolved, **opts)
    if load and isinstance(getattr(type(generator), "pipeline", None), property):
        _ = generator.pipeline  # type: ignore[attr-defined]
    return generator


def build_local_generator(
    spec: str, *, store: ImageStore, long_prompts: str = DEFAULT_LONG_PROMPTS, **options: Unpack[GeneratorOptions]
) -> ImageGenerator:
    """The local generator `open_generator` gives without a remote engine (what a render worker runs)."""
    opts = options.copy()
    if not str(spec).startswith("openai:"):
        opts["truncate_long_prompts"] = long_prompts == "truncate"
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
