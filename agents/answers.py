"""The gateway's reading of answers: the text of an answer, its validation against the role's schema (with JSON
salvaged from free text), what was wrong with a bad one, the repair request that says so, and the schema a backend is
sent (`wire_schema`: loosened for self-hosted servers, stated in the system message for JSON mode).

Nothing here calls a model: `agents.gateway` calls, and hands each answer to these functions.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError

from agents.content import data_text
from agents.providers.json_salvage import salvage_json
from agents.providers.langchain_api import self_hosted
from agents.spec import ModelSpec

M = TypeVar("M", bound=BaseModel)

REPAIR_PROMPT = (
    "Your previous answer could not be used: {error}. Answer again with only the structured result the system "
    "message asks for, following the schema exactly."
)


def raw_text(msg: object) -> str:
    """The text of an answer: the first tool call's arguments as JSON, else the content's text."""
    if not isinstance(msg, AIMessage):
        return str(msg)
    if msg.tool_calls:
        return json.dumps(msg.tool_calls[0].get("args", {}), ensure_ascii=False)
    content = msg.content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


# Self-hosted servers turn a JSON schema into a grammar; llama.cpp (llama-cpp-python's server, Ollama) writes a
# `maxLength` of n as n nested optional groups and fails, or crashes, past about a thousand. Bounds above this are
# left out of the schema such a server gets; the answer is still validated against the full schema (and repaired).
SERVER_BOUND_LIMIT = 200
_LENGTH_BOUNDS = ("maxLength", "maxItems")


def wire_schema(schema: type[M], spec: ModelSpec) -> type[M] | dict[str, Any]:
    """The schema sent to `spec`'s backend: `schema` itself, or for a self-hosted server (a custom `@base_url`) its
    JSON schema without length bounds above `SERVER_BOUND_LIMIT`."""
    if not self_hosted(spec):
        return schema
    return _loosen_object(schema.model_json_schema())


def _loosen_object(node: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _loosen(v)
        for k, v in node.items()
        if not (k in _LENGTH_BOUNDS and isinstance(v, int) and v > SERVER_BOUND_LIMIT)
    }


def _loosen(node: object) -> object:
    if isinstance(node, dict):
        return _loosen_object(node)
    if isinstance(node, list):
        return [_loosen(v) for v in node]
    return node


def with_schema_note(convo: list[BaseMessage], schema: type[BaseModel]) -> list[BaseMessage]:
    """JSON mode carries no schema on the wire: state it in the system message."""
    note = f"\n\nAnswer with one JSON object that follows this JSON schema:\n{json.dumps(schema.model_json_schema())}"
    return [SystemMessage(content=str(convo[0].content) + note), *convo[1:]]


def parse_answer(result: dict[str, Any], schema: type[M]) -> tuple[M | None, str, str]:
    """(validated value or None, the raw answer text, what was wrong with it) -- salvaging JSON from free text."""
    raw_msg = result.get("raw")
    raw = raw_text(raw_msg)
    value = result.get("parsed")
    error = result.get("parsing_error")
    if value is None:
        salvaged = salvage_json(raw)
        if salvaged is not None:
            try:
                value = schema.model_validate(salvaged)
            except ValidationError as exc:
                error = exc
    elif not isinstance(value, schema):
        try:
            value = schema.model_validate(value)
        except ValidationError as exc:
            value, error = None, exc
    if value is not None:
        return value, raw, ""
    finish = (getattr(raw_msg, "response_metadata", None) or {}).get("finish_reason")
    if finish == "length":
        return None, raw, "the answer was cut at the token limit; answer more briefly"
    if isinstance(error, ValidationError):
        return None, raw, validation_summary(error)
    if error is not None:
        return None, raw, str(error).splitlines()[0][:300]
    return None, raw, "the answer was not the requested structured result"


def repair_messages(messages: list[BaseMessage], raw: str, error: str) -> list[BaseMessage]:
    """The original request plus the bad answer (as data, never as instructions) and what to fix."""
    note = data_text("previous_answer", raw[:4000]) + "\n\n" + REPAIR_PROMPT.format(error=error)
    return [*messages, HumanMessage(content=note)]


def answer_error(exc: BaseException | None) -> dict[str, Any] | None:
    """A client-side parse failure of an answer (cut at the token limit, not JSON, off the schema) as the
    `include_raw` result the repair loop expects; None for any other error."""
    if exc is None:
        return None
    name = type(exc).__name__
    raw, finish = "", None
    if name == "LengthFinishReasonError":
        finish = "length"
        choices = getattr(getattr(exc, "completion", None), "choices", None) or []
        raw = (getattr(getattr(choices[0], "message", None), "content", None) or "") if choices else ""
    elif isinstance(exc, ValidationError):
        errors = exc.errors()
        value = errors[0].get("input") if errors else None
        raw = value if isinstance(value, str) else json.dumps(value, default=str) if value is not None else ""
    elif isinstance(exc, json.JSONDecodeError):
        raw = exc.doc or ""
    elif name == "OutputParserException":
        raw = str(getattr(exc, "llm_output", "") or "")
    else:
        return None
    msg = AIMessage(content=raw, response_metadata={"finish_reason": finish} if finish else {})
    return {"raw": msg, "parsed": None, "parsing_error": exc}


def validation_summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc or 'answer'}: {err.get('msg')}")
    return "; ".join(parts)
