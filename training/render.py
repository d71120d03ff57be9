"""Reward-side rendering: refined prompts to images through the project's text-to-image generators.

`GeneratorRenderer` takes any `ImageGenerator` from `tools.t2i.registry.get_generator`. For a diffusers
generator it feeds jobs straight to the generator's dynamic batcher and keeps the PIL images in memory (the
reward needs pixels, not stored files; only the few renders that join the image pool are stored). Any other
generator goes through `generate` and the image store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from tools.env import SettingError
from tools.image_store import ImageStore
from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.registry import open_generator
from tools.t2i.settings import RenderSettings

if TYPE_CHECKING:
    from tools.t2i.diffusers_backend import DiffusersGenerator

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderJob:
    """One image to render: what a diffusers generator's batch runner reads from a job payload."""

    prompt: str
    negative_prompt: str | None
    seed: int


def renders_in_memory(generator: ImageGenerator) -> TypeGuard[DiffusersGenerator]:
    """Whether `generator` has the diffusers backend's batch API (jobs to its batcher, PIL images back)."""
    return all(hasattr(generator, a) for a in ("render_batch", "validate", "call_kwargs", "pipeline", "device"))


class GeneratorRenderer:
    """Renders (prompt, seed) pairs with a generator; all pairs of a call are submitted at once so they batch."""

    def __init__(
        self, generator: ImageGenerator, *, store: ImageStore | None = None, render: RenderSettings | None = None
    ):
        self.generator = generator
        self.store = store
        self.render_settings = render or RenderSettings()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _request(self, prompt: str, seed: int) -> GenerationRequest:
        return self.render_settings.request(prompt, seed=seed)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        # One private loop for the whole run: the reward is called from synchronous trainer code.
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def render(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Any]:
        """One PIL image per (prompt, seed), in order."""
        if not prompts:
            return []
        gen = self.generator
        if renders_in_memory(gen):
            return self._run(self._render_in_memory(gen, prompts, seeds))
        return self._run(self._render_via_store(prompts, seeds))

    async def _render_in_memory(
        self, gen: DiffusersGenerator, prompts: Sequence[str], seeds: Sequence[int]
    ) -> list[Any]:
        from tools.t2i.batching import get_batcher

        payloads, key = [], None
        for prompt, seed in zip(prompts, seeds, strict=False):
            request = self._request(prompt, seed)
            negative = gen.validate(request)
            kwargs = gen.call_kwargs(request)
            key = (id(gen.pipeline), tuple(sorted(kwargs.items())))
            payloads.append(RenderJob(prompt, negative, seed))
        from tools.t2i.diffusers_backend import finished_images

        results = await get_batcher(gen.device).run(
            key, payloads, gen.render_batch, max_batch=gen.max_batch, max_wait_s=gen.max_wait_s
        )
        # With the overlapped decode (`accel` switch `overlap`), a result may still be decoding.
        return await finished_images(results)

    async def _render_via_store(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Any]:
        from tools.image_store import get_image_store

        store = self.store or get_image_store()
        requests = [self._request(p, s) for p, s in zip(prompts, seeds, strict=False)]
        ids = await asyncio.gather(*(self.generator.generate(r) for r in requests))
        return [store.open(i[0]).convert("RGB") for i in ids]


def make_renderer(
    spec: str,
    *,
    store: ImageStore | None,
    device: str | None,
    render: RenderSettings,
    max_batch: int = 32,
    scheduler: str = "default",
    accel: str = "auto",
) -> GeneratorRenderer:
    """A renderer over `open_generator(spec)` with the render settings the IPR graph uses; long refined prompts
    follow `render.long_prompts`, the same policy as the graph (default: cut at the text encoder's limit, as
    Stable Diffusion itself does).

    `accel` is the generator's UNet path (`tools.t2i.fast`): `auto` compiles it on CUDA (the reward renders
    the same batch shape every step, so the one-off compilation pays back in the first steps), `eager` keeps
    plain PyTorch, `fp8` quantises it on Hopper (changes the reward's images; see docs/tools.md)."""
    options: dict[str, Any] = {}
    if spec.split(":", 1)[0] != "openai":
        options["max_batch"] = max_batch
        if accel != "auto":
            options["accel"] = accel
        if device:
            options["device"] = device
    generator: Any = open_generator(spec, store=store, long_prompts=render.long_prompts, **options)
    if scheduler == "dpm":
        # DPM-Solver++ reaches SD's 50-step PNDM quality in about 20 steps. The renderer gets a pipeline object of
        # its own (sharing the weights, not copying them) with the new scheduler; the process-wide pipeline that
        # other users of the same spec hold keeps its scheduler.
        import copy

        from diffusers import DPMSolverMultistepScheduler

        shared = generator.pipeline
        own = copy.copy(shared)
        # diffusers leaves `from_config` unannotated.
        own.scheduler = DPMSolverMultistepScheduler.from_config(shared.scheduler.config)  # type: ignore[no-untyped-call, unused-ignore]
        from tools.t2i import diffusers_backend as backend

        # The copy shares the tokenizers, so it must share their lock too (keyed by pipeline id in the backend).
        backend._TOKENIZER_LOCKS.setdefault(id(own), backend.tokenizer_lock(shared))
        generator = copy.copy(generator)
        generator._pipe = own  # the generator's loaded pipeline (tools/t2i/diffusers_backend.py)
    elif scheduler != "default":
        raise SettingError(f"t2i_scheduler {scheduler!r}: expected default or dpm")
    else:
        warm_up_first(generator)
    return GeneratorRenderer(generator, store=store, render=render)


def warm_up_first(generator: object) -> None:
    """Load a compiled diffusers generator's pipeline and compile its shapes (`DiffusersGenerator.warm_up`) now, in
    the caller's thread, before the policy is built: no first step pays a compilation. Only a compiled generator
    (the CUDA default) has anything to warm up.

    Not on a thread beside the policy's loading, as it once was: three things that load or run the policy there broke
    it on the GPU machines. Model loading patches `torch.nn` process-wide (a policy built meanwhile got meta
    parameters), transformers changes torch's default dtype while it builds (Dynamo's guards then fail: "GLOBAL_STATE
    changed: default_dtype", and the warm-up compiled again at the first render), and the compiled decoding's
    CUDA-graph capture fails when another thread launches GPU work ("operation failed due to a previous error during
    capture"). The machine's compile cache makes this a load of about 30 s after the first process."""
    fast_path = getattr(generator, "fast_path", None)
    if fast_path is not None and fast_path.compile and hasattr(generator, "warm_up"):
        getattr(generator, "pipeline")  # noqa: B009 - the property loads, then warms up (once)
