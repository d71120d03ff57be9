"""Providers built by LangChain's `init_chat_model` (openai, anthropic, google_genai, ollama, ...): remote APIs,
and any OpenAI-compatible server through a spec's `@base_url` (vLLM, llama.cpp server, LM Studio).

Keys go only where they belong: a provider's default key (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) is sent only to
that provider's own endpoint (its profile's `official_hosts`). A custom `@base_url` gets
`$UNVEIL_<PROVIDER>_API_KEY` (e.g. `UNVEIL_OPENAI_API_KEY`) when set, else a placeholder (local servers need none)
-- never the default key, which a self-hosted or mistyped server would otherwise receive.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel

from agents.providers.profiles import (
    SharedState,
    UnknownProviderError,
    known_providers,
    langchain_providers,
    provider_profile,
)
from agents.spec import ModelSpec
from tools.env import env_str
from tools.http_limits import limited_client, request_timeout


def self_hosted(spec: ModelSpec) -> bool:
    """Whether a spec names a server of its own (a `@base_url` that is not the provider's official endpoint)."""
    if not spec.base_url:
        return False
    return (urlsplit(spec.base_url).hostname or "").lower() not in provider_profile(spec.provider).official_hosts


def custom_endpoint_key(spec: ModelSpec) -> str | None:
    """The API key to send to a spec's `@base_url`: None when the URL is the provider's own endpoint (its client
    then reads the default key as usual) or the provider declares no official endpoint, else
    `$UNVEIL_<PROVIDER>_API_KEY` or the placeholder `not-needed`."""
    if not spec.base_url or not provider_profile(spec.provider).official_hosts or not self_hosted(spec):
        return None
    return env_str(f"UNVEIL_{spec.provider.upper()}_API_KEY") or "not-needed"


def call_deadline(spec: ModelSpec) -> float | None:
    """The deadline of one call to `spec`'s model (`request_timeout`), or None for a model run in this process or
    its engine (no server to wait for: its own settings bound it)."""
    return None if provider_profile(spec.provider).in_process else request_timeout()


def build_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The LangChain chat model of a spec: temperature 0, no client retries (the gateway retries), the request
    timeout, the `@base_url` with the key that may go there."""
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"temperature": 0, "max_retries": 0}
    kwargs["timeout"] = request_timeout()
    provider = spec.provider
    if spec.base_url:
        kwargs["base_url"] = spec.base_url  # the real URL, credentials included: the client needs them
        key = custom_endpoint_key(spec)
        if key is not None:
            kwargs["api_key"] = key
    if provider_profile(provider).own_http_client:
        # An HTTP client of this model's own: langchain-openai's default one is cached process-wide and bound to the
        # first event loop, so a second `asyncio.run` in the same process (tests, a worker running many batches)
        # failed its first request with "Event loop is closed". Its answers keep to one deadline and a size cap.
        kwargs["http_async_client"] = limited_client(kwargs["timeout"])
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


def model_fingerprint(spec: ModelSpec) -> str:
    """An API model is known by its name: no fingerprint."""
    return ""


def check_options(spec: ModelSpec) -> None:
    """The model name goes to the provider verbatim: nothing to check here (the provider judges it)."""
