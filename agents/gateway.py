"""The model gateway: every model call in Unveil goes through `Gateway.structured`.

It gives each role a chat model from a spec string, asks for a Pydantic-typed answer (`json_schema` where the
backend supports it, tool calling or JSON mode where not), repairs a malformed answer a bounded number of times
and then fails with the raw answer kept, retries transient transport faults with backoff, serves repeated calls
from a persistent cache, counts tokens and cost per role, and holds per-backend concurrency and rate limits.

LangGraph's default retry policy does not retry `ValueError`, which is what a schema violation looks like, so
the repair loop lives here rather than in a node retry policy. Reading answers (validation, salvage, repair
requests, the schema sent) is `agents.answers`; the errors and the fault classification are `agents.faults`; one
call's record (its cache key, its spend, its details) is `agents.gateway_call`; the knobs are
`agents.gateway_settings`; what differs between providers (structured method, limits, fingerprints) is their profile
(`agents.providers.profiles`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, ValidationError

from agents.answers import answer_error, parse_answer, raw_text, repair_messages, wire_schema, with_schema_note
from agents.cache import ResponseCache
from agents.call_log import DETAILS
from agents.faults import (
    ImagesUnsupportedError,
    ModelCallError,
    StructuredOutputError,
    describe,
    is_images_unsupported,
    is_method_unsupported,
    is_transient,
    retry_after,
    server_message,
)
from agents.gateway_call import CallResult as CallResult
from agents.gateway_call import GatewayCall
from agents.gateway_call import json_schema as json_schema
from agents.gateway_settings import GatewaySettings as GatewaySettings
from agents.limits import BackendLimits, CallBudget, SpendingCapReached
from agents.providers.langchain_api import call_deadline
from agents.providers.profiles import METHOD_ORDER, SharedState, provider_profile
from agents.providers.registry import TEXT_ONLY_ENV, create_chat_model, model_fingerprint, supports_images
from agents.spec import ModelSpec, as_model_spec
from agents.usage import RunUsage, empty_usage, merge_usage, without_calls
from tools.http_limits import limit_cause, within_deadline
from tools.redact import install_log_redaction

log = logging.getLogger("unveil.gateway")
install_log_redaction()  # HTTP clients log request URLs, a base URL's password included

__all__ = [
    "CallResult",
    "Gateway",
    "GatewaySettings",
    "ImagesUnsupportedError",
    "ModelCallError",
    "StructuredOutputError",
    "get_gateway",
    "set_gateway",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def _spec_key(spec: ModelSpec) -> str:
    # The real base URL (credentials included) tells servers apart; str(spec) redacts them.
    return f"{spec.provider}:{spec.model}@{spec.base_url}"


class Gateway:
    """One per process (see `get_gateway`); safe to share between concurrent graph runs."""

    def __init__(self, settings: GatewaySettings | None = None):
        self.settings = settings or GatewaySettings()
        self.cache = ResponseCache(self.settings.cache_path) if self.settings.cache_path else None
        self.limits = BackendLimits(self.settings.max_concurrency, self.settings.rpm)
        self.usage: RunUsage = empty_usage()
        self._models: dict[tuple[str, str, str], BaseChatModel] = {}
        self._methods: dict[str, str] = {}
        self._fingerprints: dict[str, str] = {}
        # Specs whose server refused images during this run: sent image descriptions from then on.
        self._text_only: set[str] = set()
        self.budget: CallBudget | None = None  # a batch's spending caps, checked as each request starts
        self.shared: SharedState = {}  # provider state shared across roles (scripts, loaded HF models)

    # -- models -------------------------------------------------------------------------------------------
    def model_for(self, spec: ModelSpec, role: str, fingerprint: str = "") -> BaseChatModel:
        """The chat model for a spec; a provider whose answers are per role (scripted) gets a model per role, and one
        fingerprinted by its script's content (`fingerprint`) a model per content, so an edited script is answered
        from its new version."""
        # The real base URL (credentials included) is part of the key: str(spec) redacts them.
        profile = provider_profile(spec.provider)
        key = (
            f"{spec.provider}:{spec.model}@{spec.base_url}",
            role if profile.answers_per_role else "",
            fingerprint if profile.fingerprint == "script" else "",
        )
        if key not in self._models:
            self._models[key] = create_chat_model(spec, role, self.shared)
        return self._models[key]

    async def fingerprint(self, spec: ModelSpec) -> str:
        """The content fingerprint of a spec's model (script hash, weight/adapter file stamps; "" for APIs).

        A script is hashed at every call (a small file), so a long-lived process such as `langgraph dev` sees an
        edited script at once; other models' fingerprints are taken once per process, as the model itself is
        loaded once per process, so the two stay in step."""
        if provider_profile(spec.provider).fingerprint == "script":
            return await asyncio.to_thread(model_fingerprint, spec)
        key = str(spec)
        if key not in self._fingerprints:
            self._fingerprints[key] = await asyncio.to_thread(model_fingerprint, spec)
        return self._fingerprints[key]

    def vision(self, spec: str | ModelSpec) -> bool:
        """Whether the spec's model takes images: not for a text-only provider or one declared in
        `UNVEIL_TEXT_ONLY`, nor, for the rest of the run, for a model whose server has refused images."""
        parsed = as_model_spec(spec)
        return supports_images(parsed) and _spec_key(parsed) not in self._text_only

    def _mark_text_only(self, spec: ModelSpec, exc: BaseException) -> None:
        """Remember that `spec`'s server refused images (warned once per model and run)."""
        key = _spec_key(spec)
        if key in self._text_only:
            return
        self._text_only.add(key)
        log.warning(
            "%s does not take images (%s); sending image descriptions instead for the rest of the run "
            "(declare it with %s=%s to skip this first refused request)",
            spec,
            server_message(exc),
            TEXT_ONLY_ENV,
            spec,
        )

    async def structured_seeing(
        self,
        build: Callable[[bool], Awaitable[list[BaseMessage]]],
        *,
        role: str,
        spec: str | ModelSpec,
        schema: type[M],
        usage_role: str | None = None,
        seed: int | None = None,
    ) -> CallResult[M]:
        """`structured` for a request that may show images: `build(vision)` makes its messages. A model whose server
        refuses images (recognised by its reply, then remembered for the run: see `vision`) is asked again at once
        with `build(False)`, the images' descriptions instead; without a description the refusal stands, naming
        `UNVEIL_TEXT_ONLY`."""
        vision = self.vision(spec)
        messages = await build(vision)
        try:
            return await self.structured(
                role=role, spec=spec, schema=schema, messages=messages, usage_role=usage_role, seed=seed
            )
        except ImagesUnsupportedError as refused:
            if not vision:
                raise
            try:
                messages = await build(False)
            except ValueError:  # no description to send instead of the image
                raise refused from None
        return await self.structured(
            role=role, spec=spec, schema=schema, messages=messages, usage_role=usage_role, seed=seed
        )

    def _method(self, spec: ModelSpec) -> str:
        if self.settings.structured_method:
            return self.settings.structured_method
        # Remembered per backend (provider + base URL): one server supports the same methods for all its models.
        return self._methods.get(spec.backend, provider_profile(spec.provider).structured_method)

    # -- calls --------------------------------------------------------------------------------------------
    async def _invoke(
        self, model: Any, messages: list[BaseMessage], spec: ModelSpec, role: str
    ) -> tuple[dict[str, Any], int]:
        """One request with transient-fault retries; returns (result, retries used)."""
        attempt = 0
        while True:
            try:
                async with self.limits.slot(spec.backend):
                    if self.budget is not None:  # at the start itself: the calls that held the slot are booked
                        self.budget.admit(role, self.usage["total"]["cost_usd"])
                    started = time.monotonic()
                    out = await within_deadline(model.ainvoke(messages), call_deadline(spec), str(spec))
                    log.info("role %s (%s): answered in %.2fs", role, spec, time.monotonic() - started)
                    return out, attempt
            except Exception as exc:
                if is_images_unsupported(exc, messages):
                    self._mark_text_only(spec, exc)
                    raise ImagesUnsupportedError(role, str(spec), exc) from exc  # permanent: no retry helps
                if is_method_unsupported(exc) or isinstance(exc, SpendingCapReached):
                    raise  # permanent for this backend (the caller falls back to another method), or nothing sent
                if not is_transient(exc) or attempt >= self.settings.max_retries:
                    if is_transient(exc) or attempt or limit_cause(exc):
                        raise ModelCallError(role, str(spec), exc, attempt + 1) from exc
                    raise
                delay = retry_after(exc)
                if delay is None:
                    delay = min(self.settings.backoff_max, self.settings.backoff_base * 2**attempt)
                    delay *= 0.5 + random.random()  # jitter spreads concurrent retries apart
                log.warning("role %s (%s): %s; retry %d in %.2fs", role, spec, describe(exc), attempt + 1, delay)
                attempt += 1
                await asyncio.sleep(min(delay, self.settings.backoff_max))

    async def structured(
        self,
        *,
        role: str,
        spec: str | ModelSpec,
        schema: type[M],
        messages: list[BaseMessage],
        usage_role: str | None = None,
        params: Mapping[str, object] | None = None,
        seed: int | None = None,
    ) -> CallResult[M]:
        """Ask `spec`'s model for an answer of type `schema`.

        `role` is the call role (it selects scripted answers and keys the cache); `usage_role` is the role the
        cost is booked under (defaults to the part of `role` before any '.'). `seed` names one sample of a role that
        is sampled more than once from the same messages (a scene, a blind judge, a round, an IPR step): it keys the
        cache, so each sample is its own request, stored and replayed apart. The steps: cache lookup, a call with
        method fallback and transport retries, validation with salvage, bounded repair, cache store, and accounting
        of every attempt.
        """
        call = await self._start(role, spec, usage_role, params, messages, json_schema(schema), seed)
        hit = await self._cache_lookup(call)
        if hit is not None:
            try:
                return self._cache_hit(call, schema.model_validate(hit.get("parsed")), str(hit.get("raw", "")))
            except ValidationError:
                pass  # the schema changed since: fall through to a fresh call
        convo = list(messages)
        raw, error = "", "no answer"
        for attempt in range(1, self.settings.max_repairs + 2):
            result = await self._call_with_fallback(call, convo, schema)
            value, raw, error = parse_answer(result, schema)
            if value is not None:
                usage = self._account(call, repairs=attempt - 1)
                entry = {
                    "parsed": value.model_dump(mode="json"),
                    "raw": raw,
                    DETAILS: call.details(messages, usage),
                }
                await self._cache_store(call, entry)
                return CallResult(value=value, raw=raw, usage=usage)
            convo = repair_messages(messages, raw, error)
        self._account(call, repairs=self.settings.max_repairs)
        raise StructuredOutputError(role, str(call.spec), error, raw, self.settings.max_repairs + 1)

    async def text(
        self,
        *,
        role: str,
        spec: str | ModelSpec,
        messages: list[BaseMessage],
        usage_role: str | None = None,
        params: Mapping[str, object] | None = None,
        seed: int | None = None,
    ) -> CallResult[str]:
        """A free-text answer (for roles whose output is parsed by the caller, such as the IPR refiner), with the
        same cache, sample `seed`, transient-fault retries, accounting and limits as `structured`."""
        call = await self._start(role, spec, usage_role, params, messages, {"type": "text"}, seed)
        hit = await self._cache_lookup(call)
        if hit is not None and isinstance(hit.get("raw"), str):
            return self._cache_hit(call, hit["raw"], hit["raw"])
        model = await self._model(call)
        try:
            msg, retries = await self._invoke(model, messages, call.spec, role)
        except (ModelCallError, StructuredOutputError, SpendingCapReached):
            raise
        except Exception as exc:
            raise ModelCallError(role, str(call.spec), exc, 1) from exc
        call.retries += retries
        call.count_tokens(msg)
        raw = raw_text(msg)
        usage = self._account(call)
        await self._cache_store(call, {"raw": raw, DETAILS: call.details(messages, usage)})
        return CallResult(value=raw, raw=raw, usage=usage)

    # -- steps shared by structured and text ---------------------------------------------------------------
    async def _start(
        self,
        role: str,
        spec: str | ModelSpec,
        usage_role: str | None,
        params: Mapping[str, object] | None,
        messages: list[BaseMessage],
        output: dict[str, object],
        seed: int | None = None,
    ) -> GatewayCall:
        """The call's parsed spec and cache key (None without a cache)."""
        parsed = as_model_spec(spec)
        call = GatewayCall(
            role=role, usage_role=usage_role or role.split(".", 1)[0], spec=parsed, params=dict(params or {})
        )
        call.started = time.monotonic()
        profile = provider_profile(parsed.provider)
        if self.cache is not None or profile.fingerprint == "script":
            call.fingerprint = await self.fingerprint(parsed)
        if self.cache is not None:
            call.set_key(messages, output, per_role=profile.answers_per_role, seed=seed)
        return call

    async def _cache_lookup(self, call: GatewayCall) -> dict[str, Any] | None:
        if self.cache is None or call.key is None:
            return None
        return await asyncio.to_thread(self.cache.get, call.key)  # never raises: the cache warns and misses

    async def _cache_store(self, call: GatewayCall, value: dict[str, Any]) -> None:
        if self.cache is not None and call.key is not None:
            await asyncio.to_thread(self.cache.put, call.key, value)  # an unwritable cache never costs the answer

    def _cache_hit(self, call: GatewayCall, value: T, raw: str) -> CallResult[T]:
        usage = call.hit_usage()
        self.usage = merge_usage(self.usage, without_calls(usage))
        return CallResult(value=value, raw=raw, usage=usage, cache_hit=True)

    def _account(self, call: GatewayCall, repairs: int = 0) -> RunUsage:
        """Book the call's tokens, cost and retries (transport retries plus repairs) on the role and the run."""
        usage = call.spent_usage(repairs)
        self.usage = merge_usage(self.usage, without_calls(usage))
        return usage

    async def _model(self, call: GatewayCall) -> Any:
        # Building a model can read files (scripts, certificates, weights): keep it off the event loop.
        model: Any = await asyncio.to_thread(self.model_for, call.spec, call.role, call.fingerprint)
        return model.bind(**call.params) if call.params else model

    # -- the structured call with method fallback ---------------------------------------------------------
    async def _call_with_fallback(self, call: GatewayCall, convo: list[BaseMessage], schema: type[M]) -> dict[str, Any]:
        """One structured answer as LangChain's `include_raw` dict (raw, parsed, parsing_error).

        A backend that does not support the method gets the next one (remembered for the backend); a bad answer
        rejected by the client library (cut, not JSON, off-schema) comes back as an unparsed result to repair.
        """
        while True:
            method = self._method(call.spec)
            model = await self._model(call)
            call_msgs = with_schema_note(convo, schema) if method == "json_mode" else convo
            try:
                runnable = model.with_structured_output(wire_schema(schema, call.spec), method=method, include_raw=True)
                result, used = await self._invoke(runnable, call_msgs, call.spec, call.role)
            except Exception as exc:
                if is_method_unsupported(exc) and self._fall_back(call.spec, method, exc):
                    continue
                # OpenAI's json_schema parsing raises on a cut, non-JSON or off-schema answer before LangChain
                # sees it: that is a bad answer to repair, not a backend fault.
                bad_answer = answer_error(exc.__cause__ if isinstance(exc, ModelCallError) else exc)
                if bad_answer is None:
                    if isinstance(exc, (ImagesUnsupportedError, StructuredOutputError, SpendingCapReached)):
                        raise
                    asked = f"schema {schema.__name__} by {method}"
                    if isinstance(exc, ModelCallError):
                        cause = exc.__cause__ or exc
                        raise ModelCallError(call.role, str(call.spec), cause, exc.attempts, asked) from cause
                    raise ModelCallError(call.role, str(call.spec), exc, 1, asked) from exc
                result, used = bad_answer, (exc.attempts - 1 if isinstance(exc, ModelCallError) else 0)
            call.retries += used
            call.count_tokens(result.get("raw"))
            return result

    def _fall_back(self, spec: ModelSpec, method: str, exc: BaseException) -> bool:
        """Switch the backend to the next structured method; False when there is none (or the user chose one)."""
        if self.settings.structured_method or method == METHOD_ORDER[-1]:
            return False
        current = self._methods.get(spec.backend)
        if current is not None and METHOD_ORDER.index(current) > METHOD_ORDER.index(method):
            return True  # a concurrent call already moved this backend on (and said so): once per run
        nxt = METHOD_ORDER[METHOD_ORDER.index(method) + 1]
        log.warning(
            "%s does not support structured method %s (%s); using %s from now on",
            spec.backend,
            method,
            server_message(exc),  # one line: servers answer with multi-line dumps
            nxt,
        )
        self._methods[spec.backend] = nxt
        return True


_GATEWAY: Gateway | None = None


def get_gateway() -> Gateway:
    """The process-wide gateway, created from the environment on first use."""
    global _GATEWAY
    if _GATEWAY is None:
        _GATEWAY = Gateway()
    return _GATEWAY


def set_gateway(gateway: Gateway | None) -> None:
    """Replace the process-wide gateway (tests, CLI options)."""
    global _GATEWAY
    _GATEWAY = gateway
