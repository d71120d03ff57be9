"""The `hf:` provider: a local Hugging Face vision-language model (e.g. Qwen2.5-VL) run in-process.

Spec syntax (everything after `hf:`)::

    hf:MODEL[?key=value&key=value...]

- `MODEL` is a Hub id (`Qwen/Qwen2.5-VL-3B-Instruct`) or a local folder saved with `save_pretrained`. A folder that
  holds only a PEFT adapter (`adapter_config.json`, no `config.json`) is accepted too: its base model is read from
  the adapter config.
- `adapter=PATH` — a PEFT (LoRA) adapter folder applied on top of the model, e.g.
  `hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=runs/ipr-grpo/checkpoint-50`.
- `merge=1` — merge the adapter into the weights after loading (faster generation, no unmerging).
- `device=cpu|cuda|cuda:1|auto` (default `auto`: CUDA when present), `dtype=auto|bfloat16|float16|float32`
  (default `auto`: bfloat16 on CUDA, float32 on CPU).
- `max_new_tokens=N` (default 256), `temperature=T` (default 0: greedy decoding), `top_p=P`.
- `min_pixels=N`, `max_pixels=N` — the image resolution budget passed to the processor (Qwen-style processors).
- `attn=sdpa|eager|flash_attention_2` — the attention implementation (default: the library's choice).

The model is loaded with `AutoModelForImageTextToText` and `AutoProcessor` once per process (cached in the
gateway's `shared` dict under the model, adapter, device and dtype), and shared by every role that names the same
spec. Generation runs in a worker thread, one request at a time per loaded model, so concurrent graph runs queue
instead of contending for the device.

The chat model takes LangChain messages whose content may hold `image_url` blocks with `data:` URLs (what
`agents.content.build_messages` produces) or standard `image` blocks with base64 data. When a tool schema is bound
(the gateway's structured calls), the schema is added to the system message and the JSON answer becomes a tool
call, so the same model can also serve structured roles.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from agents.providers.fingerprint import file_stamp
from agents.providers.json_salvage import salvage_json
from agents.providers.local_base import LocalChatModel
from agents.providers.messages import chat_result, tool_call_message
from agents.providers.profiles import PROFILES, SharedState
from agents.spec import ModelSpec
from tools.env import parse_bool
from tools.errors import UnveilError
from tools.extras import require_extra
from tools.safe_files import MAX_SMALL_FILE_BYTES, read_regular

KNOWN_OPTIONS = frozenset(PROFILES["hf"].options or ())

TOOL_NOTE = "Answer with exactly one JSON object (no prose, no code fence) that follows this JSON schema:\n{schema}"


class HFModelError(UnveilError, ValueError):
    """An `hf:` spec could not be loaded or used (bad option, missing model or adapter, unreadable image)."""


# What identifies one loaded copy of the weights: model, adapter, merge, device, dtype, min/max pixels, attention.
LoadKey = tuple[str, str | None, bool, str, str, int | None, int | None, str | None]


@dataclass(frozen=True)
class HFOptions:
    """The parsed `hf:` spec."""

    model: str
    adapter: str | None = None
    merge: bool = False
    device: str = "auto"
    dtype: str = "auto"
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    attn: str | None = None

    @property
    def load_key(self) -> LoadKey:
        """What identifies one loaded copy of the weights (generation settings do not)."""
        return (
            self.model,
            self.adapter,
            self.merge,
            self.device,
            self.dtype,
            self.min_pixels,
            self.max_pixels,
            self.attn,
        )


def _option_values(raw: dict[str, str]) -> dict[str, Any]:
    """The typed `HFOptions` fields of a spec's query options (a `ValueError` for a value of the wrong kind)."""
    kw: dict[str, Any] = {}
    if raw.get("adapter"):
        kw["adapter"] = raw["adapter"]
    if "merge" in raw:
        kw["merge"] = raw["merge"] == "" or parse_bool("merge", raw["merge"])  # a bare ?merge means on
    kinds: tuple[tuple[tuple[str, ...], type[str] | type[int] | type[float]], ...] = (
        (("device", "dtype", "attn"), str),
        (("max_new_tokens", "min_pixels", "max_pixels"), int),
        (("temperature", "top_p"), float),
    )
    for names, kind in kinds:
        kw.update({name: kind(raw[name]) for name in names if raw.get(name)})
    return kw


