"""Turn a `ModelSpec` into a LangChain chat model.

`scripted`, `llamacpp` and `hf` are Unveil's own providers; every other provider name is passed to LangChain's
`init_chat_model` (openai, anthropic, google_genai, ollama, ...). A spec with `@base_url` talks to any
OpenAI-compatible server (vLLM, llama.cpp server, LM Studio) through `langchain-openai`; its key comes from
`$UNVEIL_OPENAI_API_KEY` or `$OPENAI_API_KEY`, and local servers that need none get a placeholder.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs

from langchain_core.language_models import BaseChatModel

from agents.spec import ModelSpec

# Providers whose models see images. Anything unknown is assumed to be multimodal; text-only servers can be
# declared with $UNVEIL_TEXT_ONLY (comma-separated spec prefixes).
TEXT_ONLY_PROVIDERS = {"llamacpp"}

ProviderFactory = Callable[[ModelSpec, str, dict[str, Any]], BaseChatModel]
_CUSTOM: dict[str, ProviderFactory] = {}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Add a provider (a factory of (spec, call role, shared state) -> chat model)."""
    _CUSTOM[name] = factory


def supports_images(spec: ModelSpec) -> bool:
    """Whether a model takes image content blocks."""
    if spec.provider in TEXT_ONLY_PROVIDERS:
        return False
    declared = [s.strip() for s in os.environ.get("UNVEIL_TEXT_ONLY", "").split(",") if s.strip()]
    return not any(str(spec).startswith(prefix) for prefix in declared)


_SCRIPTS_LOCK = threading.Lock()


def _scripted(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.scripted import Script, ScriptedChatModel

    path, _, query = spec.model.partition("?")
    key = str(Path(path).resolve())
    # One Script per file even when two roles' first calls build their models at once (the TAG graph's two root
    # calls do, from threads): a second Script would keep its own cursors and requests.
    with _SCRIPTS_LOCK:
        scripts = shared.setdefault("scripts", {})
        if key not in scripts:
            scripts[key] = Script(path)
    latency = float(parse_qs(query).get("latency", [os.environ.get("UNVEIL_SCRIPT_LATENCY", "0")])[0])
    return ScriptedChatModel(script=scripts[key], role=role, latency=latency)


def _llamacpp(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.llamacpp import LlamaCppChatModel, resolve_model_path

    return LlamaCppChatModel(model_path=str(resolve_model_path(spec.model)))


def _hf(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from agents.providers.hf_vlm import make_hf_chat_model

    return make_hf_chat_model(spec, shared)


def _langchain(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"temperature": 0, "max_retries": 0}
    timeout = os.environ.get("UNVEIL_REQUEST_TIMEOUT")
    kwargs["timeout"] = float(timeout) if timeout else 120.0
    provider = spec.provider
    if spec.base_url:
        kwargs["base_url"] = spec.base_url
        if provider == "openai":
            kwargs["api_key"] = (
                os.environ.get("UNVEIL_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or "not-needed"
            )
    if provider == "openai":
        # An HTTP client of this model's own: langchain-openai's default one is cached process-wide and bound to the
        # first event loop, so a second `asyncio.run` in the same process (tests, a worker running many batches)
        # failed its first request with "Event loop is closed".
        import httpx

        kwargs["http_async_client"] = httpx.AsyncClient(timeout=kwargs["timeout"])
    return init_chat_model(spec.model, model_provider=provider, **kwargs)


def create_chat_model(spec: ModelSpec, role: str, shared: dict[str, Any]) -> BaseChatModel:
    """The chat model for a spec; `role` matters only to the scripted provider."""
    if spec.provider in _CUSTOM:
        return _CUSTOM[spec.provider](spec, role, shared)
    if spec.provider == "scripted":
        return _scripted(spec, role, shared)
    if spec.provider == "llamacpp":
        return _llamacpp(spec, role, shared)
    if spec.provider == "hf":
        return _hf(spec, role, shared)
    return _langchain(spec, role, shared)
