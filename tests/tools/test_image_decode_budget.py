"""Decoding an image costs bounded memory and at most `UNVEIL_MAX_DECODES` decodes run at once.

The attack: a 68 KB 16-bit PNG at the 36-Mpx limit cost 1.5 GB to decode (whole-image float64 copies in the grey
conversion), and four at `--concurrency 4` reached 5.3 GB. bench/image_decode_memory.py prints the numbers per mode;
these tests pin the behaviour: the conversion's own allocations stay a few bytes a pixel, a decode over the memory
budget of its mode is refused from the header, and decodes wait for a slot.
"""

from __future__ import annotations

import io
import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tools import image_store
from tools.image_store import ImageInputError, decode_image


def _png16(side: int, value: int = 40000) -> bytes:
    buf = io.BytesIO()
    Image.new("I;16", (side, side), value).save(buf, format="PNG")
    return buf.getvalue()


def test_sixteen_bit_grey_is_converted_without_whole_image_float_copies() -> None:
    side = 1500  # 2.25 Mpx: big enough that one float64 copy (18 MB) would show
    data = _png16(side)
    tracemalloc.start()
    try:
        image = decode_image(data, name="big16.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert image.mode == "L" and image.getpixel((0, 0)) == round(40000 * 255 / 65535)
    # NumPy's allocations: the values in their own type, the 8-bit result and blocks of `_BLOCK_PIXELS` (the old
    # conversion peaked at about 38 bytes a pixel here).
    assert peak < 7 * side * side, peak


def test_blockwise_conversion_matches_the_whole_image_formula() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 65536, size=(700, 900), dtype=np.uint16)  # more pixels than one block
    image = Image.frombytes("I;16", (900, 700), values.astype("<u2").tobytes())
    expected = np.clip(np.rint(values.astype(np.float64) * (255.0 / 65535.0)), 0, 255).astype(np.uint8)
    assert np.array_equal(np.asarray(image_store.to_8bit(image)), expected)
    floats = rng.normal(0.5, 2.0, size=(600, 700)).astype(np.float32)
    floats[0, :5] = [np.nan, np.inf, -np.inf, 1e30, -1e30]
    lo, hi = float(np.nanmin(floats[np.isfinite(floats)])), float(np.nanmax(floats[np.isfinite(floats)]))
    want = np.nan_to_num((floats.astype(np.float64) - lo) * (255.0 / (hi - lo)), nan=0.0, posinf=255.0, neginf=0.0)
    got = np.asarray(image_store.to_8bit(Image.frombytes("F", (700, 600), floats.astype("<f4").tobytes())))
    assert np.array_equal(got, np.clip(np.rint(want), 0, 255).astype(np.uint8))


def test_a_decode_over_the_budget_of_its_mode_is_refused_from_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _png16(400)
    monkeypatch.setattr(image_store, "DECODE_BUDGET_BYTES", 400 * 400 * 2)  # less than a 16-bit grey decode takes
    with pytest.raises(ImageInputError, match=r"mode I;16 would take about .* MiB budget of one image"):
        decode_image(data, name="big16.png")
    rgb = io.BytesIO()
    Image.new("RGB", (100, 100)).save(rgb, format="PNG")
    assert decode_image(rgb.getvalue(), name="small.png").size == (100, 100)  # within the budget


class _CountingSlots:
    """The product's decode semaphore, with a count of the decoders that asked for a slot and of those inside."""

    def __init__(self, real: threading.BoundedSemaphore) -> None:
        self.real = real
        self.cond = threading.Condition()
        self.asked = self.inside = self.most = 0

    def __enter__(self) -> None:
        with self.cond:
            self.asked += 1
            self.cond.notify_all()
        self.real.acquire()
        with self.cond:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.cond.notify_all()

    def __exit__(self, *exc: Any) -> None:
        with self.cond:
            self.inside -= 1
        self.real.release()


def test_at_most_unveil_max_decodes_images_decode_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNVEIL_MAX_DECODES", "2")
    monkeypatch.setattr(image_store, "_DECODE_SLOTS", [])  # sized afresh from the setting
    slots = _CountingSlots(image_store.decode_slots())
    monkeypatch.setattr(image_store, "decode_slots", lambda: slots)
    release = threading.Event()
    real_to_8bit = image_store.to_8bit

    def held(image: Image.Image) -> Image.Image:  # a decoder stays inside its slot until the test lets it go
        assert release.wait(120), "never released"
        return real_to_8bit(image)

    monkeypatch.setattr(image_store, "to_8bit", held)
    data = _png16(64)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(decode_image(data, name="x.png"))) for _ in range(5)]
    for t in threads:
        t.start()
    with slots.cond:
        # Every decoder has asked for a slot; two hold one and three wait (none can leave before the release).
        assert slots.cond.wait_for(lambda: slots.asked == 5 and slots.inside == 2, timeout=120)
        assert slots.inside == 2
    release.set()
    for t in threads:
        t.join()
    assert slots.most == 2 and len(results) == 5 and all(r.mode == "L" for r in results)


def test_the_decode_limit_is_a_bounded_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.env import SettingError

    monkeypatch.setenv("UNVEIL_MAX_DECODES", "0")
    monkeypatch.setattr(image_store, "_DECODE_SLOTS", [])
    with pytest.raises(SettingError, match="UNVEIL_MAX_DECODES=0: must be at least 1"):
        image_store.decode_slots()
