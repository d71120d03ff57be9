"""Every image mode Pillow opens reaches the model and the scorers with its visible content intact:
a mid-grey 16-bit image stays mid-grey, transparency shows as a viewer shows it.

Each case writes a real file in some mode and format, then checks the 8-bit image that the store keeps (what
models get as a data URL) and that the scorers' loader returns.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from tools.image_store import ImageStore, decode_image, to_8bit
from tools.scorers.common import load_rgb

GREY = 128
W, H = 8, 4  # left half and right half are checked separately


def _halves(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return rgb[:, : W // 2].reshape(-1, 3).mean(axis=0), rgb[:, W // 2 :].reshape(-1, 3).mean(axis=0)


def _uniform(mode: str, value: object) -> Callable[[], Image.Image]:
    return lambda: Image.new(mode, (W, H), value)  # type: ignore[arg-type]


def _sixteen(mode: str, dtype: str) -> Callable[[], Image.Image]:
    def make() -> Image.Image:
        arr = np.full((H, W), GREY * 257, dtype=dtype)  # 32896: the 16-bit code of 8-bit 128
        im = Image.frombytes(mode, (W, H), arr.tobytes())
        return im

    return make


def _with_alpha(mode: str, opaque: object, clear: object) -> Callable[[], Image.Image]:
    """Left half fully transparent over black (a viewer shows white there), right half opaque mid-grey."""

    def make() -> Image.Image:
        im = Image.new(mode, (W, H), opaque)  # type: ignore[arg-type]
        im.paste(Image.new(mode, (W // 2, H), clear), (0, 0))  # type: ignore[arg-type]
        return im

    return make


def _bilevel() -> Image.Image:
    im = Image.new("1", (W, H), 1)
    im.paste(Image.new("1", (W // 2, H), 0), (0, 0))
    return im


def _palette(transparent: bool) -> Callable[[], Image.Image]:
    def make() -> Image.Image:
        im = Image.new("P", (W, H), 1)
        im.putpalette([0, 0, 0, GREY, GREY, GREY] + [0] * 762)
        im.paste(0, (0, 0, W // 2, H))
        if transparent:
            im.info["transparency"] = 0
        return im

    return make


def _palette_alpha() -> Image.Image:
    index = Image.new("L", (W, H), 1)
    alpha = Image.new("L", (W, H), 255)
    alpha.paste(0, (0, 0, W // 2, H))
    im = Image.merge("PA", (index, alpha))
    im.putpalette([0, 0, 0, GREY, GREY, GREY] + [0] * 762)
    return im


def _lab() -> Image.Image:
    rgb = Image.new("RGB", (W, H), (GREY, GREY, GREY))
    to_lab = ImageCms.buildTransform(ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB")
    lab = ImageCms.applyTransform(rgb, to_lab)
    assert lab is not None
    return lab


GREY3 = (GREY, GREY, GREY)
WHITE3 = (255, 255, 255)
BLACK3 = (0, 0, 0)
# (name, maker, expected left half, expected right half)
CASES: list[tuple[str, Callable[[], Image.Image], tuple[int, int, int], tuple[int, int, int]]] = [
    ("L", _uniform("L", GREY), GREY3, GREY3),
    ("RGB", _uniform("RGB", GREY3), GREY3, GREY3),
    ("I;16", _sixteen("I;16", "<u2"), GREY3, GREY3),
    ("I;16B", _sixteen("I;16B", ">u2"), GREY3, GREY3),
    ("I;16L", _sixteen("I;16L", "<u2"), GREY3, GREY3),
    ("I", _uniform("I", GREY * 257), GREY3, GREY3),
    ("F 0..1", _uniform("F", GREY / 255), GREY3, GREY3),
    ("F 0..255", _uniform("F", float(GREY)), GREY3, GREY3),
    ("1", _bilevel, BLACK3, WHITE3),
    ("P", _palette(False), BLACK3, GREY3),
    ("P+transparency", _palette(True), WHITE3, GREY3),
    ("LA", _with_alpha("LA", (GREY, 255), (0, 0)), WHITE3, GREY3),
    ("RGBA", _with_alpha("RGBA", (GREY, GREY, GREY, 255), (0, 0, 0, 0)), WHITE3, GREY3),
    ("PA", _palette_alpha, WHITE3, GREY3),
    ("RGBX", _uniform("RGBX", (GREY, GREY, GREY, 0)), GREY3, GREY3),
    ("CMYK", _uniform("CMYK", (0, 0, 0, 255 - GREY)), GREY3, GREY3),
    ("YCbCr", _uniform("YCbCr", (GREY, 128, 128)), GREY3, GREY3),
    ("LAB", _lab, GREY3, GREY3),
    ("HSV", _uniform("HSV", (0, 0, GREY)), GREY3, GREY3),
]
FORMATS = ["PNG", "TIFF", "WEBP", "JPEG", "BMP", "GIF", "PPM", "ICO", "TGA", "JPEG2000", "IM", "SGI", "PCX", "QOI"]


HIGH_DEPTH = ("I;16", "I;16B", "I;16L", "I", "F")


def _has_alpha(im: Image.Image) -> bool:
    return "A" in im.mode or "a" in im.mode or "transparency" in im.info


def _files() -> list[tuple[str, str, bytes, tuple[int, int, int], tuple[int, int, int]]]:
    """Every (mode, format) pair Pillow can write and read back with what the case is about kept, as bytes.

    Pillow's writers sometimes flatten on save (a 16-bit image saved as WebP or GIF is clipped to 8 bits by
    the writer, a TIFF drops a palette's transparency, IM saves palette indices as grey): such files no longer
    hold the content under test, so they are not cases.
    """
    out = []
    for name, make, left, right in CASES:
        src = make()
        for fmt in FORMATS:
            buf = io.BytesIO()
            kwargs = {"lossless": True} if fmt == "WEBP" else {}
            try:
                src.save(buf, format=fmt, **kwargs)
                back = Image.open(io.BytesIO(buf.getvalue()))
                back.load()
            except Exception:  # noqa: BLE001 - this format cannot hold this mode: not a case
                continue
            if src.mode in HIGH_DEPTH and back.mode not in HIGH_DEPTH:
                continue
            if _has_alpha(src) != _has_alpha(back) or (src.mode in ("P", "PA") and back.mode in ("L", "LA")):
                continue
            out.append((name, fmt, buf.getvalue(), left, right))
    return out


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # Pillow deprecates the IM format; it still opens it
    FILES = _files()


@pytest.mark.filterwarnings("ignore:IM image format is deprecated:DeprecationWarning")
def test_the_table_covers_the_high_bit_depth_and_odd_modes() -> None:
    opened = {Image.open(io.BytesIO(data)).mode for _, _, data, _, _ in FILES}
    assert {"I;16", "I;16B", "I", "F", "1", "P", "LA", "PA", "RGBA", "CMYK", "YCbCr", "LAB", "L", "RGB"} <= opened
    assert len(FILES) > 60


@pytest.mark.filterwarnings("ignore:IM image format is deprecated:DeprecationWarning")
@pytest.mark.parametrize(("name", "fmt", "data", "left", "right"), FILES, ids=[f"{n}-{f}" for n, f, *_ in FILES])
def test_mode_reaches_model_and_scorers_intact(
    tmp_path: Path, name: str, fmt: str, data: bytes, left: tuple[int, int, int], right: tuple[int, int, int]
) -> None:
    tol = 6 if fmt == "JPEG" else 2  # JPEG's colour conversion and rounding move a flat grey by a few levels
    store = ImageStore(tmp_path / "store")
    stored = store.put_bytes(data, name=f"x.{fmt}")
    # What the model gets: the data URL of the stored PNG.
    sent = Image.open(io.BytesIO(base64.b64decode(store.data_url(stored.id).split(",", 1)[1])))
    assert sent.mode in ("L", "RGB")
    # What the scorers get: their loader, from the store id and from the original file.
    src = tmp_path / f"x.{fmt.lower()}"
    src.write_bytes(data)
    for image in (sent.convert("RGB"), load_rgb(stored.id, store), load_rgb(str(src))):
        got_left, got_right = _halves(np.asarray(image, dtype=np.float64))
        assert np.allclose(got_left, left, atol=tol), (name, fmt, got_left, left)
        assert np.allclose(got_right, right, atol=tol), (name, fmt, got_right, right)


def test_sixteen_bit_uses_the_full_range() -> None:
    ramp = np.array([[0, 257 * 64, 257 * 128, 257 * 192, 65535]], dtype="<u2")
    im = decode_image(_png(Image.frombytes("I;16", (5, 1), ramp.tobytes())), name="ramp")
    assert np.asarray(im).ravel().tolist() == [0, 64, 128, 192, 255]


def test_out_of_range_integer_data_is_stretched_not_clipped() -> None:
    arr = np.array([[-1000, 0, 1000]], dtype=np.int32)
    out = np.asarray(to_8bit(Image.fromarray(arr, mode="I"))).ravel().tolist()
    assert out[0] == 0 and out[2] == 255 and 120 <= out[1] <= 135


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
