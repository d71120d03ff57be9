"""One profile per model provider, and the one registry every module reads them from.

A `ProviderProfile` holds every fact about a provider that code outside its own module needs: which module builds
its chat models, the structured-output method to try first, whether its models take images, its concurrency limit,
whether it answers in this process, how its model content is fingerprinted for the response cache, what its spec
may name on disk, the `?key=value` options its spec takes, its prices, its official endpoints and key variables, and
the names under which it runs the embedded demonstration model. The gateway, the limits, the usage accounting, the
spec helpers, the server-context checks and `unveil list` read these fields; none keeps a table of provider names.

Adding a provider is one module that implements `ProviderModule` and one `ProviderProfile` in `PROFILES`;
`tests/agents/test_provider_conformance.py` runs every registered provider. The facts a new provider must decide have no
default (a profile without `max_concurrency` cannot be built), and `ProviderProfile.__post_init__` refuses a profile
whose facts contradict each other, naming the field.

A provider LangChain's `init_chat_model` knows but this registry does not (`fireworks`, `together`, ...) gets
`langchain_profile(name)`: a remote API with the gateway's concurrency, tool calling and images.

This module imports nothing heavy (provider modules are imported when a model is first built), so `agents.spec`,
`agents.limits` and `agents.usage` read it freely.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast
from urllib.parse import parse_qs

from agents.spec import ModelSpec, ModelSpecError
from tools.errors import UnveilError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


StructuredMethod = Literal["json_schema", "function_calling", "json_mode"]
# The structured-output methods in the order the gateway falls back along.
METHOD_ORDER: tuple[StructuredMethod, ...] = ("json_schema", "function_calling", "json_mode")
# How the content behind a spec is told apart when its name alone does not (the response cache keys calls by it):
# "name" the name says it all (APIs, Hub ids: no fingerprint); "files" the provider stamps its files once per process
# (weights, adapters: see `agents.providers.fingerprint`); "script" a small file hashed at every call, so an edited
# script is answered from its new version at once.
Fingerprint = Literal["name", "files", "script"]
# What the model part of a spec may name on disk: nothing, a text script, or a model file or folder.
ModelFiles = Literal["none", "script", "model"]
SharedState = dict[str, Any]  # state a provider keeps across roles and calls (loaded scripts and weights)

LANGCHAIN_MODULE = "agents.providers.langchain_api"
# The embedded SmolLM2-135M-Instruct under every name it answers to (`transformers:` and `llamacpp:`).
SMOLLM2_ALIASES = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")


class ProviderProfileError(UnveilError, ValueError):
    """A provider profile is incomplete or contradicts itself; the message names the provider and the field."""


class UnknownProviderError(UnveilError, ValueError):
    """A spec names a provider that neither Unveil nor LangChain knows."""


class ProviderOptionError(UnveilError, ValueError):
    """A spec's `?key=value` options are not ones its provider takes; the message names the option."""