def parse_hf_spec(spec: ModelSpec | str) -> HFOptions:
    """Parse `hf:MODEL[?adapter=PATH&...]` into `HFOptions`; unknown or malformed options raise `HFModelError`."""
    parsed = spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)
    if parsed.provider != "hf":
        raise HFModelError(f"{parsed}: not an hf: spec")
    model, _, query = parsed.model.partition("?")
    model = model.strip()
    if not model:
        raise HFModelError(f"{parsed}: no model id or folder before '?'")
    raw = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    unknown = sorted(set(raw) - KNOWN_OPTIONS)
    if unknown:
        known = ", ".join(sorted(KNOWN_OPTIONS))
        raise HFModelError(f"{parsed}: unknown option(s) {', '.join(unknown)}; known: {known}")
    try:
        kw: dict[str, Any] = {"model": model, **_option_values(raw)}
    except ValueError as exc:
        raise HFModelError(f"{parsed}: bad option value ({exc})") from exc
    if kw.get("max_new_tokens", 1) < 1:
        raise HFModelError(f"{parsed}: max_new_tokens must be at least 1")
    if kw.get("dtype", "auto") not in ("auto", "bfloat16", "float16", "float32"):
        raise HFModelError(f"{parsed}: dtype must be auto, bfloat16, float16 or float32")
    return HFOptions(**kw)


def hf_fingerprint(spec: ModelSpec) -> str:
    """File stamps (path, size, mtime of every file) of a local model folder and of the adapter folder, so a LoRA
    adapter retrained at the same path is not answered from the response cache of its previous weights; a Hub id
    contributes its name only."""
    try:
        opts = parse_hf_spec(spec)
    except HFModelError:
        return "invalid"
    parts = [file_stamp(Path(opts.model)) if _looks_local(opts.model) else opts.model]
    if opts.adapter:
        parts.append(file_stamp(Path(opts.adapter)))
    return "||".join(parts)


@dataclass
class LoadedVLM:
    """One model + processor in memory, with the lock that serialises generation on it."""

    model: Any
    processor: Any
    device: str
    max_positions: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or Path(ref).expanduser().exists()


def _resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise HFModelError(f"device {device!r} requested but CUDA is not available")
    return device


def _resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


def _adapter_base(folder: Path) -> str | None:
    """The base model a bare adapter folder's `adapter_config.json` names (a regular file, read capped)."""
    raw = read_regular(folder / "adapter_config.json", MAX_SMALL_FILE_BYTES, what="adapter config")
    base = json.loads(raw.decode("utf-8")).get("base_model_name_or_path")
    return base if isinstance(base, str) else None  # anything else names no model


def _model_and_adapter(opts: HFOptions) -> tuple[str, str | None]:
    """The base model and the adapter to load: a bare adapter folder names its base model in its config."""
    model_ref, adapter = opts.model, opts.adapter
    local = Path(model_ref).expanduser()
    if _looks_local(model_ref):
        if not local.exists():
            raise HFModelError(f"hf model folder {model_ref!r} does not exist")
        if (local / "adapter_config.json").is_file() and not (local / "config.json").is_file():
            base = _adapter_base(local)
            if not base:
                raise HFModelError(f"adapter folder {model_ref!r} names no base model; use hf:BASE?adapter={model_ref}")
            return base, adapter or str(local)
    return model_ref, adapter


