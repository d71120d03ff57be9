"""The compiled UNet's settings (buckets, warm-up, cache folders) and the machine's compile cache: the floor
below both the compiled path (`tools.t2i.fast`) and its warm-up (`tools.t2i.warmup`), which read them."""

from __future__ import annotations

import contextlib
import getpass
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from tools.env import SettingError, env_bool, env_list, env_str, set_default
from tools.t2i.defaults import REQUEST_SIZE

DEFAULT_BUCKETS = (8, 32)
MAX_BUCKET = 4096  # bound of a bucket size (a batch of images in one pipeline call)


def _sizes(text: list[str], name: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in text:
        w, _, h = item.lower().partition("x")
        try:
            size = (int(w), int(h or w))
        except ValueError:
            raise SettingError(f"{name}={item!r}: expected WIDTHxHEIGHT, e.g. 512x512") from None
        if min(size) < 8 or size[0] % 8 or size[1] % 8:
            raise SettingError(f"{name}={item!r}: width and height must be positive multiples of 8")
        out.append(size)
    return tuple(dict.fromkeys(out))


def _buckets(text: list[str], name: str) -> tuple[int, ...]:
    try:
        values = [int(x) for x in text]
    except ValueError:
        raise SettingError(f"{name}={','.join(text)!r}: expected batch sizes, e.g. 1,8,16,32") from None
    if any(not 1 <= v <= MAX_BUCKET for v in values):
        raise SettingError(f"{name}={','.join(text)!r}: every bucket must be between 1 and {MAX_BUCKET}")
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class CompileSettings:
    """How a compiled generator's shapes are chosen, warmed up and shared (one environment variable a field)."""

    buckets: tuple[int, ...] = field(
        default=DEFAULT_BUCKETS,
        metadata={
            "env": "UNVEIL_T2I_BUCKETS",
            "min": 1,
            "max": MAX_BUCKET,
            "description": "Batch sizes a compiled UNet pads a batch up to (comma list, e.g. 1,8,16,32); the "
            "generator's max_batch is always one. Each is one static graph compiled at start.",
        },
    )
    warmup: bool = field(
        default=True,
        metadata={
            "env": "UNVEIL_T2I_WARMUP",
            "description": "Compile every bucket when a compiled generator loads (before its first request; a Ray "
            "render member is ready only after it). Off: each shape compiles when first met.",
        },
    )
    warmup_sizes: tuple[tuple[int, int], ...] = field(
        default=((REQUEST_SIZE, REQUEST_SIZE),),
        metadata={
            "env": "UNVEIL_T2I_WARMUP_SIZES",
            "min": 8,
            "description": "Image sizes the warm-up compiles each bucket at (comma list of WIDTHxHEIGHT, multiples "
            "of 8; default 512x512, the IPR, CTD and request default).",
        },
    )
    cache_dir: str = field(
        default="",
        metadata={
            "env": "UNVEIL_COMPILE_CACHE",
            "description": "The machine's compile cache folder (TORCHINDUCTOR_CACHE_DIR, unless that is set), shared "
            "by every process of the machine; default ~/.cache/unveil/inductor.",
        },
    )
    shared_cache: str = field(
        default="",
        metadata={
            "env": "UNVEIL_COMPILE_SHARED",
            "description": "A folder every machine of a cluster sees: warm-ups save their compiled artefacts there "
            "and load those of other machines (empty: none).",
        },
    )


def compile_settings() -> CompileSettings:
    """The settings from the environment (each bad value a `SettingError` naming its variable)."""
    meta = {f.name: f.metadata["env"] for f in fields(CompileSettings)}
    buckets = env_list(meta["buckets"])
    sizes = env_list(meta["warmup_sizes"])
    return CompileSettings(
        buckets=_buckets(buckets, meta["buckets"]) if buckets else DEFAULT_BUCKETS,
        warmup=env_bool(meta["warmup"], True),
        warmup_sizes=_sizes(sizes, meta["warmup_sizes"]) if sizes else CompileSettings.warmup_sizes,
        cache_dir=os.path.expanduser(env_str(meta["cache_dir"]) or ""),
        shared_cache=os.path.expanduser(env_str(meta["shared_cache"]) or ""),
    )


def enable_compile_caches() -> str:
    """Point Inductor at the machine's cache folder and turn on its FX graph cache and the AOTAutograd cache (so a
    graph another process compiled is loaded, not compiled); the folder."""
    folder = default_cache_dir()
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    with contextlib.suppress(ImportError, AttributeError):
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = True
    return folder


def torch_default_cache_dir() -> str:
    """torch's own cache folder (`torchinductor_<user>` in the temp folder), which `import torch._dynamo` writes
    into `TORCHINDUCTOR_CACHE_DIR` when nothing has set it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir as torch_default
    except ImportError:  # another torch layout: the same formula
        user = "".join("_" if c in '\\/:*?"<>|' else c for c in getpass.getuser())
        return os.path.join(tempfile.gettempdir(), "torchinductor_" + user)
    return str(torch_default())


def default_cache_dir() -> str:
    """Where Inductor keeps compiled kernels and FX graphs across runs, set in the process's environment: the
    user's `TORCHINDUCTOR_CACHE_DIR`, else the machine-level folder of `UNVEIL_COMPILE_CACHE` (`CompileSettings`),
    else `~/.cache/unveil/inductor`, shared by every process of the machine.

    torch's own default found in the variable is no choice of the user's and is replaced: importing
    `torch._dynamo` (diffusers and transformers do) writes it there, so whichever process imported them before
    asking here (a Ray render member, or any process Ray started from a driver that had) compiled cold in a folder
    of its own."""
    folder = compile_settings().cache_dir or str(Path.home() / ".cache" / "unveil" / "inductor")
    return set_default("TORCHINDUCTOR_CACHE_DIR", folder, unless_only=torch_default_cache_dir())
