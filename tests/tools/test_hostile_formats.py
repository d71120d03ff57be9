"""Untrusted image bytes are opened only by the plugins of an explicit allow-list: EPS (which Pillow hands to
Ghostscript) is refused before its plugin, or any plugin outside the list, looks at the bytes, whatever the file is
called. No Ghostscript is needed: the test records every plugin outside the list that is asked."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import EpsImagePlugin, Image

from tools.image_store import ALLOWED_FORMATS, ImageInputError, ImageStore, decode_image

EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n%%EndComments\n"
    b"0 0 moveto 16 16 lineto stroke\nshowpage\n%%EOF\n"
)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The formats outside the allow-list whose plugin was asked about some bytes (and Ghostscript runs)."""
    Image.init()
    seen: list[str] = []
    for fmt, (factory, accept) in list(Image.OPEN.items()):
        if fmt in ALLOWED_FORMATS:
            continue

        def spy_accept(prefix: bytes, _fmt: str = fmt, _accept=accept) -> object:
            seen.append(_fmt)
            return _accept(prefix) if _accept else True

        def spy_factory(*args: object, _fmt: str = fmt, _factory=factory) -> object:
            seen.append(_fmt)
            return _factory(*args)

        monkeypatch.setitem(Image.OPEN, fmt, (spy_factory, spy_accept))
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: seen.append("ghostscript"))
    yield seen


@pytest.mark.parametrize("name", ["a.eps", "a.png"])
def test_eps_is_refused_before_any_other_plugin_sees_it(tmp_path: Path, name: str, asked: list[str]) -> None:
    path = tmp_path / name
    path.write_bytes(EPS)
    with pytest.raises(ImageInputError, match=f"{name}.*not a readable image in an allowed format"):
        ImageStore(tmp_path / "store").put_file(path)
    assert asked == []


def test_eps_bytes_from_a_url_or_message_are_refused_the_same_way(asked: list[str]) -> None:
    from agents.providers.hf_vlm import HFModelError
    from agents.providers.hf_vlm import decode_image as message_image

    with pytest.raises(ImageInputError, match="allowed format"):
        decode_image(EPS, name="https://example.com/a.png")
    with pytest.raises(HFModelError, match="unreadable image"):
        message_image("data:image/png;base64," + base64.b64encode(EPS).decode())
    assert asked == []


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF"])
def test_allowed_formats_still_open(fmt: str, tmp_path: Path, asked: list[str]) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (5, 4), (200, 10, 10)).save(buf, format=fmt)
    path = tmp_path / "named.eps"  # the name does not matter: the bytes decide, within the list
    path.write_bytes(buf.getvalue())
    stored = ImageStore(tmp_path / "store").put_file(path)
    assert (stored.width, stored.height) == (5, 4)
    assert asked == []
