"""The base of Unveil's own chat models (scripted, transformers, llama.cpp, Hugging Face VLM, and the Ray engine's
remote stand-in): tools are bound as OpenAI tool schemas, the first of which asks for the structured answer, and
every call comes down to one `_respond` over the messages and the call's options (`tools`, `max_tokens`, ...).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict


def openai_tool(schema: type) -> dict[str, object]:
    """An answer schema as an OpenAI tool schema, a fresh dict each call, converted once: the gateway binds the same
    few schemas on every call, and pydantic builds a JSON schema anew each time."""
    return dict(json.loads(_openai_tool_json(schema)))


@functools.lru_cache(maxsize=256)  # bounded: a few schemas, plus the few sized ones `expansion_schema` makes
def _openai_tool_json(schema: type) -> str:
    return json.dumps(convert_to_openai_tool(schema))


class LocalChatModel(BaseChatModel):
    """A chat model that answers through `_respond` (blocking); asynchronous calls run it in a thread, so a model
    that computes for seconds leaves the event loop free for the other graph runs. Subclasses whose answers do not
    block override `_arespond` instead."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind tool schemas; the first one's parameters are the structured answer asked for."""
        return self.bind(
            tools=[openai_tool(t) if isinstance(t, type) else convert_to_openai_tool(t) for t in tools], **kwargs
        )

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        """The answer to `messages`; `options` are the call's keyword arguments (bound tools, token limits)."""
        raise NotImplementedError(f"{type(self).__name__} answers asynchronous calls only")

    async def _arespond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        """The answer of an asynchronous call: `_respond` in a thread."""
        return await asyncio.to_thread(self._respond, messages, options)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._respond(messages, kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await self._arespond(messages, kwargs)
