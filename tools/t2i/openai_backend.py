"""Closed text-to-image models through the OpenAI Images API (`dall-e-3`, `gpt-image-1`).

The API has no seed and no negative prompt: images are not reproducible, and a request with a negative prompt
is refused rather than silently changed. Sizes are limited to the model's list; the request's width/height pick
the allowed size of closest aspect ratio (documented in docs/tools.md). `dall-e-3` renders one image per call,
so `num_images` becomes that many concurrent calls; `gpt-image-1` renders at most 10 a call, as the API allows.

Each call keeps to the limits of every model server's answer (`tools.http_limits`): one deadline for the whole call
(`UNVEIL_IMAGE_REQUEST_TIMEOUT`, the SDK's own retries included) and a cap on the answer's body sized for the most
images the call may carry (`MAX_IMAGE_ANSWER_BYTES`), so a server that trickles or floods fails the prompt with a
`T2IError` naming the server and the limit, and the batch goes on.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from tools.http_limits import IMAGE_TIMEOUT_ENV, image_request_timeout, limited_client, within_deadline
from tools.image_store import ImageStore, get_image_store
from tools.t2i.base import GenerationRequest
from tools.t2i.errors import PromptError, T2IError, UnsupportedOptionError

MODEL_SIZES: dict[str, tuple[str, ...]] = {
    "dall-e-3": ("1024x1024", "1792x1024", "1024x1792"),
    "gpt-image-1": ("1024x1024", "1536x1024", "1024x1536"),
}
# dall-e-3 caps prompts at 4,000 characters, gpt-image-1 at 32,000.
MAX_PROMPT_CHARS = {"dall-e-3": 4000, "gpt-image-1": 32000}
# The most images one call may ask for (the API's `n`: dall-e-3 takes only 1, gpt-image-1 1 to 10).
MAX_IMAGES_PER_CALL = {"dall-e-3": 1, "gpt-image-1": 10}


def _largest_answer(model: str) -> int:
    """The largest body an honest answer of `model` can have: each image it may send in one answer at its largest
    size, as a PNG that does not compress at all (4 bytes a pixel, RGBA as gpt-image-1's transparent backgrounds
    are; PNG's own framing adds well under 1%), base64-encoded (4/3), with 1 MiB an image to spare for that framing
    and the JSON around it."""
    pixels = max(int(w) * int(h) for w, h in (size.split("x") for size in MODEL_SIZES[model]))
    return MAX_IMAGES_PER_CALL[model] * (pixels * 4 * 4 // 3 + 1024 * 1024)


# The cap on one answer's body, per model: about 10.8 MB for dall-e-3 (one 1792x1024 image), 94 MB for
# gpt-image-1 (ten 1536x1024 ones). A chat answer's 32 MiB would refuse an honest ten-image answer; these still
# stop a server that floods long before it hurts the machine (a 1 GiB answer was once read whole).
MAX_IMAGE_ANSWER_BYTES = {model: _largest_answer(model) for model in MODEL_SIZES}


def closest_size(model: str, width: int, height: int) -> str:
    """The allowed size string whose aspect ratio is closest to width/height (ties go to the square)."""
    ratio = width / height

    def distance(size: str) -> float:
        w, h = (int(x) for x in size.split("x"))
        return abs(w / h - ratio)

    return min(MODEL_SIZES[model], key=distance)


class OpenAIImageGenerator:
    """An `ImageGenerator` calling `client.images.generate` (an `openai.AsyncOpenAI` unless one is given)."""

    def __init__(
        self,
        model: str,
        *,
        client: Any = None,
        quality: str | None = None,
        size: str | None = None,
        store: ImageStore | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
    ):
        if model not in MODEL_SIZES:
            raise UnsupportedOptionError(
                f"OpenAI image model {model!r} is not supported; use one of {sorted(MODEL_SIZES)}"
            )
        if size is not None and size not in MODEL_SIZES[model]:
            raise UnsupportedOptionError(f"size {size!r} is not offered by {model}; use one of {MODEL_SIZES[model]}")
        self.name = f"openai:{model}"
        self.model = model
        self.quality = quality
        self.size = size
        self.store = store
        self._client = client
        self._client_kwargs: dict[str, Any] = {k: v for k, v in {"api_key": api_key, "base_url": base_url}.items() if v}

    @property
    def client(self) -> Any:
        """The API client, created on first use (reads OPENAI_API_KEY; its HTTP client keeps to the answer deadline
        and this model's cap). Typed as the `client` option is: any object with `images.generate` (an
        `openai.AsyncOpenAI`, or a caller's own)."""
        if self._client is None:
            from openai import AsyncOpenAI

            seconds = image_request_timeout()
            cap = MAX_IMAGE_ANSWER_BYTES[self.model]
            # An httpx client: the SDK takes one, though its signature names httpx2's only.
            http_client: Any = limited_client(seconds, cap, IMAGE_TIMEOUT_ENV)
            self._client = AsyncOpenAI(**self._client_kwargs, timeout=seconds, http_client=http_client)
        return self._client

    def build_params(self, request: GenerationRequest) -> dict[str, Any]:
        """The keyword arguments of one `images.generate` call for `request` (one image per call for dall-e-3)."""
        if not isinstance(request.prompt, str) or not request.prompt.strip():
            raise PromptError(f"prompt {request.prompt!r} is empty; text-to-image needs a non-empty prompt")
        if len(request.prompt) > MAX_PROMPT_CHARS[self.model]:
            raise PromptError(
                f"prompt {request.prompt[:60]!r}... is {len(request.prompt)} characters, over {self.model}'s "
                f"limit of {MAX_PROMPT_CHARS[self.model]}"
            )
        if request.negative_prompt:
            raise UnsupportedOptionError(
                f"{self.name} does not support a negative prompt (got {request.negative_prompt!r})"
            )
        if request.num_images < 1:
            raise UnsupportedOptionError(f"num_images must be at least 1, got {request.num_images}")
        if self.model != "dall-e-3" and request.num_images > MAX_IMAGES_PER_CALL[self.model]:
            # The API refuses more, and the answer's cap is sized for no more.
            raise UnsupportedOptionError(
                f"num_images {request.num_images} is over {self.model}'s {MAX_IMAGES_PER_CALL[self.model]} a call"
            )
        params: dict[str, Any] = {
            "model": self.model,
            "prompt": request.prompt,
            "size": self.size or closest_size(self.model, request.width, request.height),
            "n": 1 if self.model == "dall-e-3" else request.num_images,
        }
        if self.model == "dall-e-3":
            # gpt-image-1 always answers base64 and rejects response_format.
            params["response_format"] = "b64_json"
        if self.quality:
            params["quality"] = self.quality
        return params

    async def generate(self, request: GenerationRequest) -> list[str]:
        """Call the API and store the returned images; seeds are ignored (the API has none)."""
        params = self.build_params(request)
        calls = request.num_images if self.model == "dall-e-3" else 1
        try:
            client, seconds = self.client, image_request_timeout()
            # The SDK resolves the endpoint (OPENAI_BASE_URL included); the error names the one it reached.
            where = str(getattr(client, "base_url", None) or "the OpenAI Images API")
            responses = await asyncio.gather(
                *(
                    within_deadline(client.images.generate(**params), seconds, where, IMAGE_TIMEOUT_ENV)
                    for _ in range(calls)
                )
            )
        except Exception as exc:
            raise T2IError(f"{self.name}: image request for prompt {request.prompt[:60]!r} failed: {exc}") from exc
        store = self.store or get_image_store()
        ids: list[str] = []
        for response in responses:
            for item in response.data:
                if not getattr(item, "b64_json", None):
                    raise T2IError(f"{self.name}: response carried no base64 image data")
                data = base64.b64decode(item.b64_json)
                ids.append(store.put_bytes(data, name=f"{self.name} response").id)
        return ids
