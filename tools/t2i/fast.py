"""The CUDA fast path of the diffusers backends: one named preset per way of running the UNet.

`accel` (a generator option) names a preset; `auto`, the default, is `compile` on CUDA and `eager` on CPU, so
CPU behaviour (and every CPU test) stays the plain eager path, bit for bit.

- `eager`: fp16 UNet in NCHW layout, PyTorch SDPA attention, no compilation. The parity path: plain PyTorch
  kernels, for bit-exact checks.
- `compile`: `eager` + fused QKV projections, cuDNN autotuning, 1x1 convolutions as matmuls, `torch.compile` of
  the UNet and of the VAE decoder with static shapes, batches padded up to the next bucket size (1, 8, 16, 32 by
  default: `UNVEIL_T2I_BUCKETS`, `tools.t2i.warmup`) so that a few static graphs serve every batch, every bucket
  compiled before the first request (the warm-up), and the image's uint8 conversion on the GPU (`decode_to_pil`).
  The default on CUDA.
- `fp8`: `compile` without the VAE switch + torchao float8 (dynamic activation scales; per-tensor for fp16
  weights, per-row for bf16) on the UNet's linear layers. Hopper or newer only; a named option, never the
  default, because it changes the images.

A preset may be followed by switches, `accel="compile+freeze"` or `compile+no-vae` (`SWITCHES`): Inductor
freezing (`freeze`), coordinate-descent tuning (`cd`), GEMM-only autotuning (`gemm`), NCHW convolutions
(`nchw`), the compiled VAE decode (`vae`), the decode beside the next batch (`overlap`), the batch buckets
(`bucket`) and a dynamic batch dimension instead of buckets (`dynamic`: one graph with a symbolic batch). They
exist so the benchmark can measure them; which ones the presets use, and why, is decided by the measurements in
docs/tools.md (bench/t2i_throughput.py).

Compilation is plain `torch.compile` with static shapes, applied in place to the UNet (the module object stays
the same, so SLD sharing the UNet and diffusers' attribute access keep working). Its cost is paid once per bucket
by the generator's warm-up (`tools.t2i.warmup`), before the first request; Inductor's FX graph and AOTAutograd
caches (under `$TORCHINDUCTOR_CACHE_DIR`, default `~/.cache/unveil/inductor`, shared by every process of the
machine) let the other processes load what the first compiled. A shape met after the warm-up still compiles, with
a loud warning, and is counted (`CompileGuard.late_compiles`). If compilation fails, the UNet falls back to eager
with a warning and the batch is rendered again.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from tools.t2i.compile_settings import DEFAULT_BUCKETS as DEFAULT_BUCKETS
from tools.t2i.compile_settings import default_cache_dir as default_cache_dir
from tools.t2i.compile_settings import enable_compile_caches
from tools.t2i.errors import UnsupportedOptionError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

T = TypeVar("T")

# The batch sizes a compiled UNet is padded up to (and compiled for, before the first request), unless
# `UNVEIL_T2I_BUCKETS` names others (`tools.t2i.warmup.CompileSettings`); `max_batch` (32 on CUDA) is always one.
# Each bucket is one static graph: one to two minutes of compilation the first time on a machine, and about 30 s
# in every later process even from the cache (Dynamo traces the UNet again: 28 s of the first batch with a warm
# cache at 4405ca1, docs/tools.md). So two: a batch of 1-8 images runs as 8 rows, 9-31 as 32. Under load batches
# are full (32); the padding costs compute only on the last batch of a burst, and a lone image renders in the time
# of 8 (about 2 s on an H100) instead of waiting for a compilation of its own.


@dataclass(frozen=True)
class FastPath:
    """How the UNet of one pipeline runs on CUDA (see the module docstring for the presets)."""

    name: str
    compile: bool = False
    fuse_qkv: bool = False
    cudnn_benchmark: bool = False
    conv_1x1_as_mm: bool = False
    fp8: bool = False
    # Inductor options measured by bench/t2i_throughput.py (its variants `compile+freeze` and so on):
    freezing: bool = False  # weights as constants: constant folding and weight layouts chosen at compile time
    coordinate_descent: bool = False  # tunes the block sizes of the generated Triton kernels (norms, pointwise)
    gemm_autotune: bool = False  # benchmarks Triton templates against cuBLAS per matmul shape (convs stay cuDNN)
    nchw_convs: bool = False  # Inductor keeps the convolutions in NCHW (no layout optimisation to channels_last)
    # Compiled VAE decoder, and the float -> uint8 image conversion on the GPU (`decode_to_pil`) instead of
    # numpy on the CPU (plain SD 1.x/2.x pipelines; others decode as diffusers does).
    compile_vae: bool = False
    # VAE decode and PIL conversion of a batch on a side CUDA stream and thread while the next batch's UNet runs
    # (plain SD 1.x/2.x pipelines; other pipelines decode inline).
    overlap_decode: bool = False
    # Pad each batch to a bucket size (`padded_batch`) so the compiled UNet sees a few static shapes: a batch of
    # an odd size would otherwise compile a graph with a symbolic batch (see the comment above `PRESETS`).
    bucket_batches: bool = False
    # One graph with a symbolic batch dimension instead of one static graph per bucket (the inputs' first dimension
    # marked dynamic, `compile_static`): one compilation and no padding beyond 2 rows, but Inductor then skips its
    # convolution layout optimisation (see the comment above `PRESETS`). Measured against the buckets by
    # `bench/t2i_throughput.py --mix`.
    dynamic_batch: bool = False

    def padded_batch(self, n: int, max_batch: int, buckets: tuple[int, ...] = DEFAULT_BUCKETS) -> int:
        """How many rows a batch of `n` images is rendered as: `n` itself unless batches are bucketed, else the
        smallest of `batch_sizes(max_batch, buckets)` that holds `n` (`n` itself above them all); with a dynamic
        batch, at least 2 (a batch of 1 would get a graph of its own). Padding rows repeat an image of the batch
        and are dropped."""
        if n < 1:
            return n
        if self.dynamic_batch:
            return max(n, 2)
        if not self.bucket_batches:
            return n
        return next((b for b in self.batch_sizes(max_batch, buckets) if b >= n), n)

    def batch_sizes(self, max_batch: int, buckets: tuple[int, ...] = DEFAULT_BUCKETS) -> tuple[int, ...]:
        """The batch sizes the warm-up compiles: the buckets below `max_batch` and `max_batch` itself (bucketed);
        2 and `max_batch` (dynamic: one graph, the second size checks that it serves both); `max_batch` alone
        (neither: other sizes compile when met)."""
        if self.dynamic_batch:
            return tuple(sorted({min(2, max_batch), max_batch}))
        if not self.bucket_batches:
            return (max_batch,)
        return (*sorted({b for b in buckets if b < max_batch}), max_batch)

    def inductor_options(self) -> dict[str, Any]:
        """Inductor settings scoped to this UNet's compilation (not process-wide)."""
        options: dict[str, Any] = {}
        if self.conv_1x1_as_mm:
            options["conv_1x1_as_mm"] = True
        if self.freezing:
            options["freezing"] = True
        if self.coordinate_descent:
            options["coordinate_descent_tuning"] = True
        if self.nchw_convs:
            options["layout_optimization"] = False
        if self.gemm_autotune:
            # GEMMs only, the default search space: `max-autotune` (convolution templates, CUDA graphs and the
            # exhaustive space) compiled for over ten minutes here.
            options.update(
                max_autotune_gemm=True,
                max_autotune_gemm_backends="ATEN,TRITON",
                max_autotune_conv_backends="ATEN",
                max_autotune_gemm_search_space="DEFAULT",
            )
        return options


