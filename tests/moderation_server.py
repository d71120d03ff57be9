"""A loopback fake of the OpenAI Moderation API (`POST /v1/moderations`) and Images API
(`POST /v1/images/generations`, answering one small PNG as `b64_json`), for the moderation scorer's and the
GPT-Image-1 backend's tests.

A real HTTP server (the standard library's, in a background thread, bound to 127.0.0.1 on a free port) that the
`openai` client reaches with `base_url=http://127.0.0.1:PORT/v1`. A text input containing `flag_word` (default
"ATTACK") scores 0.9 for violence and is flagged; anything else scores `low` (0.001) in every category; an image
input scores `image_score`. Every request body is kept in `bodies`, with the Authorization headers in `auth`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CATEGORIES = ("harassment", "hate", "illicit", "self-harm", "sexual", "violence")


class ModerationServer:
    """`with ModerationServer() as server:` serves until the block ends; `server.spec()` is the scorer's spec."""

    def __init__(self, *, flag_word: str = "ATTACK", low: float = 0.001, image_score: float = 0.002):
        self.flag_word, self.low, self.image_score = flag_word, low, image_score
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                owner.bodies.append(body)
                owner.auth.append(self.headers.get("Authorization", ""))
                path = self.path.rstrip("/")
                if path == "/v1/images/generations":
                    images = [{"b64_json": owner.png_b64()}] * int(body.get("n") or 1)
                    data = json.dumps({"created": 0, "data": images}).encode()
                elif path == "/v1/moderations":
                    results = [owner.result(item) for item in body.get("input") or []]
                    data = json.dumps({"id": "modr-1", "model": body.get("model"), "results": results}).encode()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll: `shutdown()` waits for the serving loop to look (every 0.5 s by default).
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def result(self, item: dict[str, Any]) -> dict[str, Any]:
        """The moderation result of one input item."""
        scores = dict.fromkeys(CATEGORIES, self.low)
        if item.get("type") == "image_url":
            scores = dict.fromkeys(CATEGORIES, self.image_score)
        elif self.flag_word in str(item.get("text", "")):
            scores["violence"] = 0.9
        flagged = max(scores.values()) >= 0.5
        return {
            "flagged": flagged,
            "categories": {k: v >= 0.5 for k, v in scores.items()},
            "category_scores": scores,
            "category_applied_input_types": {k: [item.get("type", "text")] for k in scores},
        }

    @staticmethod
    def png_b64() -> str:
        """A small PNG, base64-encoded, as the Images API returns it."""
        import base64
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (16, 16), (200, 200, 190)).save(buf, format="PNG")
        return base64.b64encode(buf.getvalue()).decode("ascii")

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL of this server."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def spec(self, model: str = "omni-moderation-latest") -> str:
        """The scorer spec that reaches this server."""
        port = self._server.server_address[1]
        return f"openai:{model}@http://127.0.0.1:{port}/v1"

    def __enter__(self) -> ModerationServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
