"""Stable Diffusion generators through diffusers: plain SD 1.x/2.x/SDXL, SD-NP, SLD and ESD.

A `DiffusersGenerator` checks each request, queues its images on the device's batcher (`tools.t2i.batching`),
renders a batch in one pipeline call and stores the images; the pipelines it renders with are loaded and shared by
`tools.t2i.pipeline_loading`.

Determinism: image k of a request is drawn from its own CPU `torch.Generator` seeded `seed + k`, so an image
depends only on its prompt, settings and seed - never on which other requests shared its batch (up to the
floating-point noise of a different batch shape on GPU).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tools.image_store import ImageStore
from tools.t2i.base import GenerationRequest
from tools.t2i.batching import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_S, Job, get_batcher
from tools.t2i.errors import GenerationOOMError, PromptError, UnsupportedOptionError
from tools.t2i.fast import CompileGuard, FastPath, disable_compile, resolve_accel
from tools.t2i.pipeline_loading import Pipeline, clear_loaded_pipelines, default_device, load_pipeline
from tools.t2i.variants import SLD_CONFIGS
from tools.t2i.warmup import WARMUP_STEPS, WarmShape, compile_settings, warm_up

if TYPE_CHECKING:
    import torch

# A batch job's key: the pipeline object's id and the sorted call options; jobs of one key share a batch.
BatchKey = tuple[int, tuple[tuple[str, Any], ...]]

_LOCK = threading.RLock()
_TOKENIZER_LOCKS: dict[int, threading.Lock] = {}


def tokenizer_lock(pipeline: Any) -> threading.Lock:
    """The lock that serialises use of one pipeline's tokenizers. A fast (Rust) tokenizer keeps its padding and
    truncation settings as shared state, so the prompt check (no truncation, worker threads) racing the
    pipeline's own encoding (padded to 77 on the batcher thread) made a batch fail with mismatched tensor sizes."""
    with _LOCK:
        return _TOKENIZER_LOCKS.setdefault(id(pipeline), threading.Lock())


_CHECK_TOKENIZERS: dict[int, tuple[threading.Lock, list[Any]]] = {}


def check_tokenizers(pipeline: Any) -> tuple[threading.Lock, list[Any]]:
    """Copies of `pipeline`'s tokenizers for the prompt check, and the lock that serialises their use. The check
    must not share the pipeline's own tokenizers: their lock is held for a whole batch (the pipeline encodes
    inside its call), so requests arriving meanwhile were not validated, hence not queued, when the next batch
    was cut, and batches came out smaller and of new sizes (each new size compiles the UNet again)."""
    import copy

    with _LOCK:
        found = _CHECK_TOKENIZERS.get(id(pipeline))
    if found is not None:
        return found
    # Copied once, outside `_LOCK`: this may wait for a running batch, which must not hold up other generators.
    with tokenizer_lock(pipeline):
        toks = [
            copy.deepcopy(t)
            for t in (getattr(pipeline, "tokenizer", None), getattr(pipeline, "tokenizer_2", None))
            if t
        ]
    with _LOCK:
        return _CHECK_TOKENIZERS.setdefault(id(pipeline), (threading.Lock(), toks))


_GUARDS: dict[int, CompileGuard] = {}


def compile_guard(pipeline: Any, preset: FastPath) -> CompileGuard:
    """The compile bookkeeping of one pipeline's UNet (shared by every generator over that pipeline)."""
    with _LOCK:
        return _GUARDS.setdefault(id(pipeline.unet), CompileGuard(preset))


def clear_pipeline_cache() -> None:
    """Forget every loaded pipeline and what the generators keep per pipeline (tests; freeing GPU memory)."""
    clear_loaded_pipelines()
    with _LOCK:
        _GUARDS.clear()
        _CHECK_TOKENIZERS.clear()