# Why compiled batches are padded to bucket sizes and compiled with static shapes: by default Dynamo recompiles
# a frame that meets a second input shape with that dimension symbolic, and the symbolic graph then serves every
# later call of the frame, full batches and other UNet instances of the same class included (tests/
# test_t2i_fast.py shows it). Inductor skips its convolution layout optimisation for symbolic shapes
# (torch/_inductor/graph.py, decide_layout_opt; pytorch#102670), so after one odd-sized batch the convolutions
# run as in the forced-NCHW rows of docs/tools.md (89 instead of 63 ms of a 64-row UNet call on an H100). The fp8
# row at 0.48 images/s had those convolution times (85 ms) when it ran after other variants of the same UNet
# class in one process: a symbolic graph explains it (not re-measured on a GPU). Static compilation keeps one
# graph per bucket (at most 7 for 32 images a batch); the padding costs at most 7 rows above 8 images.

# Static graphs per UNet frame: buckets x image sizes x pipelines sharing the class; Dynamo's default limit (8)
# would send the UNet back to eager after the eighth.
RECOMPILE_LIMIT = 64

PRESETS: dict[str, FastPath] = {
    "eager": FastPath("eager"),
    "compile": FastPath(
        "compile",
        compile=True,
        fuse_qkv=True,
        cudnn_benchmark=True,
        conv_1x1_as_mm=True,
        compile_vae=True,
        bucket_batches=True,
    ),
    "fp8": FastPath(
        "fp8", compile=True, fuse_qkv=True, cudnn_benchmark=True, conv_1x1_as_mm=True, fp8=True, bucket_batches=True
    ),
}
ACCEL_CHOICES = ("auto", *PRESETS)
# Switches that `accel="PRESET+switch+no-switch"` turns on or off over a compiled preset (benchmarks, tuning).
SWITCHES = {
    "freeze": "freezing",
    "cd": "coordinate_descent",
    "gemm": "gemm_autotune",
    "nchw": "nchw_convs",
    "vae": "compile_vae",
    "overlap": "overlap_decode",
    "bucket": "bucket_batches",
    "dynamic": "dynamic_batch",
}


