"""The content-addressed image store and image input checks."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from tools.image_input import check_url, load_image, resolve_path
from tools.image_store import ImageInputError, ImageStore


def png_bytes(color: str = "red", size: tuple[int, int] = (16, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def huge_png_header(width: int, height: int) -> bytes:
    """A PNG that claims huge dimensions (a decompression bomb's header) with a tiny body."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    )


def test_same_image_same_id_and_data_url(tmp_path: Path) -> None:
    store = ImageStore(tmp_path)
    a = store.put_bytes(png_bytes(), name="a")
    b = store.put_pil(Image.new("RGB", (16, 16), "red"))
    assert a.id == b.id and Path(a.path).is_file()
    assert store.data_url(a.id).startswith("data:image/png;base64,")
    assert store.open(a.id).size == (16, 16)
    assert store.put_bytes(png_bytes("blue"), name="b").id != a.id


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n" + b"garbage" * 10, "not a readable image"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 50, "not a readable image"),
        (huge_png_header(20_000, 20_000), "over the limit|decompression bomb"),
        (huge_png_header(100_000, 100_000), "over the limit|decompression bomb"),
    ],
    ids=["empty", "corrupt-png", "corrupt-jpeg", "20k-square", "bomb"],
)
def test_bad_images_are_refused_with_the_input_named(tmp_path: Path, data: bytes, match: str) -> None:
    with pytest.raises(ImageInputError, match=match) as err:
        ImageStore(tmp_path).put_bytes(data, name="sample-7.image")
    assert "sample-7.image" in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ImageInputError, match="nope.png.*not found"):
        ImageStore(tmp_path).put_file(tmp_path / "nope.png")


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/a.png",
        "gopher://x/",
        "http://127.0.0.1/a.png",
        "http://localhost:8080/a.png",
        "http://10.0.0.1/a.png",
        "http://192.168.1.1/a.png",
        "http://[::1]/a.png",
        "http://169.254.169.254/latest",
    ],
)
def test_unsafe_urls_are_refused(url: str) -> None:
    with pytest.raises(ImageInputError):
        check_url(url)


async def test_path_may_not_escape_the_dataset_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "secret.png").write_bytes(png_bytes())
    with pytest.raises(ImageInputError, match="escapes the dataset folder"):
        resolve_path("../secret.png", data)
    (data / "ok.png").write_bytes(png_bytes())
    stored = await load_image("ok.png", ImageStore(tmp_path / "store"), base_dir=data)
    assert Path(stored.path).is_file()
    with pytest.raises(ImageInputError, match="scheme"):
        await load_image("file:///etc/hosts", ImageStore(tmp_path / "store"))
