"""Build the tiny random-weight Stable Diffusion folder the Studio examples render with (32x32 noise, a few MB).

    python examples/studio/make_tiny_generator.py [FOLDER]   # default: examples/studio/tiny-sd

It needs the `t2i` extra and no network: the weights are random and the tokenizer is built locally (the tests'
builder, `tests/tiny.py`). The images show nothing; the point is a generator that runs offline in seconds, so the
`ipr` and `ctd` graphs can be tried end to end before a real model is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    """Build the folder (default `examples/studio/tiny-sd`) and print its generator spec."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny import build_tiny_sd

    folder = Path(argv[0]) if argv else ROOT / "examples" / "studio" / "tiny-sd"
    print("diffusers:" + build_tiny_sd(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
