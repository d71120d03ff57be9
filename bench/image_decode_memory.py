"""Peak memory of decoding one image at the pixel limit, per mode, and of several decodes at once.

A 68 KB 16-bit PNG at the 36-Mpx limit cost 1.5 GB to decode when the grey conversion made float64 copies of the
whole image; four at `--concurrency 4` reached 5.3 GB. This bench builds such files (a flat picture compresses to a
few kB), decodes each with `tools.image_store.decode_image` in a fresh process and prints the rise of the process's
peak resident memory (`VmHWM`, reset through `/proc/self/clear_refs` just before) over its level before the
decode, and the peak of Python-tracked allocations (`tracemalloc`: NumPy's arrays, not Pillow's own buffers).
`--before` also runs the old whole-image float64 conversion of 16-bit grey for comparison. The numbers are the
basis of `tools.image_store.DECODE_BYTES_PER_PIXEL`.

    python bench/image_decode_memory.py                  # every mode, 6000 x 6000 (36 Mpx)
    python bench/image_decode_memory.py --modes 'I;16' --parallel 4 --before
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODES = ("I;16", "I", "F", "RGBA", "RGB", "L", "P", "CMYK")


def build(mode: str, side: int) -> bytes:
    """A flat image of `mode` at `side` x `side`, encoded as PNG (TIFF for the modes PNG cannot hold)."""
    from PIL import Image

    colours: dict[str, object] = {"I;16": 40000, "I": 40000, "F": 0.5, "RGBA": (10, 20, 30, 128), "P": 3}
    image = Image.new(mode, (side, side), colours.get(mode, 100))  # type: ignore[arg-type]
    if mode == "P":
        image.info["transparency"] = 3
    buf = io.BytesIO()
    if mode in ("I", "F", "CMYK"):  # modes PNG cannot hold
        image.save(buf, format="TIFF", compression="tiff_adobe_deflate")
    else:
        image.save(buf, format="PNG")
    return buf.getvalue()


CHILD = r"""
import json, sys, threading, tracemalloc
sys.path.insert(0, sys.argv[1])
from tools import image_store
data = open(sys.argv[2], "rb").read()
parallel, before = int(sys.argv[3]), sys.argv[4] == "1"

def old_grey_to_l(image):  # the conversion before issue 32: float64 copies of the whole image
    import numpy as np
    from PIL import Image
    arr = np.asarray(image).astype(np.float64)
    finite = arr[np.isfinite(arr)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    scaled = arr * (255.0 / 65535.0)
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), mode="L")

if before:
    image_store._grey_to_l = old_grey_to_l
import numpy  # imported before the baseline, as in a running batch
from PIL import Image
def status(key):  # kB, from the kernel's view of this process
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key))
try:  # reset the peak (VmHWM) to the current resident size, so the rise is the decode's alone
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
base = status("VmRSS:")
tracemalloc.start()
errors = []
def decode():
    try:
        image_store.decode_image(data, name="x", max_pixels=10**9)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=decode) for _ in range(parallel)]
for t in threads: t.start()
for t in threads: t.join()
peak = status("VmHWM:")
print(json.dumps({"rss_rise_mib": round((peak - base) / 1024, 1), "tracemalloc_peak_mib":
    round(tracemalloc.get_traced_memory()[1] / 2**20, 1), "slots": image_store.decode_slots()._initial_value,
    "errors": errors[:1]}))
"""


def measure(data: bytes, parallel: int, before: bool) -> dict[str, float]:
    """Decode `data` `parallel` times at once in a fresh process; its memory figures."""
    with tempfile.NamedTemporaryFile(suffix=".img") as fh:
        fh.write(data)
        fh.flush()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), fh.name, str(parallel), "1" if before else "0"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ},
        )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Print one JSON line per mode: file size, pixels, memory rise, and per pixel."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", type=int, default=6000, help="image width and height (default 6000: 36 Mpx)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated Pillow modes")
    parser.add_argument("--parallel", type=int, default=1, help="decodes started at once (threads)")
    parser.add_argument("--before", action="store_true", help="also run the old float64 grey conversion")
    args = parser.parse_args()
    pixels = args.side * args.side
    for mode in args.modes.split(","):
        data = build(mode, args.side)
        for before in (True, False) if args.before and mode in ("I;16", "I") else (False,):
            got = measure(data, args.parallel, before)
            row = {
                "mode": mode,
                "code": "before" if before else "now",
                "file_kib": round(len(data) / 1024, 1),
                "mpx": round(pixels / 1e6, 1),
                "parallel": args.parallel,
                **got,
                "rss_bytes_per_pixel": round(got["rss_rise_mib"] * 2**20 / pixels / args.parallel, 2),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