def preset_named(accel: str) -> FastPath:
    """The preset called `accel`: a name of `PRESETS`, or one followed by `+switch` / `+no-switch` items (switches
    of `SWITCHES`, e.g. `compile+freeze+no-overlap`), which need a compiled preset."""
    # A URL query (`diffusers:MODEL?accel=compile+freeze`) hands the `+` over as a space.
    base, *items = accel.replace(" ", "+").split("+")
    if base not in PRESETS:
        raise UnsupportedOptionError(
            f"accel {accel!r} is not supported; use one of {', '.join(ACCEL_CHOICES)}"
            f" (optionally followed by +{'/+'.join(SWITCHES)} or +no-...)"
        )
    preset = PRESETS[base]
    if not items:
        return preset
    if not preset.compile:
        raise UnsupportedOptionError(f"accel {accel!r}: switches apply to compiled presets, not {base!r}")
    changes: dict[str, bool] = {}
    for item in items:
        key = item.removeprefix("no-")
        if key not in SWITCHES:
            raise UnsupportedOptionError(f"accel {accel!r}: unknown switch {item!r}; use {', '.join(SWITCHES)}")
        changes[SWITCHES[key]] = not item.startswith("no-")
    return replace(preset, name="+".join([base, *items]), **changes)


def resolve_accel(accel: str, device: str) -> FastPath:
    """The preset for option `accel` on `device` (`auto`: `compile` on CUDA, `eager` elsewhere)."""
    on_cuda = device.startswith("cuda")
    if accel == "auto":
        accel = "compile" if on_cuda else "eager"
    preset = preset_named(accel)
    if preset.name != "eager" and not on_cuda:
        raise UnsupportedOptionError(f"accel={preset.name!r} needs a CUDA device, got {device!r}")
    return preset


