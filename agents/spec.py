"""Model spec strings: `provider:model`, optionally `@base_url` for an OpenAI-compatible server.

Examples: `openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`, `ollama:qwen2.5vl`,
`openai:Qwen/Qwen2.5-VL-7B-Instruct@http://localhost:8000/v1` (vLLM, llama.cpp server, LM Studio),
`scripted:tests/data/script.json`, `transformers:smollm2` (the embedded default, SmolLM2-135M run by transformers;
`llamacpp:smollm2` is the same model through the optional llama-cpp-python), `hf:Qwen/Qwen2.5-VL-3B-Instruct`.

A base URL may carry credentials (`http://user:password@host/v1`). `ModelSpec.base_url` keeps the real URL for the
client; `str(spec)` (and `backend`) show it with the credentials replaced by `***`, so every record, log line,
error and cache key built from a spec is safe to write. `redact_spec` does the same for a spec string.
`as_model_spec` is what the gateway calls with the spec of every call: a string is parsed once per process.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tools.errors import UnveilError
from tools.redact import redact_secrets, redact_url

DEFAULT_SPEC = "transformers:smollm2"


_URL_SPLIT = re.compile(r"@(?=https?://)")


class ModelSpecError(UnveilError, ValueError):
    """A model spec string could not be parsed."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec."""

    provider: str
    model: str
    base_url: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """Parse `provider:model[@base_url]`; the provider is required."""
        if not isinstance(spec, str) or not spec.strip():
            raise ModelSpecError(f"model spec {spec!r}: empty")
        shown = redact_secrets(spec)  # error messages are written: never with a URL's password
        text = spec.strip()
        base_url = None
        parts = _URL_SPLIT.split(text, maxsplit=1)
        if len(parts) == 2:
            text, base_url = parts[0], parts[1].rstrip("/")
        if ":" not in text:
            raise ModelSpecError(
                f"model spec {shown!r}: expected 'provider:model' (e.g. 'openai:gpt-4.1'), optionally '@base_url'"
            )
        provider, model = text.split(":", 1)
        provider = provider.strip().lower()
        if not provider or not model.strip():
            raise ModelSpecError(f"model spec {shown!r}: provider and model must both be given")
        return cls(provider=provider, model=model.strip(), base_url=base_url)

    @property
    def backend(self) -> str:
        """The key that concurrency and rate limits are shared under (one per server), credentials redacted."""
        return f"{self.provider}@{redact_url(self.base_url)}" if self.base_url else self.provider

    def __str__(self) -> str:
        # The display form: safe for records and logs. The client gets `base_url`, with its credentials.
        return f"{self.provider}:{self.model}" + (f"@{redact_url(self.base_url)}" if self.base_url else "")


def as_model_spec(spec: str | ModelSpec) -> ModelSpec:
    """`spec` as a `ModelSpec`: one is passed through; a string is parsed (`ModelSpec.parse`, with its errors) once
    per process, as roles name the same few specs on every call."""
    if isinstance(spec, ModelSpec):
        return spec
    if not isinstance(spec, str):
        return ModelSpec.parse(spec)  # refused with the spec named, as any other bad spec
    return _parse_once(spec)


@functools.lru_cache(maxsize=256)
def _parse_once(spec: str) -> ModelSpec:
    # A frozen ModelSpec is safe to share; a spec that fails to parse raises again each time (nothing is cached).
    return ModelSpec.parse(spec)


def redact_spec(spec: str) -> str:
    """A spec string safe to write: the credentials of its base URL replaced by `***` (unparseable text is passed
    through `redact_url` as is)."""
    try:
        return str(ModelSpec.parse(spec))
    except ModelSpecError:
        return redact_url(spec)
