"""Messages shared by Unveil's own chat models: the request as plain chat turns for a text-only local model, and a
structured answer as a tool call, with token usage."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tools.env import SettingError


def tool_call_message(tool: dict[str, Any], args: dict[str, Any], **metadata: Any) -> AIMessage:
    """An answer carrying `args` as a call of the bound `tool` (an OpenAI-format tool dict), so LangChain's
    `with_structured_output(method="function_calling")` parses it like any provider's."""
    call = {"name": tool["function"]["name"], "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], **metadata)


def chat_result(msg: AIMessage, input_tokens: int, output_tokens: int) -> ChatResult:
    """`msg` with its usage recorded, as a one-generation result."""
    msg.usage_metadata = {
        "input_tokens": int(input_tokens),
        "output_tokens": int(output_tokens),
        "total_tokens": int(input_tokens) + int(output_tokens),
    }
    return ChatResult(generations=[ChatGeneration(message=msg)])


_CHAT_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "user"}


def text_chat_messages(messages: Sequence[BaseMessage], provider: str) -> list[dict[str, str]]:
    """`messages` as `{"role", "content"}` turns for a text-only model's chat template: text blocks joined, an
    earlier structured answer as its JSON; an image is refused naming `provider` (give a description instead)."""
    out = []
    for m in messages:
        if isinstance(m.content, str):
            text = m.content
        else:
            if any(isinstance(b, dict) and b.get("type") in ("image_url", "image") for b in m.content):
                raise SettingError(
                    f"the {provider} provider is text-only: give an image description instead of an image"
                )
            text = "\n".join(b.get("text", "") for b in m.content if isinstance(b, dict))
        if isinstance(m, AIMessage) and m.tool_calls:
            text = json.dumps(m.tool_calls[0].get("args", {}), ensure_ascii=False)
        out.append({"role": _CHAT_ROLES.get(m.type, "user"), "content": text})
    return out
