"""Turn a `ModelSpec` into a LangChain chat model, through its provider's profile.

Each provider's profile (`agents.providers.profiles.PROFILES`) names the module that builds its models: Unveil's own
(`scripted`, `transformers`, `llamacpp`, `hf`) or `agents.providers.langchain_api`, which passes every other
provider name to LangChain's `init_chat_model` (openai, anthropic, google_genai, ollama, ...). A spec with
`@base_url` talks to any OpenAI-compatible server (vLLM, llama.cpp server, LM Studio) through `langchain-openai`.
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.language_models import BaseChatModel

from agents.providers.profiles import SharedState, provider_profile
from agents.spec import ModelSpec
from tools.env import env_list

# Text-only servers behind a provider whose models see images are declared with $UNVEIL_TEXT_ONLY (comma-separated
# spec prefixes), read only by `supports_images`.
TEXT_ONLY_ENV = "UNVEIL_TEXT_ONLY"


def model_fingerprint(spec: ModelSpec) -> str:
    """What identifies the content behind a spec whose name alone does not: the response cache keys calls by it.

    Scripts are keyed by a SHA-256 of their bytes (small files); GGUF files, local Hugging Face folders and LoRA
    adapters by `file_stamp` (path, size, mtime); remote APIs and Hub ids by their name only ("" for APIs). The
    profile's `fingerprint` says which; its module computes it.
    """
    profile = provider_profile(spec.provider)
    if profile.fingerprint == "name":
        return ""
    return profile.implementation().model_fingerprint(spec)


def supports_images(spec: ModelSpec) -> bool:
    """Whether a model takes image content blocks: not for a text-only provider (its profile's `images`), nor for
    a spec that starts with one of the prefixes in `$UNVEIL_TEXT_ONLY` (such a model is sent image descriptions)."""
    if not provider_profile(spec.provider).images:
        return False
    declared = env_list(TEXT_ONLY_ENV)
    return not any(str(spec).startswith(prefix) for prefix in declared)


RemoteChatModels = Callable[[ModelSpec, str], BaseChatModel]
_REMOTE_CHAT: list[RemoteChatModels] = []  # at most one: the engine of the current run


def set_remote_chat_models(factory: RemoteChatModels | None) -> None:
    """Build chat models of the providers whose profile is `engine_hosted` through a distributed engine's factory
    (its actor pool), or in this process again (None). The gateway, the roles and the records see the same model
    either way."""
    _REMOTE_CHAT.clear()
    if factory is not None:
        _REMOTE_CHAT.append(factory)


def create_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The chat model for a spec; `role` matters only to providers whose answers are per role (scripted)."""
    profile = provider_profile(spec.provider)
    if _REMOTE_CHAT and profile.engine_hosted:
        profile.implementation().check_options(spec)  # a bad option is refused here, not in an actor
        return _REMOTE_CHAT[0](spec, role)
    return build_local_chat_model(spec, role, shared)


def build_local_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The chat model for a spec, in this process (what an engine's model actors run): its options are checked
    first, so a bad one is refused by name before any weights load."""
    module = provider_profile(spec.provider).implementation()
    module.check_options(spec)
    return module.build_chat_model(spec, role, shared)