def _quantize_fp8(unet: torch.nn.Module) -> int:
    """torchao float8 on the UNet's linear layers (in place); returns how many layers were converted."""
    import torch

    major, _minor = torch.cuda.get_device_capability()
    if major < 9:
        raise UnsupportedOptionError(
            "accel='fp8' needs a GPU with float8 matrix units (Hopper, compute capability 9.0+)"
        )
    try:
        from torchao.quantization import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            Float8DynamicActivationFloat8WeightConfig,
            PerRow,
            PerTensor,
            quantize_,
        )
    except ImportError as exc:
        raise UnsupportedOptionError("accel='fp8' needs torchao (pip install 'unveil[fp8]')") from exc

    count = 0

    def wanted(module: torch.nn.Module, fqn: str) -> bool:
        nonlocal count
        # The timestep/class embeddings see one row per image: quantising them costs more than it saves.
        ok = (
            isinstance(module, torch.nn.Linear)
            and "time_emb" not in fqn
            and "add_emb" not in fqn
            and module.in_features % 16 == 0
            and module.out_features % 16 == 0
        )
        count += ok
        return ok

    # torchao's per-row scales need bf16 weights; the fp16 pipelines get one scale per tensor.
    granularity = PerRow() if unet.dtype == torch.bfloat16 else PerTensor()
    # torchao would otherwise set its recommended Inductor options process-wide (coordinate descent tuning for
    # every later compilation); the preset turns that option on for this UNet's compilation only.
    config = Float8DynamicActivationFloat8WeightConfig(granularity=granularity, set_inductor_config=False)
    quantize_(unet, config, filter_fn=wanted)
    return count


def apply_fast_path(pipe: Any, preset: FastPath) -> None:
    """Prepare `pipe.unet` for `preset` in place (the pipeline is already on its CUDA device)."""
    import torch

    if preset.name == "eager":
        return
    unet = pipe.unet
    if preset.fuse_qkv:
        # One matmul for Q, K and V of self-attention instead of three (cross-attention fuses K and V).
        unet.fuse_qkv_projections()
    if preset.cudnn_benchmark:
        # cuDNN picks the fastest convolution algorithm per shape once; process-wide, off for the parity path.
        torch.backends.cudnn.benchmark = True
    if preset.fp8:
        n = _quantize_fp8(unet)
        log.info("fp8: %d linear layers of the UNet quantised (torchao float8)", n)
    if preset.compile:
        compile_static(unet, options=preset.inductor_options() or None, dynamic_batch=preset.dynamic_batch)
    if preset.compile_vae:
        # The decoder alone (what `vae.decode` runs after one 1x1 convolution): its group norms over 512x512
        # activations are what the eager decode spends its time on.
        compile_static(
            pipe.vae.decoder,
            options={"layout_optimization": False} if preset.nchw_convs else None,
            dynamic_batch=preset.dynamic_batch,
        )


def compile_static(
    module: torch.nn.Module,
    *,
    options: dict[str, Any] | None = None,
    backend: str | Callable[..., Any] = "inductor",
    dynamic_batch: bool = False,
) -> None:
    """`module.compile()` in place with static shapes: each new input shape gets a graph of its own instead of
    one with symbolic sizes (see the comment above `PRESETS`); with `dynamic_batch`, the first dimension of every
    tensor argument is marked dynamic before each call instead, so the first call compiles one graph that serves
    every batch of 2 rows or more. Raises the per-frame recompile limit to `RECOMPILE_LIMIT` and turns on the FX
    graph and AOTAutograd caches (`tools.t2i.compile_settings.enable_compile_caches`)."""
    import torch._dynamo.config as dynamo_config

    enable_compile_caches()
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
    module.compile(backend=backend, dynamic=None if dynamic_batch else False, options=options)
    compiled = module._compiled_call_impl
    if dynamic_batch and compiled is not None:
        module._compiled_call_impl = _batch_marked(compiled)


def _batch_marked(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """`compiled` with the batch (first) dimension of its tensor arguments marked dynamic before each call (what
    `nn.Module.__call__` runs for a compiled module; marks must be set outside the compiled code)."""
    import torch

    def call(*args: Any, **kwargs: Any) -> Any:
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] > 1:
                torch._dynamo.maybe_mark_dynamic(value, 0)
        return compiled(*args, **kwargs)

    return call


