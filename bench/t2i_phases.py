"""Where a T2I round's time goes on the real request path: `bench/t2i_throughput.py --phases` wraps the generator's
steps for the timed rounds and reports, per step, how many calls, their summed seconds and the wall seconds they
covered (overlapping calls, e.g. PNG encodings on several threads, counted once).

The steps: `validate` (each request's prompt check, in a thread), `pipeline` (the batch's pipeline call on the
batcher's worker: text encoder, UNet steps, scheduler; the GPU's queue may still be running when it returns),
`decode` (the VAE and the conversion to PIL images, on the decode thread or inline), `store` (PNG encoding and the
image store's write of one image, in a thread). What none of them covers is the batcher's wait and asyncio's own
work. GRPO's renderer keeps its images in memory (no `store`), so the two paths' difference shows here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

STEPS = ("validate", "pipeline", "decode", "store")


class PhaseClock:
    """Intervals of each step, recorded from any thread."""

    def __init__(self) -> None:
        self.intervals: dict[str, list[tuple[float, float]]] = {s: [] for s in STEPS}
        self.bytes: list[int] = []
        self._lock = threading.Lock()

    def wrap(self, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, timed as `step`."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.intervals[step].append((t0, time.perf_counter()))

        return timed

    def report(self, round_s: float, images: int) -> dict[str, Any]:
        """Per step: calls, summed seconds, wall seconds covered, and both per image in ms; the round's wall time."""
        out: dict[str, Any] = {"round_s": round(round_s, 3), "images": images}
        for step, spans in self.intervals.items():
            total = sum(b - a for a, b in spans)
            wall = covered(spans)
            out[step] = {
                "calls": len(spans),
                "sum_s": round(total, 3),
                "wall_s": round(wall, 3),
                "wall_ms_per_image": round(1000 * wall / max(images, 1), 1),
            }
        if self.bytes:
            out["png_kb_per_image"] = round(sum(self.bytes) / len(self.bytes) / 1024, 1)
        return out


def covered(spans: list[tuple[float, float]]) -> float:
    """The wall seconds a set of (start, end) intervals covers, overlaps counted once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@contextlib.contextmanager
def instrumented(clock: PhaseClock) -> Iterator[PhaseClock]:
    """Time the diffusers generator's steps (class attributes, so every generator of the process) while inside."""
    import tools.t2i.diffusers_backend as backend
    from tools.image_store import ImageStore

    originals = {
        (backend.DiffusersGenerator, "validate"): backend.DiffusersGenerator.validate,
        (backend.DiffusersGenerator, "render_rows"): backend.DiffusersGenerator.render_rows,
        (backend, "decode_to_pil"): backend.decode_to_pil,
        (ImageStore, "_put_png"): ImageStore._put_png,
        (ImageStore, "put_pil"): ImageStore.put_pil,
    }
    put_png = ImageStore._put_png

    def counted_put_png(store: Any, png: bytes, width: int, height: int) -> Any:
        clock.bytes.append(len(png))
        return put_png(store, png, width, height)

    backend.DiffusersGenerator.validate = clock.wrap("validate", backend.DiffusersGenerator.validate)
    backend.DiffusersGenerator.render_rows = clock.wrap("pipeline", backend.DiffusersGenerator.render_rows)
    backend.decode_to_pil = clock.wrap("decode", backend.decode_to_pil)
    ImageStore._put_png = counted_put_png
    ImageStore.put_pil = clock.wrap("store", ImageStore.put_pil)
    try:
        yield clock
    finally:
        for (owner, name), value in originals.items():
            setattr(owner, name, value)
