"""The compiled UNet's shapes, ready before the first request: the settings that name them, the warm-up that
compiles them, and the caches every process of a machine (and of a cluster) compiles into and loads from.

A compiled generator (`tools.t2i.fast`, the CUDA default) renders every batch padded up to a bucket size
(`CompileSettings.buckets`), so the shapes it can meet are known when it starts: one per bucket and warm-up image
size. `DiffusersGenerator.warm_up` renders each of them once (2 diffusion steps) when its pipeline loads, through
`warm_shapes` below; a Ray render member answers `ready()` only after it, so no request ever waits for a compile
and no timed round contains one (`CompileGuard` warns loudly and counts any that happens anyway).

Sharing, so a machine compiles each shape once:

- one Inductor cache folder per machine (`TORCHINDUCTOR_CACHE_DIR`, from `UNVEIL_COMPILE_CACHE` or
  `~/.cache/unveil/inductor`) with Inductor's FX graph cache and the AOTAutograd cache on: a process that meets a
  graph another one compiled loads it (Dynamo still traces, seconds, not a minute);
- one lock file per shape in that folder: the processes warming up at once (the members of a machine) each take a
  shape no other is compiling, so the first compilations run side by side, and each then loads the shapes the
  others compiled, waiting on their locks rather than compiling the same graph again in parallel;
- across machines, `UNVEIL_COMPILE_SHARED` names a folder every machine sees: after a warm-up that compiled
  something, its compiled artefacts (`torch.compiler.save_cache_artifacts`) are written there, one file per
  process, and a warm-up on another machine loads every file of its model (`load_cache_artifacts`) before it
  starts. `shared_compilation` does the same around any first call that compiles (the GRPO policy's decoding).
  A folder any user may write to, a file that is a link, not regular or too large, and a file with an entry that
  would be written outside the cache folder are refused with a warning (`tools.t2i.shared_folder`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tools.safe_files import UnsafePathError, atomic_write
from tools.t2i.compile_settings import DEFAULT_BUCKETS as DEFAULT_BUCKETS
from tools.t2i.compile_settings import CompileSettings as CompileSettings
from tools.t2i.compile_settings import compile_settings as compile_settings
from tools.t2i.compile_settings import default_cache_dir as default_cache_dir
from tools.t2i.compile_settings import enable_compile_caches as enable_compile_caches
from tools.t2i.fast import compile_count
from tools.t2i.shared_folder import UnsafeArtefactError, check_artefact_entries, check_shared_folder, read_artefact

log = logging.getLogger(__name__)

WARMUP_STEPS = 2  # diffusion steps of a warm-up render: the UNet's graph does not depend on the step count


@contextlib.contextmanager
def shape_lock(name: str, *, blocking: bool) -> Iterator[bool]:
    """Hold the machine-wide lock of one warm-up shape (a file in the cache folder); yields False at once when
    `blocking` is off and another process holds it."""
    folder = lock_folder()
    handle: IO[bytes] = open(folder / f"{name}.lock", "ab")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def lock_folder() -> Path:
    """The folder of the warm-up locks and their done marks: in the machine's compile cache, so clearing the cache
    clears them too."""
    folder = Path(default_cache_dir()) / "unveil-warmup-locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shape_done(name: str) -> bool:
    """Whether a process of this machine has run the shape `name` to the end (its graphs are in the cache)."""
    return (lock_folder() / f"{name}.done").is_file()


def mark_shape_done(name: str) -> None:
    """Mark the shape `name` as run to the end on this machine (`shape_done`)."""
    (lock_folder() / f"{name}.done").touch()


def _cache_counters() -> dict[str, int]:
    """Inductor's and AOTAutograd's cache hit and miss counters so far (absent ones are 0)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without Dynamo
        return {}
    return {
        "fx_cache_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
        "fx_cache_misses": int(counters["inductor"]["fxgraph_cache_miss"]),
        "aot_cache_hits": int(counters["aot_autograd"]["autograd_cache_hit"]),
    }