@dataclass
class CompileGuard:
    """Per-pipeline compile bookkeeping: the notice on new shapes, the eager fallback after a failure, and, once
    the warm-up compiled every shape (`ready`), a loud warning and a count for any compilation after it."""

    preset: FastPath
    seen: set[tuple[int, ...]] = field(default_factory=set)
    failed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: bool = False  # set by the warm-up: from here on a compilation is a defect, counted below
    late_compiles: int = 0  # pipeline calls after the warm-up during which Dynamo compiled a graph
    late_shapes: list[tuple[int, ...]] = field(default_factory=list)
    warmed: set[tuple[Any, ...]] = field(default_factory=set)  # warm-up keys done (`tools.t2i.warmup`)
    warmup: dict[str, Any] = field(default_factory=dict)  # the warm-up's report (`tools.t2i.warmup.warm_up`)

    def run(self, unet: torch.nn.Module, shape: tuple[int, ...], fn: Callable[[], T]) -> T:
        """Call `fn` (one pipeline call); print a notice while a new shape compiles; fall back to eager on a
        compilation error and call `fn` again."""
        if not self.preset.compile or self.failed:
            return fn()
        new = shape not in self.seen
        if new and not self.ready:
            print(
                f"unveil t2i: compiling the UNet for batch shape {shape} (one-off, about a minute; cached in "
                f"{default_cache_dir()})",
                file=sys.stderr,
                flush=True,
            )
        before = compile_count()
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            self.failed = True
            disable_compile(unet)
            warnings.warn(
                f"torch.compile of the UNet failed ({type(exc).__name__}: {str(exc)[:200]}); "
                "rendering with the eager UNet instead",
                RuntimeWarning,
                stacklevel=2,
            )
            return fn()
        seconds = time.perf_counter() - t0
        if self.ready and compile_count() > before:
            self._late(shape, seconds)
        if new:
            self.seen.add(shape)
            log.info("t2i: first batch of shape %s took %.1f s (compilation included)", shape, seconds)
        return out

    def _late(self, shape: tuple[int, ...], seconds: float) -> None:
        """A compilation after the warm-up: said loudly (stderr and the log) and counted in `stats()`."""
        self.late_compiles += 1
        self.late_shapes.append(shape)
        message = (
            f"unveil t2i: COMPILED AFTER THE WARM-UP: batch shape {shape} was not among the warmed-up shapes "
            f"({self.late_compiles} late compilation(s) so far; this batch took {seconds:.1f} s). Add its batch size "
            "to UNVEIL_T2I_BUCKETS or its image size to UNVEIL_T2I_WARMUP_SIZES."
        )
        print(message, file=sys.stderr, flush=True)
        log.warning(message)

    def stats(self) -> dict[str, Any]:
        """What this pipeline compiled and when: the warm-up's report, the shapes run, the late compilations."""
        return {
            "preset": self.preset.name,
            "ready": self.ready,
            "compile_failed": self.failed,
            "shapes_run": sorted(self.seen),
            "late_compiles": self.late_compiles,
            "late_shapes": list(self.late_shapes),
            "warmup": dict(self.warmup),
        }


def compile_count() -> int:
    """Graphs Dynamo compiled in this process so far (its `unique_graphs` counter; 0 when unavailable)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without Dynamo
        return 0
    return int(counters["stats"]["unique_graphs"])


def is_compile_error(exc: BaseException) -> bool:
    """True when `exc` (or an exception it was raised from) comes from Dynamo, Inductor or Triton."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        module = type(seen).__module__ or ""
        if module.startswith(("torch._dynamo", "torch._inductor", "triton")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def disable_compile(module: torch.nn.Module) -> None:
    """Undo `module.compile()`: the next call runs the eager module."""
    if hasattr(module, "_compiled_call_impl"):
        module._compiled_call_impl = None