@dataclass(frozen=True)
class _Deferred:
    """Image `index` of a batch whose decode runs on the decode thread (`submit_decode`)."""

    batch: concurrent.futures.Future[list[Any]]
    index: int

    async def wait(self) -> Any:
        """The decoded PIL image (the batch's decode error, if it failed)."""
        import asyncio

        return (await asyncio.wrap_future(self.batch))[self.index]


async def finished_images(results: list[Any]) -> list[Any]:
    """The PIL images of `render_batch` results, waiting for those still being decoded beside the next batch."""
    return [await r.wait() if isinstance(r, _Deferred) else r for r in results]


_DECODERS: dict[str, tuple[concurrent.futures.ThreadPoolExecutor, Any]] = {}


def submit_decode(pipe: Pipeline, latents: torch.Tensor, device: str) -> concurrent.futures.Future[list[Any]]:
    """Decode `latents` (a batch the UNet just finished on the current stream) to PIL images on the device's
    decode thread and side CUDA stream, so that the next batch's UNet steps start at once. The result equals the
    pipeline's own decode (`output_type="pil"`): same VAE call, same post-processing, only another stream."""
    import torch

    with _LOCK:
        if device not in _DECODERS:
            _DECODERS[device] = (
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"t2i-decode-{device}"),
                torch.cuda.Stream(device=device),  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            )
        pool, stream = _DECODERS[device]
    ready = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    ready.record()  # on the worker's stream, after the last UNet step and scheduler update
    latents.record_stream(stream)  # the allocator must not hand this memory out before the side stream is done

    def decode() -> list[Any]:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            stream.wait_event(ready)
            return decode_to_pil(pipe, latents)

    return pool.submit(decode)


def decode_to_pil(pipe: Pipeline, latents: torch.Tensor) -> list[Any]:
    """The PIL images of a batch of latents, equal to the pipeline's own `output_type="pil"` decode: the same VAE
    call, the same denormalisation, and the same float32 `x * 255`, round-half-even and uint8 cast, done on the
    latents' device so that a quarter of the bytes (uint8, not float32) crosses to the CPU and numpy does no
    per-pixel work. A compiled decoder that fails to compile falls back to eager with a warning."""
    import warnings

    import torch
    from PIL import Image

    from tools.t2i.fast import is_compile_error

    with torch.inference_mode():
        try:
            image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            disable_compile(pipe.vae.decoder)
            warnings.warn(
                f"torch.compile of the VAE decoder failed ({type(exc).__name__}); decoding eagerly",
                RuntimeWarning,
                stacklevel=2,
            )
            image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
        image = pipe.image_processor.denormalize(image)
        pixels = (image.float() * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(p) for p in pixels]


def warmup_key(pipe: Pipeline, preset: str) -> str:
    """What the compiled graphs of `pipe`'s UNet depend on, naming its warm-up locks (`tools.t2i.warmup`): the
    pipeline class, the UNet's architecture, dtype and device (`cuda:1` graphs are not `cuda:0` ones; a Ray member
    sees its GPU as `cuda:0`, as every process given one GPU does) and the preset. Not the folder it was loaded
    from (`_name_or_path`): two processes' copies of one architecture compile the same graphs."""
    config = {k: v for k, v in dict(pipe.unet.config).items() if not k.startswith("_")}
    parts = [type(pipe).__name__, config, str(pipe.unet.dtype), str(pipe.unet.device), preset]
    return json.dumps(parts, sort_keys=True, default=str)


@dataclass(frozen=True)
class _ImageJob:
    prompt: str
    negative_prompt: str | None
    seed: int


