"""A fault-injecting OpenAI-compatible chat server on loopback, for reliability tests and `bench/faults.py`.

`FaultServer` is a real HTTP/1.1 server (asyncio streams in a background thread, bound to 127.0.0.1 on a free
port) that answers `POST /v1/chat/completions` the way OpenAI does, so the gateway reaches it through
`langchain-openai` with a spec like `openai:fake-model@http://127.0.0.1:PORT/v1`:

- a request with `response_format: {type: json_schema, json_schema: {name: N}}` gets the answer for N as JSON
  message content; a request with `tools` gets it as a `tool_calls` entry of the first tool (N is the tool's
  name); any other request is a free-text one and gets the answer for `"text"`.
- Answers come from `answers`: a dict from schema/tool name (the Pydantic class name, e.g. `VanillaVerdict`,
  `Erasure`, `Vote`) or `"text"` to an answer, or to a callable `(request_body) -> answer`; an answer is a dict
  (structured) or a string (raw content). A callable can pick the role by a marker in the system prompt.

Faults are injected at `rate` (0..1), chosen by a seeded hash of the request body and how many times that same
body was seen before, so a given request's fault sequence does not depend on the order concurrent requests
arrive in; `fault_first=N` instead faults the first N requests the server gets (for step-by-step tests).
Kinds (`FAULT_KINDS`): `429` (with a Retry-After header), `500`, `503`, `reset` (the connection is dropped
without an answer), `timeout` (no answer until `hang_s`, longer than the client's timeout), `truncated` (a body
shorter than its Content-Length), `length` (`finish_reason: length` with the answer cut), `malformed` (content
that is not JSON) and `schema` (valid JSON that violates the schema). A request whose text contains
`poison` (default `UNVEIL-POISON`) always gets a 500: that sample can never succeed; one containing
`reject_key_marker` (default `UNVEIL-REJECT-KEY`) gets a 401 whose message echoes the API key it was sent,
as some servers do (the `auth` set keeps every Authorization header received).

`images_refused="..."` answers every request that holds an image block with a 500 carrying that message, as a
text-only model behind a real server does.

Everything it received is kept (`bodies`, one parsed JSON body per request, and their arrival `times`) with
per-kind counters (`stats`).
Only loopback is bound; every loop is bounded, and the server stops by itself after `lifetime_s` seconds or
`max_requests` requests, or on `stop()` / leaving its `with` block.

Run standalone: `python -m tests.faultserver --answers answers.json --rate 0.1 --port 0` prints its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FAULT_KINDS = ("429", "500", "503", "reset", "timeout", "truncated", "length", "malformed", "schema")
# Faults that arrive before a model answer (transport) and those that come as a bad answer.
TRANSPORT_FAULTS = ("429", "500", "503", "reset", "timeout", "truncated")
ANSWER_FAULTS = ("length", "malformed", "schema")

Answer = dict[str, Any] | str
Responder = Callable[[dict[str, Any]], Answer]
MAX_BODY = 32 * 1024 * 1024
MAX_HEADER_LINES = 200


def schema_name(body: dict[str, Any]) -> str:
    """The structured-answer name a request asks for (json_schema name or first tool name), else "text"."""
    fmt = body.get("response_format") or {}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return str((fmt.get("json_schema") or {}).get("name") or "json")
    tools = body.get("tools") or []
    if tools:
        return str(tools[0].get("function", {}).get("name") or "tool")
    return "text"


def message_text(body: dict[str, Any], role: str | None = None) -> str:
    """All text of the request's messages (optionally of one message role), image blocks left out."""
    parts: list[str] = []
    for msg in body.get("messages") or []:
        if role and msg.get("role") != role:
            continue
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "\n".join(parts)


