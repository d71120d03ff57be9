"""The `scripted:FILE` provider: canned structured answers per role, for tests and reproducible demos.

The file is JSON: an object whose keys are call roles (`root_extractor`, `expander.visual`, ...) and whose
values are lists of answers consumed in call order. Each answer is one of:

- an object: returned as a tool call whose arguments are that object (the structured answer);
- a string: returned as plain text content (to script malformed answers and repairs);
- `{"__error__": "message"}`: the call raises, as a failing backend would; add `"status": 429` (or 500, 503)
  to make it a transient HTTP-style fault that the gateway retries;
- `{"when": "substring", "then": answer}`: a rule, used (not consumed) whenever the request's data contains
  the substring; rules are checked before the ordered answers, so concurrent samples stay deterministic. Only the
  delimited `<data name=...>` elements of the request are searched (tags included, so a data name matches too),
  never the role's own system prompt; a request without data elements is searched in its non-system text.

A role that has no key falls back to its nearest enclosing role, one dotted part at a time (`judge.blind.2` ->
`judge.blind` -> `judge`, `expander.visual` -> `expander`). `$UNVEIL_SCRIPT_LATENCY`
(seconds) or `latency` in the spec's query (`scripted:FILE?latency=0.2`) delays every answer, for benchmarks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import PrivateAttr

from agents.providers.local_base import LocalChatModel
from agents.providers.messages import chat_result, tool_call_message
from agents.providers.profiles import PROFILES, SharedState, spec_options
from agents.spec import ModelSpec
from tools.env import SettingError, env_float
from tools.errors import InputDataError, MissingFileError, UnveilError
from tools.safe_files import MAX_SMALL_FILE_BYTES, UnreadableFileError, read_regular


class ScriptExhaustedError(UnveilError, RuntimeError):
    """The script has no answer left for a role."""


class ScriptedBackendError(UnveilError, RuntimeError):
    """A scripted backend failure; `status_code` (e.g. 429, 503) makes it look like an HTTP error."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class Script:
    """A loaded script file with one cursor per role (shared by every model bound to it)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingFileError(f"scripted provider: script file {str(path)!r} not found")
        # regular files only, capped: a FIFO or /dev/zero linked as a script must not hang or fill the server
        data = json.loads(read_regular(self.path, MAX_SMALL_FILE_BYTES, what="script file").decode("utf-8"))
        if not isinstance(data, dict):
            raise InputDataError(f"scripted provider: {str(path)!r} must hold a JSON object of role -> answers")
        self.answers: dict[str, list[Any]] = {k: list(v) for k, v in data.items() if isinstance(v, list)}
        self.cursors: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        # (role, messages) of every call, so tests can check exactly what reached the model and where.
        self.requests: list[tuple[str, list[BaseMessage]]] = []
        self._lock = threading.Lock()

    def next_answer(self, role: str, request_text: str) -> Any:
        """The answer for a call of `role` whose request contains `request_text`."""
        key = script_key(role, self.answers)
        if key is None:
            raise ScriptExhaustedError(f"script {self.path.name}: no answers for role {role!r}")
        with self._lock:
            self.calls[role] = self.calls.get(role, 0) + 1
            items = self.answers[key]
            for item in items:
                if isinstance(item, dict) and "when" in item and item["when"] in request_text:
                    return item["then"]
            ordered = [i for i in items if not (isinstance(i, dict) and "when" in i)]
            idx = self.cursors.get(key, 0)
            if idx >= len(ordered):
                raise ScriptExhaustedError(
                    f"script {self.path.name}: role {role!r} has no answer left after {idx} calls"
                )
            self.cursors[key] = idx + 1
            return ordered[idx]


def script_key(role: str, answers: Mapping[str, object]) -> str | None:
    """The script key answering `role`: the role itself, else its nearest enclosing role, dropping one dotted part at
    a time (`judge.blind.2` -> `judge.blind` -> `judge`); None when no key matches."""
    parts = role.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in answers:
            return key
    return None


def script_fingerprint(path: str | Path) -> str:
    """SHA-256 of a script file's bytes: the response cache keys scripted answers by it, so an edited script is never
    answered from entries of its previous version (scripts are small, so hashing them costs nothing)."""
    try:
        return hashlib.sha256(read_regular(path, MAX_SMALL_FILE_BYTES, what="script file")).hexdigest()
    except (OSError, UnreadableFileError):
        return "missing"  # building the model reports the missing file with its name


# A data element as agents/content.py writes it; its content cannot contain a closing tag (they are escaped).
_DATA_ELEMENT = re.compile(r"<data name=[^>]*>.*?</data>", re.S)


def request_data(messages: Sequence[BaseMessage]) -> str:
    """The part of a request that `when` rules match: its delimited data elements (the untrusted content), not the
    role's instructions; the non-system text when the request holds no data element."""
    text = _text_of([m for m in messages if m.type != "system"])
    elements = _DATA_ELEMENT.findall(text)
    return "\n".join(elements) if elements else text