def load_vlm(opts: HFOptions) -> LoadedVLM:
    """Load model, processor and optional adapter; errors name the missing piece."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model_ref, adapter = _model_and_adapter(opts)
    if adapter:
        apath = Path(adapter).expanduser()
        if not (apath / "adapter_config.json").is_file():
            raise HFModelError(f"PEFT adapter {adapter!r}: no adapter_config.json there")
        require_extra("train", f"PEFT adapter {adapter!r}", ("peft",))  # before the base model's long load
    device = _resolve_device(opts.device)
    dtype = _resolve_dtype(opts.dtype, device)
    proc_kw: dict[str, Any] = {}
    if opts.min_pixels:
        proc_kw["min_pixels"] = opts.min_pixels
    if opts.max_pixels:
        proc_kw["max_pixels"] = opts.max_pixels
    try:
        # transformers leaves this classmethod unannotated.
        processor = AutoProcessor.from_pretrained(model_ref, **proc_kw)  # type: ignore[no-untyped-call]
    except (OSError, ValueError) as exc:
        raise HFModelError(
            f"hf model {model_ref!r}: cannot load its processor ({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    model_kw: dict[str, Any] = {"dtype": dtype}
    if opts.attn:
        model_kw["attn_implementation"] = opts.attn
    model: Any  # a transformers or PEFT model: their stubs disagree on what `.to` and `.eval` are
    try:
        model = AutoModelForImageTextToText.from_pretrained(model_ref, **model_kw)
    except (OSError, ValueError) as exc:
        raise HFModelError(
            f"hf model {model_ref!r}: cannot load it as an image-text-to-text model "
            f"({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    if adapter:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, adapter)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise HFModelError(f"PEFT adapter {adapter!r} does not fit {model_ref!r}: {str(exc)[:300]}") from exc
        if opts.merge:
            model = model.merge_and_unload()
    model.to(device)
    model.eval()
    config = getattr(model, "config", None)
    text_cfg = getattr(config, "text_config", None) or config
    max_positions = getattr(text_cfg, "max_position_embeddings", None)
    return LoadedVLM(model=model, processor=processor, device=device, max_positions=max_positions)


def get_loaded_vlm(opts: HFOptions, shared: SharedState) -> LoadedVLM:
    """The process-wide copy of a model (loaded on first use, under a lock so concurrent first calls load once)."""
    lock = shared.setdefault("hf_load_lock", threading.Lock())
    with lock:
        cache: dict[LoadKey, LoadedVLM] = shared.setdefault("hf_models", {})
        if opts.load_key not in cache:
            cache[opts.load_key] = load_vlm(opts)
        return cache[opts.load_key]


# -- message conversion ------------------------------------------------------------------------------------------

_DATA_URL = re.compile(r"^data:(?P<mime>[\w/+.-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.S)


def decode_image(url_or_b64: str, *, is_b64: bool = False) -> Any:
    """A PIL image from a `data:` URL or raw base64; remote URLs are refused (the node must pass a data URL)."""
    from PIL import UnidentifiedImageError

    from tools.image_store import ImageInputError, open_image

    if is_b64:
        payload = url_or_b64
    else:
        m = _DATA_URL.match(url_or_b64.strip())
        if not m:
            raise HFModelError("hf provider: image blocks must be data: URLs (remote URLs are not fetched here)")
        if not m.group("b64"):
            raise HFModelError("hf provider: image data URL is not base64-encoded")
        payload = m.group("data")
    try:
        raw = base64.b64decode(payload, validate=False)
        img = open_image(io.BytesIO(raw), name="image in message")  # the allowed formats only (no Ghostscript)
        img.load()
    except (binascii.Error, UnidentifiedImageError, OSError, ImageInputError) as exc:
        raise HFModelError(f"hf provider: unreadable image in message ({type(exc).__name__})") from exc
    return img.convert("RGB")


def _block_image(block: dict[str, Any]) -> Any | None:
    kind = block.get("type")
    if kind == "image_url":
        url = block.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return decode_image(str(url or ""))
    if kind == "image":
        if block.get("base64") or block.get("data"):
            return decode_image(str(block.get("base64") or block.get("data")), is_b64=True)
        if block.get("source_type") == "base64":
            return decode_image(str(block.get("data", "")), is_b64=True)
        if block.get("url"):
            return decode_image(str(block["url"]))
        raise HFModelError("hf provider: image block without data")
    return None


def to_hf_conversation(
    messages: Sequence[BaseMessage], tools: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[Any]]:
    """LangChain messages -> (chat-template conversation, images in order of appearance)."""
    roles = {"system": "system", "human": "user", "ai": "assistant", "tool": "user"}
    convo: list[dict[str, Any]] = []
    images: list[Any] = []
    for msg in messages:
        role = roles.get(msg.type, "user")
        parts: list[dict[str, Any]] = []
        content = msg.content
        if isinstance(content, str):
            parts.append({"type": "text", "text": content})
        else:
            for block in content:
                if isinstance(block, str):
                    parts.append({"type": "text", "text": block})
                    continue
                img = _block_image(block)
                if img is not None:
                    images.append(img)
                    parts.append({"type": "image"})
                elif block.get("type") == "text":
                    parts.append({"type": "text", "text": block.get("text", "")})
        if isinstance(msg, AIMessage) and msg.tool_calls:
            parts.append({"type": "text", "text": json.dumps(msg.tool_calls[0].get("args", {}), ensure_ascii=False)})
        convo.append({"role": role, "content": parts})
    if tools:
        note = TOOL_NOTE.format(schema=json.dumps(tools[0]["function"].get("parameters", {}), ensure_ascii=False))
        if convo and convo[0]["role"] == "system":
            convo[0]["content"].append({"type": "text", "text": "\n\n" + note})
        else:
            convo.insert(0, {"role": "system", "content": [{"type": "text", "text": note}]})
    # System messages as plain strings: every Qwen-style template accepts that, not all accept lists there.
    for turn in convo:
        if turn["role"] == "system":
            turn["content"] = "".join(p.get("text", "") for p in turn["content"])
    return convo, images


def _json_object(text: str) -> dict[str, Any] | None:
    value = salvage_json(text)
    return value if isinstance(value, dict) else None


class HFChatModel(LocalChatModel):
    """A LangChain chat model over a locally loaded Hugging Face VLM."""

    vlm: Any  # a LoadedVLM (typed loosely: pydantic cannot validate its lock)
    options: Any  # HFOptions
    spec: str = ""

    @property
    def _llm_type(self) -> str:
        return "unveil-hf-vlm"

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        import torch

        tools = options.get("tools")
        max_new_tokens = options.get("max_new_tokens") or options.get("max_tokens")

        convo, images = to_hf_conversation(messages, tools)
        proc = self.vlm.processor
        text = proc.apply_chat_template(convo, add_generation_prompt=True, tokenize=False)
        inputs = proc(text=[text], images=images or None, return_tensors="pt")
        n_in = int(inputs["input_ids"].shape[1])
        limit = max_new_tokens or self.options.max_new_tokens
        if self.vlm.max_positions and n_in + limit > self.vlm.max_positions:
            raise HFModelError(
                f"{self.spec}: the request is {n_in} tokens; with {limit} new tokens it exceeds the model's "
                f"context of {self.vlm.max_positions}"
            )
        inputs = inputs.to(self.vlm.device)
        gen_kw: dict[str, Any] = {"max_new_tokens": limit}
        if self.options.temperature > 0:
            gen_kw.update(do_sample=True, temperature=self.options.temperature)
            if self.options.top_p:
                gen_kw["top_p"] = self.options.top_p
        else:
            gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self.vlm.lock, torch.inference_mode():
            out = self.vlm.model.generate(**inputs, **gen_kw)
        new = out[0, n_in:]
        tok = getattr(proc, "tokenizer", proc)
        eos = self.vlm.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        ended = bool(len(new)) and int(new[-1]) in eos_ids
        answer = tok.decode(new, skip_special_tokens=True).strip()
        finish = "stop" if ended or len(new) < limit else "length"
        msg = AIMessage(content=answer, response_metadata={"finish_reason": finish, "model_name": self.options.model})
        if tools and finish != "length":
            args = _json_object(answer)
            if args is not None:
                msg = tool_call_message(tools[0], args, response_metadata=msg.response_metadata)
        return chat_result(msg, n_in, len(new))


def make_hf_chat_model(spec: ModelSpec, shared: SharedState) -> BaseChatModel:
    """The chat model for an `hf:` spec; the weights are loaded once per process and kept in `shared`."""
    opts = parse_hf_spec(spec)
    return HFChatModel(vlm=get_loaded_vlm(opts, shared), options=opts, spec=str(spec))


def build_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The chat model of an `hf:` spec, for every role (`make_hf_chat_model`)."""
    return make_hf_chat_model(spec, shared)


model_fingerprint = hf_fingerprint  # the name `ProviderModule` asks for


def check_options(spec: ModelSpec) -> None:
    """Refuse an option `hf:` does not take, or a bad value, naming it (`parse_hf_spec`)."""
    parse_hf_spec(spec)