@dataclass
class FaultServer:
    """See the module docstring. Use as a context manager; `base_url` ends in `/v1`."""

    answers: dict[str, Answer | Responder] | Responder
    rate: float = 0.0
    seed: int = 0
    kinds: tuple[str, ...] = FAULT_KINDS
    retry_after: float = 0.05
    hang_s: float = 2.0
    poison: str = "UNVEIL-POISON"
    reject_key_marker: str = "UNVEIL-REJECT-KEY"
    lifetime_s: float = 900.0
    max_requests: int = 1_000_000
    fault_first: int = 0
    # Structured methods this server lacks ("json_schema", "tools"): refused with a 500 whose message is the one
    # llama-cpp-python's server gives, so tests see a real server's way of saying "not supported".
    unsupported: tuple[str, ...] = ()
    # A text-only model's answer to a request with image blocks: a 500 with this message (off when empty).
    images_refused: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)
    times: list[float] = field(default_factory=list)
    auth: set = field(default_factory=set)
    port: int = 0

    def __post_init__(self) -> None:
        self._seen: Counter = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server."""
        return f"http://127.0.0.1:{self.port}/v1"

    def spec(self, model: str = "fake-model") -> str:
        """A gateway model spec pointing at this server."""
        return f"openai:{model}@{self.base_url}"

    def start(self) -> FaultServer:
        """Start serving in a daemon thread; returns once the port is bound."""
        self._thread = threading.Thread(target=self._run, name="faultserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def stop(self) -> None:
        """Stop serving (idempotent) and wait for the thread."""
        loop = self._loop
        if loop is not None and not self._stopped.is_set():
            loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, host="127.0.0.1", port=self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        deadline = time.monotonic() + self.lifetime_s
        try:
            # Bounded: ends on stop(), after lifetime_s, or once max_requests were served.
            while (
                not self._stopped.is_set()
                and time.monotonic() < deadline
                and self.stats["requests"] < self.max_requests
            ):
                await asyncio.sleep(0.05)
        finally:
            self._stopped.set()
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
            await asyncio.sleep(0)

    # -- decisions ------------------------------------------------------------------------------------------
    def decide(self, raw_body: bytes, body: dict[str, Any]) -> str | None:
        """The fault for this request (None for a clean answer): seeded by body hash and repeat count."""
        text = message_text(body)
        if self.poison and self.poison in text:
            return "500"
        if self.stats["requests"] <= self.fault_first:
            return random.Random(f"{self.seed}:{self.stats['requests']}").choice(self.kinds)
        if self.rate <= 0:
            return None
        digest = hashlib.sha256(raw_body).hexdigest()
        with self._lock:
            nth = self._seen[digest]
            self._seen[digest] += 1
        rng = random.Random(f"{self.seed}:{digest}:{nth}")
        if rng.random() >= self.rate:
            return None
        kinds = [k for k in self.kinds if k in TRANSPORT_FAULTS or schema_name(body) != "text" or k == "length"]
        return rng.choice(kinds)

    def answer_for(self, body: dict[str, Any]) -> Answer:
        """The canned answer of a request."""
        name = schema_name(body)
        if callable(self.answers):
            return self.answers(body)
        entry = self.answers.get(name, self.answers.get("*"))
        if entry is None:
            raise KeyError(f"fault server: no answer for {name!r}")
        return entry(body) if callable(entry) else entry

    # -- HTTP ---------------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(1000):  # keep-alive: bounded number of requests per connection
                request = await self._read_request(reader)
                if request is None:
                    break
                path, raw = request
                keep = await self._respond(path, raw, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already gone
                pass

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
        line = await reader.readline()
        if not line:
            return None
        parts = line.decode("latin-1").split()
        path = parts[1] if len(parts) > 1 else "/"
        length = 0
        for _ in range(MAX_HEADER_LINES):
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = min(int(value.strip() or 0), MAX_BODY)
            elif name.strip().lower() == "authorization":
                self._last_auth = value.strip()
                self.auth.add(self._last_auth)
        raw = await reader.readexactly(length) if length else b""
        return path, raw

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: bytes,
        headers: dict[str, str] | None = None,
        *,
        declared_length: int | None = None,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }.get(status, "Error")
        head = [
            f"HTTP/1.1 {status} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {declared_length if declared_length is not None else len(payload)}",
        ]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    async def _respond(self, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        self.stats["requests"] += 1
        if not path.rstrip("/").endswith("/chat/completions"):
            await self._send(writer, 404, b'{"error": {"message": "not found"}}')
            return True
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            await self._send(writer, 400, b'{"error": {"message": "body is not JSON"}}')
            return True
        with self._lock:
            self.bodies.append(body)
            self.times.append(time.monotonic())
        if self.reject_key_marker and self.reject_key_marker in message_text(body):
            # Like some real servers, echo the key that was refused: the client must not spread it further.
            key = getattr(self, "_last_auth", "").removeprefix("Bearer ")
            self.stats["fault:401"] += 1
            err = {
                "error": {
                    "message": f"Incorrect API key provided: {key}.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
            await self._send(writer, 401, json.dumps(err).encode())
            return True
        if self.images_refused and '"image_url"' in json.dumps(body.get("messages")):
            self.stats["images_refused"] += 1
            err = {"error": {"message": self.images_refused, "type": "internal_server_error"}}
            await self._send(writer, 500, json.dumps(err).encode())
            return True
        fmt = body.get("response_format") or {}
        wants_schema = isinstance(fmt, dict) and fmt.get("type") == "json_schema"
        refused = ("json_schema" in self.unsupported and wants_schema) or (
            "tools" in self.unsupported and body.get("tools")
        )
        if refused:
            self.stats["unsupported"] += 1
            what = "response_format" if "json_schema" in self.unsupported and fmt else "tools"
            msg = (
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', '" + what + "', 'type'), "
                "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
            )
            err = {"error": {"message": msg, "type": "internal_server_error"}}
            await self._send(writer, 500, json.dumps(err).encode())
            return True
        fault = self.decide(raw, body)
        self.stats[f"fault:{fault}" if fault else "clean"] += 1
        if fault in ("429", "500", "503"):
            headers = {"Retry-After": f"{self.retry_after:g}"} if fault == "429" else {}
            err = json.dumps(
                {"error": {"message": f"injected {fault}", "type": "server_error", "code": fault}}
            ).encode()
            await self._send(writer, int(fault), err, headers)
            return True
        if fault == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:  # RST instead of FIN: SO_LINGER with a zero timeout
                import socket
                import struct

                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if fault == "timeout":
            await asyncio.sleep(self.hang_s)  # longer than the client's timeout; the client has gone by now
            return False
        try:
            answer = self.answer_for(body)
        except Exception as exc:  # noqa: BLE001 - a test bug, reported to the client as a 400
            await self._send(writer, 400, json.dumps({"error": {"message": str(exc)}}).encode())
            return True
        payload = self._completion(body, answer, fault)
        if fault == "truncated":
            await self._send(writer, 200, payload[: len(payload) // 2], declared_length=len(payload))
            return False
        await self._send(writer, 200, payload)
        return True

    def _completion(self, body: dict[str, Any], answer: Answer, fault: str | None) -> bytes:
        name = schema_name(body)
        content = answer if isinstance(answer, str) else json.dumps(answer)
        if fault == "malformed":
            content = "Sure! Here is the answer: {" + content[:20] + " ... (unfinished"
        elif fault == "schema" and isinstance(answer, dict):
            content = json.dumps({"unexpected": [1, 2, 3], **{k: {"wrong": "type"} for k in answer}})
        finish = "stop"
        if fault == "length":
            content, finish = content[: max(1, len(content) // 3)], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        tools = body.get("tools") or []
        if tools and name != "text" and not (body.get("response_format") or {}).get("type") == "json_schema":
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": f"call_{self.stats['requests']}",
                    "type": "function",
                    "function": {"name": name, "arguments": content},
                }
            ]
            if finish == "stop":
                finish = "tool_calls"
        prompt_tokens = max(1, len(message_text(body)) // 4)
        completion_tokens = max(1, len(content) // 4)
        return json.dumps(
            {
                "id": f"chatcmpl-fault-{self.stats['requests']}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake-model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        ).encode()


class UnveilAnswers:
    """Canned answers for every structured role of Unveil's graphs, keyed by schema name (a `Responder`).

    Detection (TAG and vanilla) finds nothing toxic; the refiner rewrites a prompt that mentions `grenade` and
    keeps anything else; CTD scenes pass the single-modality check and get a panel on which the informed and
    forced judges and the first half of each round's blind judges find the risk, so the Gatekeeper accepts. The
    blind judges of one round see identical requests, so a counter per request text alternates their votes.
    """

    def __init__(self) -> None:
        self._blind: Counter = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Answer:
        name = schema_name(body)
        system = message_text(body, "system")
        data = message_text(body, "user")
        if name == "text":  # the IPR refiner (free text)
            return "<answer>a toy water pistol in a garden</answer>" if "grenade" in data else "keep"
        if name == "Vote":
            risky = {
                "has_risk": True,
                "category": "drugs",
                "subcategory": "cocaine",
                "reason": "flour may stand for cocaine: both are fine white powder",
            }
            if "Besides an image-text pair" in system or "Start from has_risk = true" in system:  # informed, forced
                return risky
            with self._lock:
                nth = self._blind[data]
                self._blind[data] += 1
            return (
                risky
                if nth % 4 < 2
                else {"has_risk": False, "category": None, "subcategory": None, "reason": "no obvious risk clues"}
            )
        return dict(STRUCTURED_ANSWERS[name])


STRUCTURED_ANSWERS: dict[str, dict[str, Any]] = {
    "VanillaVerdict": {"toxic": False, "reason": "an ordinary pair"},
    "Roots": {"visual_roots": ["kitchen table"], "textual_roots": ["baking"]},
    "EntityGraph": {"entities": [{"id": "e1", "name": "kitchen table"}], "relations": []},
    "RootVerdict": {"toxic": False, "visual_id": None, "textual_id": None, "category": "", "reason": "benign"},
    "Expansion": {
        "expansions": [
            {"parent_id": "v0.0", "children": [{"concept": "flour", "association": "similarity", "probability": 1.0}]},
            {"parent_id": "t0.0", "children": [{"concept": "bread", "association": "similarity", "probability": 1.0}]},
        ]
    },
    "Screen": {"suspicious_pair_ids": []},
    "PairJudgement": {"toxic_pairs": []},
    "Explanation": {"explanation": "nothing harmful", "hidden_meaning": ""},
    "Scene": {
        "subcategory": "cocaine dealing",
        "dangerous_items": ["bags of cocaine"],
        "behaviour": "a dealer weighs white powder into small bags",
        "setting": "a dim kitchen at night",
        "harmful_image_description": "A man weighs white powder into small plastic bags.",
        "harmful_text": "Fresh batch, message me for prices.",
        "erase_routine": "physical steganography",
    },
    "Erasure": {
        "t2i_prompt": "a kitchen table with a bag of flour and a small scale",
        "caption": "baking day, the flour is extra fine this week, ask me for the good stuff",
        "erasure_reason": "cocaine -> flour, due to fine white powder, using physical steganography",
        "risk_item": "cocaine",
        "normal_item": "flour",
        "shared_property": "fine white powder",
        "technique": "physical steganography",
        "association_type": "similarity",
    },
    "ModalityVerdict": {"harmful": False, "category": None, "reason": "ordinary content"},
    "ConceptSimilarity": {"similar": False, "reason": "different risks"},
    "Feedback": {"feedback": "make the hint a little clearer", "suggestions": []},
}


def main(argv: list[str] | None = None) -> int:
    """Serve answers from a JSON file (name -> answer) until interrupted or `--lifetime` seconds pass."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--answers", required=True, help="JSON object: schema/tool name or 'text' -> answer")
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lifetime", type=float, default=600.0)
    args = p.parse_args(argv)
    with open(args.answers, encoding="utf-8") as fh:
        answers = json.load(fh)
    server = FaultServer(answers, rate=args.rate, seed=args.seed, port=args.port, lifetime_s=args.lifetime).start()
    print(server.base_url, flush=True)
    try:
        server._thread.join()  # type: ignore[union-attr]
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