def _text_of(messages: Sequence[BaseMessage]) -> str:
    out: list[str] = []
    for m in messages:
        if isinstance(m.content, str):
            out.append(m.content)
        else:
            out.extend(b.get("text", "") for b in m.content if isinstance(b, dict))
    return "\n".join(out)


class ScriptedChatModel(LocalChatModel):
    """A chat model that answers from a `Script`, as tool calls when a schema tool is bound."""

    script: Script
    role: str = "default"
    latency: float = 0.0
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "unveil-scripted"

    def _answer(self, messages: list[BaseMessage], tools: list[dict[str, Any]] | None) -> ChatResult:
        request = _text_of(messages)
        self.script.requests.append((self.role, list(messages)))
        answer = self.script.next_answer(self.role, request_data(messages))
        if isinstance(answer, dict) and "__error__" in answer:
            raise ScriptedBackendError(
                f"scripted backend error for role {self.role!r}: {answer['__error__']}", answer.get("status")
            )
        in_tokens = max(1, len(request) // 4)
        if isinstance(answer, str) or not tools:
            content = answer if isinstance(answer, str) else json.dumps(answer)
            msg = AIMessage(content=content)
        else:
            content = json.dumps(answer)
            msg = tool_call_message(tools[0], answer)
        return chat_result(msg, in_tokens, max(1, len(content) // 4))

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        if self.latency:
            time.sleep(self.latency)
        return self._answer(messages, options.get("tools"))

    async def _arespond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        # Answers cost nothing: no thread, so a scripted latency overlaps across any number of concurrent calls.
        if self.latency:
            await asyncio.sleep(self.latency)
        return self._answer(messages, options.get("tools"))


_SCRIPTS_LOCK = threading.Lock()


def check_options(spec: ModelSpec) -> None:
    """`latency` (seconds, a number of at least 0) is the one option of a `scripted:` spec."""
    _latency(spec)


def _latency(spec: ModelSpec) -> float:
    given = spec_options(spec, PROFILES["scripted"]).get("latency")
    if not given:  # `?latency=` counts as not given, as before options were checked
        return env_float("UNVEIL_SCRIPT_LATENCY", 0.0, minimum=0) or 0.0
    try:
        latency = float(given)
    except ValueError:
        raise SettingError(f"model spec {spec}: latency={given!r} is not a number") from None
    if not latency >= 0:
        raise SettingError(f"model spec {spec}: latency={given!r} must be at least 0")
    return latency


def build_chat_model(spec: ModelSpec, role: str, shared: SharedState) -> BaseChatModel:
    """The scripted model of one role, over the one `Script` of the file's current content."""
    path = spec.model.partition("?")[0]
    # One Script per file content even when two roles' first calls build their models at once (the TAG graph's two
    # root calls do, from threads): a second Script would keep its own cursors and requests. An edited file is a new
    # Script (a long-lived `langgraph dev` process answers from the new version at once).
    key = (str(Path(path).resolve()), script_fingerprint(path))
    with _SCRIPTS_LOCK:
        scripts = shared.setdefault("scripts", {})
        if key not in scripts:
            scripts[key] = Script(path)
    return ScriptedChatModel(script=scripts[key], role=role, latency=_latency(spec))


def model_fingerprint(spec: ModelSpec) -> str:
    """The script's SHA-256, hashed at every call (see `script_fingerprint`)."""
    return "sha256:" + script_fingerprint(spec.model.partition("?")[0])