@dataclass(frozen=True)
class WarmShape:
    """One shape to warm up: `rows` images of `width` x `height` under the call keywords `kwargs`."""

    rows: int
    width: int
    height: int
    kwargs: tuple[tuple[str, Any], ...]

    def lock_name(self, model_key: str) -> str:
        """The machine-wide lock file of this shape of the model `model_key`."""
        text = json.dumps([model_key, self.rows, self.width, self.height, repr(self.kwargs)])
        return f"{self.rows}x{self.width}x{self.height}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _measure(shape: WarmShape, run: Callable[[WarmShape], None], waited: float) -> dict[str, Any]:
    before, graphs, t0 = _cache_counters(), compile_count(), time.perf_counter()
    run(shape)
    after = _cache_counters()
    return {
        "rows": shape.rows,
        "size": f"{shape.width}x{shape.height}",
        "seconds": round(time.perf_counter() - t0, 2),
        "waited_s": round(waited, 2),
        "graphs": compile_count() - graphs,
        **{k: after[k] - before.get(k, 0) for k in after},
    }


def warm_shapes(shapes: list[WarmShape], run: Callable[[WarmShape], None], model_key: str) -> list[dict[str, Any]]:
    """Run `run` once on every shape. A shape some process of this machine already ran to the end (`shape_done`)
    loads from the cache: it runs at once, beside every other process, without a lock. The others each run under
    their machine-wide lock: first the shapes no other process is warming up (so concurrent warm-ups compile
    different shapes side by side), then, waiting for their locks, those others held (by then in the cache). A
    lock is held only while a shape may compile: holding it through cached loads made the 8 processes of the
    4-GPU suite's last round (4 Ray members, 4 GRPO ranks) take their warm-ups one after another. Returns one
    record per shape, in the order run: its seconds, the seconds waited for its lock, the graphs Dynamo compiled
    and the cache hits and misses."""
    pending = sorted(shapes, key=lambda s: -s.rows)
    records: list[dict[str, Any]] = []
    for shape in [s for s in pending if shape_done(s.lock_name(model_key))]:
        records.append(_measure(shape, run, 0.0))
        pending.remove(shape)
    while pending:
        for shape in pending:
            with shape_lock(shape.lock_name(model_key), blocking=False) as held:
                if held:
                    records.append(_measure(shape, run, 0.0))
                    mark_shape_done(shape.lock_name(model_key))
                    break
        else:
            shape = pending[0]
            t0 = time.perf_counter()
            with shape_lock(shape.lock_name(model_key), blocking=True):
                records.append(_measure(shape, run, time.perf_counter() - t0))
                mark_shape_done(shape.lock_name(model_key))
        pending.remove(shape)
    return records


def _artefact_prefix(model_key: str) -> str:
    """The name every artefact file of `model_key` starts with: the graphs depend on torch's version, the GPU model
    and what `model_key` names (a pipeline's UNet, a policy's decoding)."""
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    text = json.dumps([torch.__version__, device, model_key])
    return f"unveil-compiled-{hashlib.sha256(text.encode()).hexdigest()[:20]}"


def load_shared_artefacts(settings: CompileSettings, model_key: str) -> str:
    """Load every artefact file of `model_key` that processes of this or other machines saved under
    `UNVEIL_COMPILE_SHARED` (if set); what happened. The folder, each file and each entry are checked first
    (`tools.t2i.shared_folder`): what is refused is a warning, and its graphs are compiled here instead."""
    if not settings.shared_cache:
        return "no shared cache"
    folder = Path(settings.shared_cache)
    if not folder.is_dir():
        return f"none yet in {folder}"
    try:
        check_shared_folder(folder)
    except UnsafeArtefactError as exc:
        log.warning("compile cache: %s", exc)
        return f"refused: {exc}"
    files = sorted(folder.glob(f"{_artefact_prefix(model_key)}-*.bin"))
    if not files:
        return f"none yet in {folder}"
    import torch

    size, unreadable, t0 = 0, 0, time.perf_counter()
    for path in files:
        try:
            data = read_artefact(path)
            check_artefact_entries(data, path)  # before torch writes any entry where its key says
            torch.compiler.load_cache_artifacts(data)
        except Exception as exc:  # noqa: BLE001 - a stale, partial or refused file costs only a compilation
            log.warning("compile cache: could not load %s (%s); compiling what it held instead", path, exc)
            unreadable += 1
            continue
        size += len(data)
    note = f"; {unreadable} unreadable" if unreadable else ""
    seconds = time.perf_counter() - t0
    return f"loaded {len(files) - unreadable} file(s), {size / 1e6:.1f} MB, from {folder} in {seconds:.1f} s{note}"