class DiffusersGenerator:
    """An `ImageGenerator` over one diffusers pipeline variant, with dynamic batching.

    `variant` is `plain`, `sd-np`, `sld-weak|medium|strong|max` or `esd`. Use `tools.t2i.registry.get_generator`
    rather than constructing this directly.
    """

    def __init__(
        self,
        name: str,
        model: str,
        *,
        variant: str = "plain",
        unet_file: str | None = None,
        negative_prompt: str | None = None,
        device: str | None = None,
        dtype: str = "auto",
        max_batch: int | None = None,
        max_wait_ms: float = DEFAULT_MAX_WAIT_S * 1000,
        store: ImageStore | None = None,
        truncate_long_prompts: bool = False,
        accel: str = "auto",
    ):
        self.device = device or default_device()
        # Checked here so a bad value fails at construction, not at the first render.
        self.fast_path = resolve_accel(accel, self.device)
        if max_batch is None:
            # Batching is the GPU throughput path. On CPU it buys little, and convolution results there depend on
            # the batch's size by a rounding step, so an image (and its content hash) would depend on which
            # requests happened to share its batch; one image per call keeps CPU runs bit-reproducible, which
            # resumed and cached runs rely on.
            max_batch = DEFAULT_MAX_BATCH if self.device.startswith("cuda") else 1
        if max_batch < 1:
            raise UnsupportedOptionError(f"max_batch must be at least 1, got {max_batch}")
        if max_wait_ms < 0:
            raise UnsupportedOptionError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.name = name
        self.model = model
        self.variant = variant
        self.unet_file = unet_file
        # SD-NP adds the safety negative prompt (ESD only with `?np=1`); callers can override it.
        self.default_negative = negative_prompt
        self.dtype = dtype
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self.store = store
        self.truncate_long_prompts = truncate_long_prompts
        # The buckets and warm-up sizes (environment), read here so that a bad value fails at construction.
        self.compile_settings = compile_settings()
        self._pipe: Pipeline | None = None

    # -- loading -------------------------------------------------------------------------------------------

    @property
    def pipeline(self) -> Pipeline:
        """The (shared) diffusers pipeline, loaded on first use; a compiled one is handed out only once warmed up
        (`warm_up`), so a thread asking meanwhile waits rather than compiling beside the warm-up."""
        if self._pipe is None:
            pipe = self._load()
            self.warm_up()
            self._pipe = pipe
        return self._pipe

    def _load(self) -> Pipeline:
        return load_pipeline(
            self.model,
            variant=self.variant,
            unet_file=self.unet_file,
            device=self.device,
            dtype=self.dtype,
            accel=self.fast_path.name,
        )

    def warm_up(self) -> dict[str, Any]:
        """Compile every shape this generator can render before its first request: each batch size of
        `FastPath.batch_sizes` (the buckets) at each warm-up image size, one short render each, shared with the
        machine's other processes (`tools.t2i.warmup`). Once per pipeline and call keywords; later calls wait for
        it and return its report. Nothing to do (an empty report) on the eager path or with
        `UNVEIL_T2I_WARMUP=0`."""
        pipe = self._load()
        settings = self.compile_settings
        if not (self.fast_path.compile and settings.warmup):
            return {}
        shapes = []
        for width, height in settings.warmup_sizes:
            kwargs = self.call_kwargs(GenerationRequest(prompt="warm-up", width=width, height=height))
            # SLD guides only after its warm-up steps, with a third batch chunk: render past them.
            kwargs["num_inference_steps"] = max(WARMUP_STEPS, int(kwargs.get("sld_warmup_steps", 0)) + 1)
            for rows in self.fast_path.batch_sizes(self.max_batch, settings.buckets):
                shapes.append(WarmShape(rows, width, height, tuple(sorted(kwargs.items()))))
        guard = compile_guard(pipe, self.fast_path)
        key = (self.variant, tuple(shapes))
        with guard.lock:
            if key not in guard.warmed:
                model_key = warmup_key(pipe, self.fast_path.name)

                def run(shape: WarmShape) -> None:
                    payloads = [_ImageJob("warm-up", self.default_negative, k) for k in range(shape.rows)]
                    self.render_rows(payloads, dict(shape.kwargs), keep=0, overlap=False, pipe=pipe)

                # Another generator over this UNet (SLD's three-chunk batches) warms up its own shapes: not late.
                guard.ready = False
                try:
                    guard.warmup = warm_up(shapes, run, model_key, settings)
                    guard.warmed.add(key)
                finally:
                    guard.ready = True
            return guard.warmup

    def unpadded_sizes(self) -> tuple[int, ...]:
        """The batch sizes this generator renders without padding rows: its buckets when a compiled UNet renders
        only those (the batcher then forms batches of them), else none (any size)."""
        fast_path = self.fast_path
        if not (fast_path.compile and fast_path.bucket_batches and not fast_path.dynamic_batch):
            return ()
        return fast_path.batch_sizes(self.max_batch, self.compile_settings.buckets)

    def compile_stats(self) -> dict[str, Any]:
        """What this generator's pipeline compiled: the warm-up's report, the shapes run and any compilation after
        the warm-up (`CompileGuard.stats`); empty on the eager path."""
        if not self.fast_path.compile:
            return {}
        return compile_guard(self.pipeline, self.fast_path).stats()

    def call_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        """Pipeline keywords shared by every image of a batch (size, steps, guidance, SLD preset)."""
        kwargs: dict[str, Any] = {
            "height": request.height,
            "width": request.width,
            "num_inference_steps": request.steps,
            "guidance_scale": request.guidance,
        }
        if self.variant.startswith("sld-"):
            kwargs.update(SLD_CONFIGS[self.variant.removeprefix("sld-")].kwargs())
        return kwargs

    # -- validation ----------------------------------------------------------------------------------------

    def _check_prompt(self, text: str, field: str) -> None:
        if self.truncate_long_prompts:
            return
        lock, tokenizers = check_tokenizers(self.pipeline)
        for tok in tokenizers:
            with lock:
                n = len(tok(text, truncation=False).input_ids)
            if n > tok.model_max_length:
                shown = text if len(text) <= 80 else text[:77] + "..."
                raise PromptError(
                    f"{field} {shown!r} is {n} tokens, over the text encoder's limit of {tok.model_max_length} "
                    "(shorten it, or choose the long-prompt policy 'truncate': --long-prompts truncate, "
                    "context long_prompts)"
                )

    def validate(self, request: GenerationRequest) -> str | None:
        """Refuse bad requests before queueing; returns the negative prompt to use."""
        if not isinstance(request.prompt, str) or not request.prompt.strip():
            raise PromptError(f"prompt {request.prompt!r} is empty; text-to-image needs a non-empty prompt")
        if request.num_images < 1:
            raise UnsupportedOptionError(f"num_images must be at least 1, got {request.num_images}")
        if request.steps < 1:
            raise UnsupportedOptionError(f"steps must be at least 1, got {request.steps}")
        for field_name in ("width", "height"):
            value = getattr(request, field_name)
            if value < 8 or value % 8:
                raise UnsupportedOptionError(
                    f"{field_name} must be a positive multiple of 8 for Stable Diffusion, got {value}"
                )
        negative = request.negative_prompt if request.negative_prompt is not None else self.default_negative
        self._check_prompt(request.prompt, "prompt")
        if negative:
            self._check_prompt(negative, "negative prompt")
        return negative

    # -- rendering -----------------------------------------------------------------------------------------

    def render_batch(self, jobs: list[Job]) -> list[Any]:
        """Render compatible jobs in one pipeline call (runs on the batcher's worker thread)."""
        real: list[_ImageJob] = [j.payload for j in jobs]
        # A compiled UNet renders a bucket size of rows (`FastPath.padded_batch`): padding rows repeat the last
        # image and are dropped, so a batch of any size reuses a graph the warm-up compiled.
        rows = self.fast_path.padded_batch(len(real), self.max_batch, self.compile_settings.buckets)
        payloads = real + [real[-1]] * (rows - len(real))
        kwargs = dict(cast(BatchKey, jobs[0].key)[1])
        return self.render_rows(payloads, kwargs, keep=len(real), overlap=self.fast_path.overlap_decode)

    def render_rows(
        self,
        payloads: list[_ImageJob],
        kwargs: dict[str, Any],
        *,
        keep: int,
        overlap: bool,
        pipe: Pipeline | None = None,
    ) -> list[Any]:
        """One pipeline call on exactly `payloads` with `kwargs` (on `pipe`, default this generator's pipeline);
        the first `keep` images (decoded beside the next batch when `overlap` and this generator decodes
        itself)."""
        import torch

        pipe = self.pipeline if pipe is None else pipe
        own_decode = self.decodes_itself(pipe)
        overlap = own_decode and overlap
        negatives = [p.negative_prompt or "" for p in payloads]

        def call() -> Any:
            # Generators are made per call: a retry after a failed compilation must draw the same latents.
            generators = [torch.Generator(device="cpu").manual_seed(p.seed) for p in payloads]
            with tokenizer_lock(pipe), torch.inference_mode():
                return pipe(
                    prompt=[p.prompt for p in payloads],
                    negative_prompt=negatives if any(negatives) else None,
                    generator=generators,
                    output_type="latent" if own_decode else "pil",
                    **kwargs,
                )

        # The UNet sees 2 rows per image under classifier-free guidance; the shape keys the compile notice.
        shape = (len(payloads), kwargs["height"], kwargs["width"])
        try:
            out = compile_guard(pipe, self.fast_path).run(pipe.unet, shape, call)
        except torch.cuda.OutOfMemoryError as exc:
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            images = keep or len(payloads)  # the images asked for (a warm-up keeps none)
            raise GenerationOOMError(
                f"{self.name}: CUDA out of memory rendering a batch of {images} images at "
                f"{kwargs['width']}x{kwargs['height']}, {kwargs['num_inference_steps']} steps "
                f"(lower max_batch, now {self.max_batch})",
                batch_size=images,
            ) from exc
        # The padding rows are decoded with the rest (the compiled decoder keeps the bucket shapes) and dropped.
        if overlap:
            # The UNet is done; the decode runs beside the next batch and each caller waits for its image.
            batch = submit_decode(pipe, out.images, self.device)
            return [_Deferred(batch, i) for i in range(keep)]
        if own_decode:
            return decode_to_pil(pipe, out.images)[:keep]
        return list(out.images)[:keep]

    def decodes_itself(self, pipe: object) -> bool:
        """Whether this generator decodes the latents itself (`decode_to_pil`, maybe beside the next batch): the
        preset asks for it, on CUDA, and the pipeline is a plain SD 1.x/2.x one (SDXL upcasts its VAE and SLD has
        its own decode path: they decode as diffusers does)."""
        preset = self.fast_path
        if not ((preset.overlap_decode or preset.compile_vae) and self.device.startswith("cuda")):
            return False
        from diffusers import StableDiffusionPipeline

        return type(pipe) is StableDiffusionPipeline

    async def generate(self, request: GenerationRequest) -> list[str]:
        """Render `request` (batched with concurrent requests) and return the stored image ids in seed order."""
        import asyncio

        from tools.image_store import get_image_store

        negative = await asyncio.to_thread(self.validate, request)
        kwargs = self.call_kwargs(request)
        # Jobs may share a batch when they use the same pipeline object and the same call keywords.
        key: BatchKey = (id(self.pipeline), tuple(sorted(kwargs.items())))
        payloads = [_ImageJob(request.prompt, negative, request.seed + k) for k in range(request.num_images)]
        results = await get_batcher(self.device).run(
            key,
            payloads,
            self.render_batch,
            max_batch=self.max_batch,
            max_wait_s=self.max_wait_s,
            sizes=self.unpadded_sizes(),
        )
        images = await finished_images(results)
        store = self.store or get_image_store()
        # PNG encoding happens off the GPU worker so it overlaps the next batch.
        stored = await asyncio.gather(*(asyncio.to_thread(store.put_pil, im) for im in images))
        return [s.id for s in stored]
