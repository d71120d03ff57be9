"""Content-addressed image store.

Graph state and checkpoints carry only image ids (the SHA-256 of the stored PNG bytes) and file paths; the
bytes live here. An image becomes a data URL only inside the node that sends it to a model
(`ImageStore.data_url`).

Every image that enters is decoded and checked first (format, dimensions, pixel budget), so a corrupt file,
a decompression bomb or a 20,000 x 20,000 image is refused with an error that names the input, before any
model sees it. Stored images are re-encoded as PNG so the same picture always gets the same id.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from PIL import Image, UnidentifiedImageError

if TYPE_CHECKING:
    import numpy.typing as npt

from tools.env import env_int, env_str
from tools.errors import UnveilError
from tools.safe_files import StorageError, UnreadableFileError, UnsafePathError, atomic_write, open_regular
from tools.safe_files import pid_alive as pid_alive  # re-exported: the run layer's scratch cleanup uses it
from tools.safe_files import remove_dead_temp_files as remove_dead_temp_files

# Pillow's own bomb guard warns at ~89 Mpx and raises at twice that; we refuse far earlier because
# nothing in Unveil needs more than a few megapixels.
DEFAULT_MAX_PIXELS = 6_000 * 6_000
DEFAULT_MAX_BYTES = 50 * 1024 * 1024


class ImageInputError(UnveilError, ValueError):
    """An image could not be accepted; the message names the input and the reason."""


class ImageStoreError(StorageError):
    """The image store cannot be written (a full disk, no permission, a link planted in it): no sample can go on,
    so a batch stops with this one error, which names the store, instead of failing every sample."""


@dataclass(frozen=True)
class StoredImage:
    """An image in the store: its id (content hash), path, and size in pixels."""

    id: str
    path: str
    width: int
    height: int


def default_store_root() -> Path:
    """The store folder: `$UNVEIL_IMAGE_STORE`, else `~/.cache/unveil/images`."""
    env = env_str("UNVEIL_IMAGE_STORE")
    return Path(env) if env else Path.home() / ".cache" / "unveil" / "images"


# The formats Pillow may open from untrusted input: raster formats Pillow decodes itself, the ones the project reads
# and tests (tests/tools/test_image_modes.py). Any other plugin never sees the bytes, whatever the file is called: EPS
# and PostScript would be handed to Ghostscript, and every extra parser is more attack surface.
ALLOWED_FORMATS = (
    "PNG",
    "JPEG",
    "WEBP",
    "GIF",
    "BMP",
    "TIFF",
    "PPM",
    "ICO",
    "TGA",
    "JPEG2000",
    "IM",
    "SGI",
    "PCX",
    "QOI",
)


def open_image(fp: str | os.PathLike[str] | IO[bytes], *, name: str) -> Image.Image:
    """`Image.open` limited to `ALLOWED_FORMATS` (only their plugins are tried), the one way untrusted image bytes
    are opened; an image in any other format is an `ImageInputError` naming the input."""
    try:
        return Image.open(fp, formats=ALLOWED_FORMATS)
    except UnidentifiedImageError as exc:
        raise ImageInputError(
            f"image {name!r}: not a readable image in an allowed format ({', '.join(ALLOWED_FORMATS)})"
        ) from exc


# What a pixel costs while an image of each mode is decoded and made 8-bit (the decoded image, the copies its
# conversion makes, the result): the peak resident memory measured by bench/image_decode_memory.py at 36 Mpx,
# rounded up (docs/reliability.md has the numbers); other modes cost `_OTHER_MODE_BYTES`. An image whose decode
# would cost more than `DECODE_BUDGET_BYTES` is refused from its header, before any pixel is decoded.
DECODE_BYTES_PER_PIXEL = {
    "1": 2,
    "L": 2,
    "P": 18,  # with transparency it is flattened over white as RGBA is
    "RGB": 5,
    "I;16": 7,
    "I;16B": 7,
    "I;16L": 7,
    "I;16N": 7,
    "I;16S": 7,
    "I": 13,
    "F": 13,
    "LA": 21,
    "PA": 21,
    "RGBA": 21,
    "CMYK": 9,
    "YCbCr": 9,
    "LAB": 9,
    "HSV": 9,
}
_OTHER_MODE_BYTES = 21
DECODE_BUDGET_BYTES = 1024 * 1024 * 1024
MAX_DECODES_ENV = "UNVEIL_MAX_DECODES"
DEFAULT_MAX_DECODES = 2
_SLOTS_LOCK = threading.Lock()
_DECODE_SLOTS: list[threading.BoundedSemaphore] = []  # made on first use, sized by UNVEIL_MAX_DECODES


def decode_slots() -> threading.BoundedSemaphore:
    """The process-wide limit on images decoded at once (`UNVEIL_MAX_DECODES`, default 2): each decode may take up
    to `DECODE_BUDGET_BYTES`, so a batch at any concurrency holds at most this many such budgets."""
    with _SLOTS_LOCK:
        if not _DECODE_SLOTS:
            slots = env_int(MAX_DECODES_ENV, DEFAULT_MAX_DECODES, minimum=1) or DEFAULT_MAX_DECODES
            _DECODE_SLOTS.append(threading.BoundedSemaphore(slots))
        return _DECODE_SLOTS[0]


def decode_cost(mode: str, width: int, height: int) -> int:
    """The bytes decoding an image of this mode and size costs at its peak (see `DECODE_BYTES_PER_PIXEL`)."""
    return width * height * DECODE_BYTES_PER_PIXEL.get(mode, _OTHER_MODE_BYTES)


def _probe(data: bytes, name: str, max_pixels: int) -> None:
    """Refuse from the header alone (before any pixel is decoded) an image over the pixel limit or the memory
    budget of its mode, then let Pillow verify the file."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        probe = open_image(io.BytesIO(data), name=name)
        width, height = probe.size
        if width * height > max_pixels:
            raise ImageInputError(f"image {name!r}: {width}x{height} pixels is over the limit of {max_pixels} pixels")
        cost = decode_cost(probe.mode, width, height)
        if cost > DECODE_BUDGET_BYTES:
            raise ImageInputError(
                f"image {name!r}: decoding {width}x{height} pixels of mode {probe.mode} would take about "
                f"{cost // 2**20} MiB, over the {DECODE_BUDGET_BYTES // 2**20} MiB budget of one image"
            )
        probe.verify()


