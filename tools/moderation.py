"""The OpenAI Moderation API as an optional scorer of one text or one stored image.

The TAG paper shows that each modality of its Covert Toxic Dataset is benign alone by the average OpenAI
Moderation score of the images (0.0029) and of the texts (0.000118), §4.2. `ModerationScorer` scores one item
through `POST /moderations` of any OpenAI-compatible endpoint (`omni-moderation-latest` takes text and images;
images are sent as data URLs built here, from the image store). An item's score is its highest category score,
in [0, 1]; `flagged` is the API's own verdict.

Spec: `openai:MODEL[@BASE_URL]` (the prefix is optional), e.g. `openai:omni-moderation-latest` or
`openai:omni-moderation-latest@http://127.0.0.1:8000/v1`. The key comes from `OPENAI_API_KEY` for OpenAI itself,
from `UNVEIL_OPENAI_API_KEY` (or none) for an endpoint given by `@BASE_URL`. Off by default: the CTD graph uses it
only with `moderation=true`.

Each call keeps to the limits of every model server's answer (`tools.http_limits`): one deadline for the whole call
(`UNVEIL_REQUEST_TIMEOUT`, the SDK's own retries included) and the chat answers' body cap (`MAX_ANSWER_BYTES`: a
moderation answer is a few KB of scores), so a server that trickles or floods fails the item with one error naming
the server and the limit, and the batch goes on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tools.env import SettingError, env_str
from tools.errors import ConfigurationError
from tools.http_limits import limited_client, request_timeout, within_deadline
from tools.image_store import ImageStore

DEFAULT_MODERATION = "openai:omni-moderation-latest"


class ModerationKeyError(ConfigurationError, RuntimeError):
    """The OpenAI Moderation API was asked for without `OPENAI_API_KEY`: the user's to fix, and no sample of the run
    can be scored without it (a batch records it as a configuration failure, so the rerun with the key resumes)."""


@dataclass(frozen=True)
class ModerationScore:
    """One item's moderation result: the highest category score, the API's flag, and every category score."""

    score: float
    flagged: bool
    categories: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {"score": self.score, "flagged": self.flagged, "categories": dict(self.categories)}


def parse_moderation_spec(spec: str) -> tuple[str, str | None]:
    """(model, base_url) of `openai:MODEL[@BASE_URL]`."""
    text = (spec or "").strip()
    if text.startswith("openai:"):
        text = text[len("openai:") :]
    elif ":" in text.split("@", 1)[0]:
        raise SettingError(f"moderation model {spec!r}: only OpenAI-compatible endpoints ('openai:MODEL[@BASE_URL]')")
    model, _, base_url = text.partition("@")
    if not model.strip():
        raise SettingError(f"moderation model {spec!r}: no model name")
    return model.strip(), base_url.strip().rstrip("/") or None


class ModerationScorer:
    """Scores texts and stored images with the Moderation API (an `openai.AsyncOpenAI` unless a client is given),
    each call within `timeout` seconds (None: `UNVEIL_REQUEST_TIMEOUT`, read when the first call is made)."""

    def __init__(self, spec: str = DEFAULT_MODERATION, *, client: Any = None, timeout: float | None = None):
        self.model, self.base_url = parse_moderation_spec(spec)
        self._client = client
        self._timeout = timeout

    @property
    def deadline(self) -> float | None:
        """The deadline of one call in seconds, its whole answer included."""
        return request_timeout() if self._timeout is None else self._timeout

    @property
    def client(self) -> Any:
        """The API client, created on first use."""
        if self._client is None:
            from openai import AsyncOpenAI

            # As for every model call: OPENAI_API_KEY goes only to OpenAI itself; another endpoint gets
            # UNVEIL_OPENAI_API_KEY (or nothing), so the account key never leaks to a third-party server.
            if self.base_url:
                key: str | None = env_str("UNVEIL_OPENAI_API_KEY") or "not-needed"
            else:
                key = env_str("OPENAI_API_KEY")
            if key is None:
                raise ModerationKeyError(
                    "moderation: OPENAI_API_KEY is not set (needed for the OpenAI Moderation API; or give "
                    "--moderation openai:MODEL@BASE_URL for another endpoint)"
                )
            seconds = self.deadline
            http_client: Any = limited_client(seconds)  # an httpx client: the SDK takes one, typed for httpx2 only
            self._client = AsyncOpenAI(
                api_key=key, base_url=self.base_url, timeout=seconds, max_retries=2, http_client=http_client
            )
        return self._client

    async def _score(self, item: dict[str, Any]) -> ModerationScore:
        client = self.client
        # The SDK resolves the endpoint (OPENAI_BASE_URL included); the error names the one it reached.
        where = str(getattr(client, "base_url", None) or self.base_url or "the OpenAI Moderation API")
        call = client.moderations.create(model=self.model, input=[item])
        response = await within_deadline(call, self.deadline, where)
        result = response.results[0]
        raw = result.category_scores
        scores = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
        numbers = {k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}
        return ModerationScore(
            score=max(numbers.values(), default=0.0), flagged=bool(result.flagged), categories=numbers
        )

    async def score_text(self, text: str) -> ModerationScore:
        """The moderation score of one text."""
        return await self._score({"type": "text", "text": text})

    async def score_image(self, image_id: str, store: ImageStore) -> ModerationScore:
        """The moderation score of one stored image (sent as a data URL)."""
        url = await asyncio.to_thread(store.data_url, image_id)
        return await self._score({"type": "image_url", "image_url": {"url": url}})


_SCORERS: dict[str, ModerationScorer] = {}


def get_moderation(spec: str = DEFAULT_MODERATION) -> ModerationScorer:
    """The process-wide scorer of `spec` (one client per endpoint)."""
    if spec not in _SCORERS:
        _SCORERS[spec] = ModerationScorer(spec)
    return _SCORERS[spec]


def mean_scores(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's statistic over samples' moderation records ({"image": {score, flagged}, "text": {...}}): the
    average score and the flagged fraction of each modality, and how many samples were scored."""
    out: dict[str, Any] = {"n": 0}
    for modality in ("image", "text"):
        scored = [i[modality] for i in items if isinstance(i.get(modality), dict) and "score" in i[modality]]
        out["n"] = max(out["n"], len(scored))
        out[f"{modality}_mean"] = sum(float(s["score"]) for s in scored) / len(scored) if scored else None
        out[f"{modality}_flagged"] = sum(1 for s in scored if s.get("flagged")) / len(scored) if scored else None
    return out
