"""Turn a `ModelSpec` into a LangChain chat model.

`scripted`, `transformers`, `llamacpp` and `hf` are Unveil's own providers; every other provider name is passed to
LangChain's `init_chat_model` (openai, anthropic, google_genai, ollama, ...). A spec with `@base_url` talks to any
OpenAI-compatible server (vLLM, llama.cpp server, LM Studio) through `langchain-openai`.

Keys go only where they belong: a provider's default key (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) is sent only to
that provider's own endpoint. A custom `@base_url` gets `$UNVEIL_<PROVIDER>_API_KEY` (e.g. `UNVEIL_OPENAI_API_KEY`)
when set, else a placeholder (local servers need none) -- never the default key, which a self-hosted or mistyped
server would otherwise receive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_core.language_models import BaseChatModel

from agents.providers.fingerprint import file_stamp
from agents.spec import ModelSpec
from tools.env import SettingError, env_float, env_list, env_str
from tools.errors import UnveilError
from tools.extras import require_extra

# Providers whose models see images. Anything unknown is assumed to be multimodal; text-only servers are declared
# with $UNVEIL_TEXT_ONLY (comma-separated spec prefixes), read only by `supports_images`.
TEXT_ONLY_PROVIDERS = {"llamacpp", "transformers"}
TEXT_ONLY_ENV = "UNVEIL_TEXT_ONLY"


def model_fingerprint(spec: ModelSpec) -> str:
    """What identifies the content behind a spec whose name alone does not: the response cache keys calls by it.

    Scripts are keyed by a SHA-256 of their bytes (small files); GGUF files, local Hugging Face folders and LoRA
    adapters by `file_stamp` (path, size, mtime); remote APIs and Hub ids by their name only ("").
    """
    if spec.provider == "scripted":
        from agents.providers.scripted import script_fingerprint

        return "sha256:" + script_fingerprint(spec.model.partition("?")[0])
    if spec.provider == "llamacpp":
        from agents.providers.llamacpp import resolve_model_path

        try:
            return file_stamp(resolve_model_path(spec.model))
        except (OSError, RuntimeError):
            return "missing"  # building the model reports it with its name
    if spec.provider == "transformers":
        from agents.providers.transformers_lm import transformers_fingerprint

        return transformers_fingerprint(spec.model)
    if spec.provider == "hf":
        from agents.providers.hf_vlm import hf_fingerprint

        return hf_fingerprint(spec)
    return ""


def supports_images(spec: ModelSpec) -> bool:
    """Whether a model takes image content blocks: not for the text-only providers, nor for a spec that starts with
    one of the prefixes in `$UNVEIL_TEXT_ONLY` (such a model is sent image descriptions instead)."""
    if spec.provider in TEXT_ONLY_PROVIDERS:
        return False
    declared = env_list(TEXT_ONLY_ENV)
    return not any(str(spec).startswith(prefix) for prefix in declared)


_SCRIPTS_LOCK = threading.Lock()


def _scripted(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.scripted import Script, ScriptedChatModel, script_fingerprint

    path, _, query = spec.model.partition("?")
    # One Script per file content even when two roles' first calls build their models at once (the TAG graph's two
    # root calls do, from threads): a second Script would keep its own cursors and requests. An edited file is a new
    # Script (a long-lived `langgraph dev` process answers from the new version at once).
    key = (str(Path(path).resolve()), script_fingerprint(path))
    with _SCRIPTS_LOCK:
        scripts = shared.setdefault("scripts", {})
        if key not in scripts:
            scripts[key] = Script(path)
    given = parse_qs(query).get("latency")
    if given:
        try:
            latency = float(given[0])
        except ValueError:
            raise SettingError(f"model spec {spec}: latency={given[0]!r} is not a number") from None
    else:
        latency = env_float("UNVEIL_SCRIPT_LATENCY", 0.0, minimum=0) or 0.0
    return ScriptedChatModel(script=scripts[key], role=role, latency=latency)


def _llamacpp(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.llamacpp import LlamaCppChatModel, resolve_model_path

    require_extra("llamacpp", f"model spec {spec}")  # here, before the run's first call, not at that call
    return LlamaCppChatModel(model_path=str(resolve_model_path(spec.model)))


def _transformers(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.transformers_lm import TransformersChatModel

    return TransformersChatModel(model_ref=spec.model)


def _hf(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.hf_vlm import make_hf_chat_model

    return make_hf_chat_model(spec, shared)


# Each provider's own endpoints (hosts) and the variable its client library reads the default key from.
OFFICIAL_HOSTS = {"openai": ("api.openai.com",), "anthropic": ("api.anthropic.com",)}
DEFAULT_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def self_hosted(spec: ModelSpec) -> bool:
    """Whether a spec names a server of its own (a `@base_url` that is not the provider's official endpoint)."""
    if not spec.base_url:
        return False
    return (urlsplit(spec.base_url).hostname or "").lower() not in OFFICIAL_HOSTS.get(spec.provider, ())


def custom_endpoint_key(spec: ModelSpec) -> str | None:
    """The API key to send to a spec's `@base_url`: None when the URL is the provider's own endpoint (its client
    then reads the default key as usual), else `$UNVEIL_<PROVIDER>_API_KEY` or the placeholder `not-needed`."""
    if not spec.base_url or spec.provider not in DEFAULT_KEY_VARS:
        return None
    host = (urlsplit(spec.base_url).hostname or "").lower()
    if host in OFFICIAL_HOSTS.get(spec.provider, ()):
        return None
    return env_str(f"UNVEIL_{spec.provider.upper()}_API_KEY") or "not-needed"


def request_timeout() -> float | None:
    """The client timeout per request in seconds (`UNVEIL_REQUEST_TIMEOUT`, default 120); a bad value raises
    `SettingError` naming the variable (commands check it before their first sample)."""
    return env_float("UNVEIL_REQUEST_TIMEOUT", 120.0, minimum=0, strict=True)


def _langchain(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"temperature": 0, "max_retries": 0}
    kwargs["timeout"] = request_timeout()
    provider = spec.provider
    if spec.base_url:
        kwargs["base_url"] = spec.base_url  # the real URL, credentials included: the client needs them
        key = custom_endpoint_key(spec)
        if key is not None:
            kwargs["api_key"] = key
    if provider == "openai":
        # An HTTP client of this model's own: langchain-openai's default one is cached process-wide and bound to the
        # first event loop, so a second `asyncio.run` in the same process (tests, a worker running many batches)
        # failed its first request with "Event loop is closed".
        import httpx

        kwargs["http_async_client"] = httpx.AsyncClient(timeout=kwargs["timeout"])
    try:
        # Without `configurable_fields` it is a `BaseChatModel`; `**kwargs` hides that from its overloads.
        chat: BaseChatModel = init_chat_model(spec.model, model_provider=provider, **kwargs)
    except ValueError as exc:
        if "provider" in str(exc).lower() and provider not in langchain_providers():
            raise UnknownProviderError(
                f"model spec {spec}: unknown provider {provider!r}; known providers: {', '.join(known_providers())}"
            ) from None
        raise
    return chat


class UnknownProviderError(UnveilError, ValueError):
    """A spec names a provider that neither Unveil nor LangChain knows."""


OWN_PROVIDERS = ("scripted", "transformers", "llamacpp", "hf")


def langchain_providers() -> list[str]:
    """The providers LangChain's `init_chat_model` knows (its table is private: empty if it moved)."""
    try:
        from langchain.chat_models import base

        return sorted(getattr(base, "_BUILTIN_PROVIDERS", {}))
    except ImportError:
        return []


def known_providers() -> list[str]:
    """Every provider a spec may name: Unveil's own, then LangChain's."""
    return [*OWN_PROVIDERS, *langchain_providers()]


# Providers whose weights load into this process: a distributed engine may host them in actors instead.
IN_PROCESS_PROVIDERS: tuple[str, ...] = ("hf",)
RemoteChatModels = Callable[[ModelSpec, str], BaseChatModel]
_REMOTE_CHAT: list[RemoteChatModels] = []  # at most one: the engine of the current run


def set_remote_chat_models(factory: RemoteChatModels | None) -> None:
    """Build chat models of `IN_PROCESS_PROVIDERS` through a distributed engine's factory (its actor pool), or in
    this process again (None). The gateway, the roles and the records see the same model either way."""
    _REMOTE_CHAT.clear()
    if factory is not None:
        _REMOTE_CHAT.append(factory)


def create_chat_model(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    """The chat model for a spec; `role` matters only to the scripted provider."""
    if _REMOTE_CHAT and spec.provider in IN_PROCESS_PROVIDERS:
        return _REMOTE_CHAT[0](spec, role)
    return build_local_chat_model(spec, role, shared)


def build_local_chat_model(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    """The chat model for a spec, in this process (what an engine's model actors run)."""
    if spec.provider == "scripted":
        return _scripted(spec, role, shared)
    if spec.provider == "llamacpp":
        return _llamacpp(spec, role, shared)
    if spec.provider == "transformers":
        return _transformers(spec, role, shared)
    if spec.provider == "hf":
        return _hf(spec, role, shared)
    return _langchain(spec, role, shared)