def decode_image(data: bytes, *, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Decode and validate image bytes, refusing corrupt data, bombs and oversized images.

    `name` identifies the input in error messages (a path, URL or field name). At most `decode_slots()` images
    are decoded at once in the process, whatever the batch's concurrency (the rest wait for a slot).
    """
    if not data:
        raise ImageInputError(f"image {name!r}: empty file")
    if len(data) > DEFAULT_MAX_BYTES:
        raise ImageInputError(f"image {name!r}: {len(data)} bytes is over the {DEFAULT_MAX_BYTES}-byte limit")
    with decode_slots():
        try:
            _probe(data, name, max_pixels)
            image = open_image(io.BytesIO(data), name=name)
            image.load()
        except ImageInputError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageInputError(f"image {name!r}: refused as a decompression bomb ({exc})") from exc
        except Exception as exc:  # PIL raises many types for corrupt data
            raise ImageInputError(f"image {name!r}: not a readable image ({type(exc).__name__}: {exc})") from exc
        return to_8bit(image)


# Pillow's high-bit-depth grey modes. 'I' is what 16-bit PGM/PPM files (and 32-bit TIFFs) open as.
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I;16S", "I;16BS", "I;16LS")


# Pixels converted at a time: a block of float64 values is 2 MiB, whatever the image's size.
_BLOCK_PIXELS = 1 << 18


def _finite_range(flat: npt.NDArray[Any]) -> tuple[float, float]:
    """The smallest and largest finite value of a flat array, read in blocks (integers have no NaN: no copy)."""
    import numpy as np

    if flat.size == 0:
        return 0.0, 0.0
    if flat.dtype.kind in "iu":
        return float(flat.min()), float(flat.max())
    lo, hi = np.inf, -np.inf
    for start in range(0, flat.size, _BLOCK_PIXELS):
        block = flat[start : start + _BLOCK_PIXELS]
        finite = block[np.isfinite(block)]
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
    return (lo, hi) if lo <= hi else (0.0, 0.0)


def _grey_to_l(image: Image.Image) -> Image.Image:
    """A high-bit-depth grey image ('I;16*', 'I', 'F') as 8-bit 'L', scaled by the range its mode encodes.

    Pillow's own `convert("L")` clips instead of scaling (a 16-bit mid-grey of 32768 becomes white).
    16-bit and 'I' data are read as 0..65535; 'F' as 0..1 when it lies there (the usual float convention),
    else as 0..255 when it lies there; anything outside those ranges (negative or 32-bit values) is stretched
    from its own minimum to maximum so that the picture stays visible.

    Memory: the values in their own type (2 or 4 bytes a pixel) and the 8-bit result, converted in blocks of
    `_BLOCK_PIXELS`; float64 copies of the whole image (1.5 GB for a 36-Mpx 16-bit PNG) are never made.
    """
    import numpy as np

    arr = np.asarray(image)
    flat = arr.reshape(-1)
    lo, hi = _finite_range(flat)
    if image.mode == "F" and lo >= 0.0 and hi <= 1.0:
        offset, factor = 0.0, 255.0
    elif image.mode == "F" and lo >= 0.0 and hi <= 255.0:
        offset, factor = 0.0, 1.0
    elif lo >= 0.0 and hi <= 65535.0:
        offset, factor = 0.0, 255.0 / 65535.0
    else:
        offset, factor = lo, (255.0 / (hi - lo) if hi > lo else 0.0)
    out = np.empty(flat.size, dtype=np.uint8)
    for start in range(0, flat.size, _BLOCK_PIXELS):
        block = flat[start : start + _BLOCK_PIXELS].astype(np.float64)
        scaled = (block - offset) * factor if offset else block * factor
        np.nan_to_num(scaled, copy=False, nan=0.0, posinf=255.0, neginf=0.0)
        out[start : start + _BLOCK_PIXELS] = np.clip(np.rint(scaled), 0, 255)
    return Image.fromarray(out.reshape(arr.shape), mode="L")


def _flatten(image: Image.Image) -> Image.Image:
    """An image with transparency as a viewer shows it: composited over white, as RGB.

    Dropping the alpha channel instead would show models and scorers the colours hidden under transparent
    pixels, which no human reviewer sees.
    """
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def to_8bit(image: Image.Image) -> Image.Image:
    """Any image Pillow opens, as 8-bit 'L' (grey) or 'RGB' with its visible content intact.

    High-bit-depth grey is scaled (not clipped), transparency is flattened over white, palettes are expanded,
    bilevel becomes grey, and CMYK, YCbCr, LAB and HSV are converted to RGB colour.
    """
    mode = image.mode
    if mode in ("L", "RGB") and "transparency" not in image.info:
        return image
    if mode in _SIXTEEN_BIT or mode in ("I", "F"):
        return _grey_to_l(image)
    if mode == "1":
        return image.convert("L")
    if mode in ("LA", "La", "PA", "RGBA", "RGBa") or "transparency" in image.info:
        return _flatten(image)
    if mode == "LAB":
        from PIL import ImageCms

        lab, srgb = ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB")
        lab_to_srgb = ImageCms.buildTransform(lab, srgb, "LAB", "RGB")
        converted = ImageCms.applyTransform(image, lab_to_srgb)
        assert converted is not None  # None only when transforming in place
        return converted
    return image.convert("RGB")


def read_file_capped(path: str | os.PathLike[str], limit: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of an image file, refusing one over `limit` bytes before reading it.

    The size is checked on the open file (no race with a file swapped after a `stat`), and the read itself is
    capped too, so a growing file or a device that lies about its size cannot make us read gigabytes.
    """
    try:
        # opened non-blocking, then checked: a FIFO at the path cannot hang the open itself
        fh = os.fdopen(open_regular(path, what="image"), "rb")
    except FileNotFoundError as exc:
        raise ImageInputError(f"image {str(path)!r}: file not found") from exc
    except UnreadableFileError as exc:
        # the message as an image error gives it: "image 'PATH': not a regular file"
        raise ImageInputError(str(exc).replace(" is not a regular file", ": not a regular file")) from exc
    except OSError as exc:
        raise ImageInputError(f"image {str(path)!r}: cannot be read ({exc.strerror})") from exc
    with fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ImageInputError(f"image {str(path)!r}: not a regular file")
        if st.st_size > limit:
            raise ImageInputError(f"image {str(path)!r}: {st.st_size} bytes is over the {limit}-byte limit")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ImageInputError(f"image {str(path)!r}: over the {limit}-byte limit")
    return data


class ImageStore:
    """A folder of PNG files named by the SHA-256 of their bytes."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, max_pixels: int = DEFAULT_MAX_PIXELS):
        # No filesystem work here: stores are looked up inside async nodes, and folders are made on first write.
        self.root = Path(root) if root is not None else default_store_root()
        self.max_pixels = max_pixels

    def path_for(self, image_id: str) -> Path:
        """Where an image id lives (two-level fan-out keeps folders small)."""
        if len(image_id) != 64 or any(c not in "0123456789abcdef" for c in image_id):
            raise ImageInputError(f"image id {image_id!r}: not a SHA-256 hex digest")
        return self.root / image_id[:2] / f"{image_id}.png"

    def put_pil(self, image: Image.Image) -> StoredImage:
        """Store a PIL image (re-encoded as PNG) and return its record; storing twice is a no-op."""
        image = to_8bit(image)
        buf = io.BytesIO()
        image.save(buf, format="PNG", optimize=False)
        return self._put_png(buf.getvalue(), image.width, image.height)

    def put_png(self, png: bytes, *, name: str) -> StoredImage:
        """Store PNG bytes made by another store (a render worker on another node) exactly as they are, so the
        image keeps the id it had where it was rendered; the bytes must decode as a PNG image."""
        if not png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise ImageInputError(f"image {name!r}: expected PNG bytes")
        image = decode_image(png, name=name, max_pixels=self.max_pixels)
        return self._put_png(png, image.width, image.height)

    def _put_png(self, png: bytes, width: int, height: int) -> StoredImage:
        image_id = hashlib.sha256(png).hexdigest()
        path = self.path_for(image_id)
        if not path.exists():
            # A new file renamed into place (see tools.safe_files): a killed process never leaves a half-written
            # image under a valid id, and a link planted in the store is never written through.
            try:
                atomic_write(self.root, Path(image_id[:2]) / f"{image_id}.png", png)
            except UnsafePathError as exc:
                raise ImageStoreError(f"image store {str(self.root)!r}: {exc}") from exc
            except OSError as exc:
                raise ImageStoreError(
                    f"image store {str(self.root)!r}: cannot write {path.name} "
                    f"({exc.strerror or type(exc).__name__}); free space or choose another store "
                    "(UNVEIL_IMAGE_STORE / image_store)"
                ) from exc
        return StoredImage(id=image_id, path=str(path), width=width, height=height)

    def put_bytes(self, data: bytes, *, name: str) -> StoredImage:
        """Validate encoded image bytes (PNG, JPEG, ...) and store them."""
        return self.put_pil(decode_image(data, name=name, max_pixels=self.max_pixels))

    def put_file(self, path: str | os.PathLike[str]) -> StoredImage:
        """Validate and store an image file, naming the path in any error."""
        return self.put_bytes(read_file_capped(path), name=str(path))

    def has(self, image_id: str) -> bool:
        """Whether the store holds this id."""
        return self.path_for(image_id).exists()

    def open(self, image_id: str) -> Image.Image:
        """Load a stored image."""
        path = self.path_for(image_id)
        if not path.exists():
            raise ImageInputError(f"image id {image_id!r}: not in the store at {self.root}")
        # the store holds only PNG files it wrote; read as every file is (regular, capped: a FIFO cannot hang it)
        with Image.open(io.BytesIO(read_file_capped(path)), formats=("PNG",)) as im:
            im.load()
            return im.copy()

    def read_bytes(self, image_id: str) -> bytes:
        """The stored PNG bytes of an id."""
        path = self.path_for(image_id)
        if not path.exists():
            raise ImageInputError(f"image id {image_id!r}: not in the store at {self.root}")
        return read_file_capped(path)

    def data_url(self, image_id: str) -> str:
        """A `data:image/png;base64,...` URL, built only where a model call needs it."""
        return "data:image/png;base64," + base64.b64encode(self.read_bytes(image_id)).decode("ascii")


_STORES: dict[str, ImageStore] = {}


def get_image_store(root: str | os.PathLike[str] | None = None) -> ImageStore:
    """A shared store per root folder (the default root when none is given)."""
    key = str(Path(root) if root is not None else default_store_root())
    if key not in _STORES:
        _STORES[key] = ImageStore(key)
    return _STORES[key]