class ProviderModule(Protocol):
    """What a provider's module offers (`ProviderProfile.module` names it; imported on first use)."""

    def build_chat_model(self, spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
        """The chat model for a spec, in this process; `role` matters to providers whose answers are per role."""
        ...

    def model_fingerprint(self, spec: ModelSpec) -> str:
        """What identifies the content behind the spec (see `Fingerprint`); "" when the name says it all."""
        ...

    def check_options(self, spec: ModelSpec) -> None:
        """Refuse the spec's options the provider does not take, or whose values are bad, naming the option."""
        ...


@dataclass(frozen=True, kw_only=True)
class ProviderProfile:
    """Every fact about one provider that code outside its module reads (see the module docstring)."""

    name: str
    module: str  # the module that implements `ProviderModule` for this provider
    structured_method: StructuredMethod  # tried first; the gateway falls back along METHOD_ORDER
    images: bool  # whether its models take image blocks (else they are sent the images' descriptions)
    # Requests at once per backend: 1 for weights that compute in this process (they would only contend; the
    # single-threaded embedded model's 2 take a core each), None for the gateway's setting (`UNVEIL_MAX_CONCURRENCY`).
    # No default: a provider that forgets it cannot be built.
    max_concurrency: int | None
    in_process: bool  # answers in this process, no network involved
    free: bool  # costs nothing per token (local weights, scripts, a local server)
    fingerprint: Fingerprint
    model_files: ModelFiles
    # The spec's `?key=value` options, or None when the model part is passed to the provider verbatim.
    options: tuple[str, ...] | None
    answers_per_role: bool = False  # answers depend on the call's role: a model per role, the role in the cache key
    path_options: tuple[str, ...] = ()  # options whose value names a file or folder (a server checks them)
    engine_hosted: bool = False  # a distributed engine may host its models in actors (`set_remote_chat_models`)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # USD per 1M (input, output) tokens
    official_hosts: tuple[str, ...] = ()  # its own endpoints: its default key is sent there only
    key_env: tuple[str, ...] = ()  # the variables its default key is read from (any one is enough)
    demo_models: tuple[str, ...] = ()  # model names that run the embedded 135M demonstration model
    own_http_client: bool = False  # needs an HTTP client per model (langchain-openai's default one is per loop)

    def __post_init__(self) -> None:
        for name, problem in self.problems():
            raise ProviderProfileError(f"provider profile {self.name!r}: {name}: {problem}")

    def problems(self) -> list[tuple[str, str]]:
        """(field, what is wrong) for every fact that is missing or contradicts another; empty for a good profile."""
        return [*self._form_problems(), *self._agreement_problems()]

    def _form_problems(self) -> list[tuple[str, str]]:
        """The facts that are wrong on their own: the name, module, method and concurrency limit."""
        out: list[tuple[str, str]] = []
        if not self.name or self.name != self.name.strip().lower() or ":" in self.name or "@" in self.name:
            out.append(("name", "a lower-case word without ':' or '@' (the part of a spec before ':')"))
        if not self.module.startswith("agents.providers."):
            out.append(("module", "a module of agents.providers"))
        if self.structured_method not in METHOD_ORDER:
            out.append(("structured_method", f"one of {', '.join(METHOD_ORDER)}"))
        if self.max_concurrency is not None and (type(self.max_concurrency) is not int or self.max_concurrency < 1):
            out.append(("max_concurrency", "None (the gateway's setting) or a whole number of at least 1"))
        return out

    def _agreement_problems(self) -> list[tuple[str, str]]:
        """The facts that contradict one another."""
        out: list[tuple[str, str]] = []
        if self.in_process and self.module == LANGCHAIN_MODULE:
            out.append(("in_process", "LangChain's providers answer over the network"))
        if self.fingerprint == "script" and self.model_files != "script":
            out.append(("fingerprint", "'script' belongs to a provider whose model is a script file"))
        if self.fingerprint == "name" and self.model_files != "none":
            out.append(("fingerprint", "a provider that reads files from disk fingerprints them ('files')"))
        if self.free and self.prices:
            out.append(("prices", "a free provider has no prices"))
        if self.options is None and self.path_options:
            out.append(("path_options", "a provider that takes no options has no path options"))
        if self.options is not None and not set(self.path_options) <= set(self.options):
            out.append(("path_options", "every path option is one of `options`"))
        if self.engine_hosted and not self.in_process:
            out.append(("engine_hosted", "only weights that load in-process are hosted by an engine"))
        if self.demo_models and not self.in_process:
            out.append(("demo_models", "the embedded demonstration model runs in-process"))
        if self.official_hosts and not self.key_env:
            out.append(("key_env", "a provider with official hosts names the variable of its default key"))
        if self.own_http_client and self.module != LANGCHAIN_MODULE:
            out.append(("own_http_client", "a setting of LangChain's clients"))
        return out

    @property
    def via_langchain(self) -> bool:
        """Whether LangChain's `init_chat_model` builds its models (else the provider is Unveil's own)."""
        return self.module == LANGCHAIN_MODULE

    def implementation(self) -> ProviderModule:
        """The provider's module (imported on first use: weights, scripts and clients stay unloaded until then)."""
        return cast("ProviderModule", importlib.import_module(self.module))


def langchain_profile(name: str) -> ProviderProfile:
    """The profile of a provider that only LangChain knows: a remote API with tool calling, images and the
    gateway's concurrency."""
    return ProviderProfile(
        name=name,
        module=LANGCHAIN_MODULE,
        structured_method="function_calling",
        images=True,
        max_concurrency=None,
        in_process=False,
        free=False,
        fingerprint="name",
        model_files="none",
        options=None,
    )


# USD per 1M (input, output) tokens, public list prices at the time of writing; `$UNVEIL_PRICES` overrides them.
_OPENAI_PRICES = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
}

