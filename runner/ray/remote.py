"""Driver-side stand-ins the engine installs: generators, chat models and scoring that forward to the pools."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from agents.providers.local_base import LocalChatModel
from agents.spec import redact_spec
from runner.ray.members import RENDER_ACTOR, SCORER_ACTOR, VLM_ACTOR
from runner.ray.pool import ActorPool, actor_options, cluster_gpus
from runner.ray.settings import render_settings, scorer_settings, vlm_settings
from tools.image_store import ImageStore, get_image_store
from tools.scorers.score import ScoringSettings
from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.options import GeneratorOptions


class RayGenerator:
    """An `ImageGenerator` rendering on a render pool; images land in the driver's store with their own ids."""

    def __init__(self, spec: str, pool: ActorPool, store: ImageStore):
        self.name = spec
        self.pool = pool
        self.store = store

    @property
    def pipeline(self) -> list[dict[str, Any]]:
        """Waits until every member loaded its pipeline (a preflight: a missing model is one clear error)."""
        return self.pool.ready()

    async def generate(self, request: GenerationRequest) -> list[str]:
        """Render `request` on the least-loaded member and store the images here."""
        pngs: list[bytes] = await self.pool.call("render", request)
        stored = [await asyncio.to_thread(self.store.put_png, png, name=f"{self.name} render") for png in pngs]
        return [s.id for s in stored]


class RayGenerators:
    """The render pools of a run, one per spec and setting (installed into `tools.t2i.registry`)."""

    def __init__(self) -> None:
        self.pools: dict[tuple[Any, ...], ActorPool] = {}
        self.settings = render_settings()
        # Graph runs open their generator in worker threads, many at once: without the lock each thread that
        # found no pool made one, and members of several pools then held the GPUs that the others waited for.
        self.lock = threading.Lock()

    def _pool(self, spec: str, long_prompts: str, options: GeneratorOptions) -> ActorPool:
        key = (spec, long_prompts, tuple(sorted((k, repr(v)) for k, v in options.items())))
        with self.lock:
            if key not in self.pools:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = RENDER_ACTOR.options(**actor_options(self.settings, gpus))
                self.pools[key] = ActorPool(
                    lambda _k: actor.remote(spec, long_prompts, options),
                    size,
                    name=f"render pool {redact_spec(spec)!r}",
                    settings=self.settings,
                    gpus=gpus,
                )
            return self.pools[key]

    def open(self, spec: str, *, store: ImageStore, long_prompts: str, options: GeneratorOptions) -> ImageGenerator:
        """The generator of `spec` on its render pool; its images land in `store` (each member renders into a
        scratch store of its own)."""
        return RayGenerator(spec, self._pool(spec, long_prompts, options), store)

    def close(self) -> None:
        """End every render member."""
        for pool in self.pools.values():
            pool.kill()
        self.pools.clear()


class RemoteChatModel(LocalChatModel):
    """A chat model whose weights live in a Ray pool: the gateway binds tools and calls it like the local one."""

    spec: str
    pool: Any

    @property
    def _llm_type(self) -> str:
        return "unveil-ray-remote"

    def _respond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        raise NotImplementedError(f"{self.spec}: a model on the Ray engine answers asynchronous calls only")

    async def _arespond(self, messages: list[BaseMessage], options: dict[str, Any]) -> ChatResult:
        # The member's model reads the bound tools and token limits; nothing else of the call travels.
        sent = {k: options[k] for k in ("tools", "max_new_tokens", "max_tokens") if k in options}
        result: ChatResult = await self.pool.call("generate", list(messages), sent)
        return result


class RayChatModels:
    """The pools of in-process chat models (installed into `agents.providers.registry`), one per spec."""

    def __init__(self) -> None:
        self.pools: dict[str, ActorPool] = {}
        self.settings = vlm_settings()
        self.lock = threading.Lock()  # one pool per spec, however many threads ask at once

    def __call__(self, spec: Any, role: str) -> BaseChatModel:
        key = str(spec)  # in-process providers take no base URL, so the display form is the whole spec
        with self.lock:
            if key not in self.pools:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = VLM_ACTOR.options(**actor_options(self.settings, gpus))
                self.pools[key] = ActorPool(
                    lambda _k: actor.remote(key),
                    size,
                    name=f"vlm pool {redact_spec(key)!r}",
                    settings=self.settings,
                    gpus=gpus,
                )
            return RemoteChatModel(spec=key, pool=self.pools[key])

    def close(self) -> None:
        """End every member."""
        for pool in self.pools.values():
            pool.kill()
        self.pools.clear()


class RayScoring:
    """Scoring on the scorer pool (installed into `tools.scorers.score`)."""

    def __init__(self) -> None:
        self.settings = scorer_settings()
        self.pool: ActorPool | None = None
        self.lock = threading.Lock()  # one pool, however many threads ask at once

    def _get_pool(self) -> ActorPool:
        with self.lock:
            if self.pool is None:
                size, gpus = self.settings.plan(cluster_gpus())
                actor = SCORER_ACTOR.options(**actor_options(self.settings, gpus))
                self.pool = ActorPool(
                    lambda _k: actor.remote(), size, name="scorer pool", settings=self.settings, gpus=gpus
                )
            return self.pool

    async def score(
        self, image_ids: list[str], prompt: str, names: list[str], settings: ScoringSettings, store: ImageStore | None
    ) -> list[dict[str, Any]]:
        """The rows of `score_images`, computed by the least-loaded scorer member."""
        source = store or get_image_store()
        images = [await asyncio.to_thread(source.read_bytes, i) for i in image_ids]
        rows: list[dict[str, Any]] = await self._get_pool().call("score", images, prompt, names, settings)
        return rows

    def close(self) -> None:
        """End every scorer member."""
        if self.pool is not None:
            self.pool.kill()
            self.pool = None
