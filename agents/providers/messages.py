"""Answer messages shared by Unveil's own chat models: a structured answer as a tool call, with token usage."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult


def tool_call_message(tool: dict[str, Any], args: dict[str, Any], **metadata: Any) -> AIMessage:
    """An answer carrying `args` as a call of the bound `tool` (an OpenAI-format tool dict), so LangChain's
    `with_structured_output(method="function_calling")` parses it like any provider's."""
    call = {"name": tool["function"]["name"], "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], **metadata)


def chat_result(msg: AIMessage, input_tokens: int, output_tokens: int) -> ChatResult:
    """`msg` with its usage recorded, as a one-generation result."""
    msg.usage_metadata = {"input_tokens": int(input_tokens), "output_tokens": int(output_tokens),
                          "total_tokens": int(input_tokens) + int(output_tokens)}
    return ChatResult(generations=[ChatGeneration(message=msg)])