PROFILES: Mapping[str, ProviderProfile] = {
    p.name: p
    for p in (
        ProviderProfile(
            name="scripted",
            module="agents.providers.scripted",
            structured_method="function_calling",
            in_process=True,
            free=True,
            images=True,
            max_concurrency=None,  # canned answers: as many at once as the gateway allows
            fingerprint="script",
            model_files="script",
            options=("latency",),
            answers_per_role=True,
        ),
        ProviderProfile(
            name="transformers",
            module="agents.providers.transformers_lm",
            structured_method="function_calling",
            in_process=True,
            free=True,
            images=False,
            max_concurrency=2,  # two generations on one thread each where two CPUs are free (transformers_lm.py)
            fingerprint="files",
            model_files="model",
            options=(),
            demo_models=SMOLLM2_ALIASES,
        ),
        ProviderProfile(
            name="llamacpp",
            module="agents.providers.llamacpp",
            structured_method="function_calling",
            in_process=True,
            free=True,
            images=False,
            max_concurrency=1,
            fingerprint="files",
            model_files="model",
            options=(),
            demo_models=SMOLLM2_ALIASES,
        ),
        ProviderProfile(
            name="hf",
            module="agents.providers.hf_vlm",
            structured_method="function_calling",
            in_process=True,
            free=True,
            images=True,
            max_concurrency=1,
            fingerprint="files",
            model_files="model",
            options=(
                "adapter",
                "merge",
                "device",
                "dtype",
                "max_new_tokens",
                "temperature",
                "top_p",
                "min_pixels",
                "max_pixels",
                "attn",
            ),
            path_options=("adapter",),
            engine_hosted=True,
        ),
        ProviderProfile(
            name="openai",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="json_schema",
            images=True,
            max_concurrency=None,
            free=False,
            prices=_OPENAI_PRICES,
            official_hosts=("api.openai.com",),
            # Only OPENAI_API_KEY reaches api.openai.com; UNVEIL_OPENAI_API_KEY is for a custom @base_url.
            key_env=("OPENAI_API_KEY",),
            own_http_client=True,
        ),
        ProviderProfile(
            name="anthropic",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="function_calling",
            images=True,
            max_concurrency=None,
            free=False,
            prices={"claude-sonnet-4-5": (3.00, 15.00), "claude-haiku-4-5": (1.00, 5.00)},
            official_hosts=("api.anthropic.com",),
            key_env=("ANTHROPIC_API_KEY",),
        ),
        ProviderProfile(
            name="google_genai",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="function_calling",
            images=True,
            max_concurrency=None,
            free=False,
            prices={"gemini-2.5-flash": (0.30, 2.50), "gemini-2.5-pro": (1.25, 10.00)},
            key_env=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        ),
        ProviderProfile(
            name="ollama",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="json_schema",
            images=True,
            max_concurrency=None,
            free=True,  # a local server
        ),
        ProviderProfile(
            name="mistralai",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="function_calling",
            images=True,
            max_concurrency=None,
            free=False,
            key_env=("MISTRAL_API_KEY",),
        ),
        ProviderProfile(
            name="groq",
            module=LANGCHAIN_MODULE,
            in_process=False,
            fingerprint="name",
            model_files="none",
            options=None,
            structured_method="function_calling",
            images=True,
            max_concurrency=None,
            free=False,
            key_env=("GROQ_API_KEY",),
        ),
    )
}

# Hosted providers and the variables their keys come from (any one is enough); a spec with its own @base_url needs
# none of them (usually a local server).
API_KEYS: Mapping[str, tuple[str, ...]] = {p.name: p.key_env for p in PROFILES.values() if p.key_env}


def provider_profile(name: str) -> ProviderProfile:
    """The profile of a provider: the registered one, else LangChain's generic one (an unknown name is refused
    when its model is built, naming the known providers)."""
    profile = PROFILES.get(name)
    return profile if profile is not None else langchain_profile(name)


def own_providers() -> list[str]:
    """Unveil's own providers (not built by LangChain), in registry order."""
    return [p.name for p in PROFILES.values() if not p.via_langchain]


def langchain_providers() -> list[str]:
    """The providers LangChain's `init_chat_model` knows (its table is private: empty if it moved)."""
    try:
        from langchain.chat_models import base

        return sorted(getattr(base, "_BUILTIN_PROVIDERS", {}))
    except ImportError:
        return []


def known_providers() -> list[str]:
    """Every provider a spec may name: Unveil's own, then LangChain's (those registered here included)."""
    remote = {p.name for p in PROFILES.values() if p.via_langchain}
    return [*own_providers(), *sorted(remote | set(langchain_providers()))]


def spec_options(spec: ModelSpec, profile: ProviderProfile) -> dict[str, str]:
    """The `?key=value` options of a spec whose provider takes options (the last value of a repeated key); an option
    the provider does not take is refused, naming it and the ones it does."""
    _model, _, query = spec.model.partition("?")
    given = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    if not query:
        return given
    known = profile.options or ()
    unknown = sorted(set(given) - set(known)) or ([] if given else [query])
    if unknown:
        takes = f"known: {', '.join(known)}" if known else "it takes none"
        raise ProviderOptionError(f"model spec {spec}: unknown option(s) {', '.join(unknown)} ({takes})")
    return given


def is_demo_spec(spec: str | ModelSpec) -> bool:
    """Whether a spec names the embedded 135M demonstration model (a pipeline demo, never a judge or a teacher),
    under any of its local aliases; the same model behind a server (`openai:smollm2@http://...`) is the user's own."""
    try:
        parsed = spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)
    except ModelSpecError:
        return False
    # The embedded SmolLM2 under every name its providers run it by (their profiles' `demo_models`).
    return parsed.model.lower() in provider_profile(parsed.provider).demo_models and not parsed.base_url