def save_shared_artefacts(settings: CompileSettings, model_key: str) -> str:
    """Save this process's compiled artefacts under `UNVEIL_COMPILE_SHARED` for the other machines, in a file of
    its own (processes compiling different shapes at once must not overwrite each other's); what happened. A folder
    that cannot be written is a warning, not an error."""
    if not settings.shared_cache:
        return "no shared cache"
    import torch

    t0 = time.perf_counter()
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return "nothing to save"
    with contextlib.suppress(OSError):  # a folder still to make (by the save, under the umask) or not one: below
        try:
            check_shared_folder(Path(settings.shared_cache))
        except UnsafeArtefactError as exc:
            log.warning("compile cache: %s", exc)
            return f"not saved: {exc}"
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40]
    # Whole and never through a link planted at the name: another machine never reads half a file; and the folder
    # is the cluster's, so another machine's write in progress is not taken for a dead writer's.
    name = f"{_artefact_prefix(model_key)}-{host}-{os.getpid()}.bin"
    try:
        path = atomic_write(settings.shared_cache, name, saved[0], one_machine=False)
    except (OSError, UnsafePathError) as exc:
        # This process's graphs are compiled and in the machine's cache: a folder it cannot write costs the other
        # machines one compilation each, as an unreadable file does when loading, not this run.
        where = Path(settings.shared_cache) / name
        log.warning("compile cache: could not save %s (%s); other machines will compile these graphs", where, exc)
        return f"not saved: {exc}"
    return f"saved {path} ({len(saved[0]) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s)"


@contextlib.contextmanager
def shared_compilation(model_key: str, settings: CompileSettings | None = None) -> Iterator[dict[str, str]]:
    """Around code that may compile the graphs of `model_key` (a first call): load the artefacts other machines
    saved for it before, and save this process's after if it compiled something (an FX graph cache miss). Yields
    the report (`load`, then `save`)."""
    settings = settings or compile_settings()
    enable_compile_caches()
    report = {"load": load_shared_artefacts(settings, model_key)}
    misses = _cache_counters().get("fx_cache_misses", 0)
    yield report
    compiled = _cache_counters().get("fx_cache_misses", 0) > misses
    report["save"] = save_shared_artefacts(settings, model_key) if compiled else "nothing new"


def warm_up(
    shapes: list[WarmShape], run: Callable[[WarmShape], None], model_key: str, settings: CompileSettings
) -> dict[str, Any]:
    """The whole warm-up of one pipeline: shared artefacts loaded, every shape run (`warm_shapes`), artefacts
    saved if anything was compiled; the report a member gives (seconds, each shape's record, the cache folder)."""
    t0 = time.perf_counter()
    with shared_compilation(model_key, settings) as shared:
        records = warm_shapes(shapes, run, model_key)
    report = {
        "seconds": round(time.perf_counter() - t0, 2),
        "shapes": records,
        "buckets": sorted({s.rows for s in shapes}),
        "sizes": sorted({f"{s.width}x{s.height}" for s in shapes}),
        "cache_dir": default_cache_dir(),
        "shared": shared,
        "pid": os.getpid(),
    }
    log.info(
        "t2i warm-up: %d shape(s) in %.1f s (%s)",
        len(records),
        report["seconds"],
        ", ".join(f"{r['rows']}@{r['size']} {r['seconds']:.0f} s" for r in records),
    )
    return report
