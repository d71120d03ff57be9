"""Model spec strings: `provider:model`, optionally `@base_url` for an OpenAI-compatible server.

Examples: `openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`, `ollama:qwen2.5vl`,
`openai:Qwen/Qwen2.5-VL-7B-Instruct@http://localhost:8000/v1` (vLLM, llama.cpp server, LM Studio),
`scripted:tests/data/script.json`, `llamacpp:smollm2` (the embedded default), `hf:Qwen/Qwen2.5-VL-3B-Instruct`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_SPEC = "llamacpp:smollm2"


def is_demo_spec(spec: str) -> bool:
    """Whether a spec names the embedded 135M demonstration model (a pipeline demo, never a judge or a teacher)."""
    return str(spec).strip().split("?", 1)[0].split("@", 1)[0].lower().endswith(":smollm2")

_URL_SPLIT = re.compile(r"@(?=https?://)")


class ModelSpecError(ValueError):
    """A model spec string could not be parsed."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec."""

    provider: str
    model: str
    base_url: str | None = None

    @classmethod
    def parse(cls, spec: str) -> "ModelSpec":
        """Parse `provider:model[@base_url]`; the provider is required."""
        if not isinstance(spec, str) or not spec.strip():
            raise ModelSpecError(f"model spec {spec!r}: empty")
        text = spec.strip()
        base_url = None
        parts = _URL_SPLIT.split(text, maxsplit=1)
        if len(parts) == 2:
            text, base_url = parts[0], parts[1].rstrip("/")
        if ":" not in text:
            raise ModelSpecError(
                f"model spec {spec!r}: expected 'provider:model' (e.g. 'openai:gpt-4.1'), optionally '@base_url'"
            )
        provider, model = text.split(":", 1)
        provider = provider.strip().lower()
        if not provider or not model.strip():
            raise ModelSpecError(f"model spec {spec!r}: provider and model must both be given")
        return cls(provider=provider, model=model.strip(), base_url=base_url)

    @property
    def backend(self) -> str:
        """The key that concurrency and rate limits are shared under (one per server)."""
        return f"{self.provider}@{self.base_url}" if self.base_url else self.provider

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}" + (f"@{self.base_url}" if self.base_url else "")
