"""Build the tiny random-weight models the examples run offline with: the Stable Diffusion folder the Studio
examples render with (32x32 noise, a few MB), and a tiny CLIP and BLIP for the scorers (Q16, CLIP score, BLIP
score), so scoring runs offline too.

    python examples/studio/make_tiny_generator.py [FOLDER]   # default: examples/studio/tiny-sd
    python examples/studio/make_tiny_generator.py --no-scorers [FOLDER]   # the generator only

The scorers' models go beside FOLDER (`tiny-clip`, `tiny-blip`), and the script prints the flags and settings
that use them, then, on its last line, the generator spec. It needs the `t2i` extra (the CLIP score also the
`scores` extra) and no network: the weights are random and the tokenizers are built locally (the tests'
builders, `tests/tiny.py`). The images and scores mean nothing; the point is that the `ipr` and `ctd` graphs,
`unveil refine --score` and `unveil evaluate ipr` run end to end before a real model is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def scorer_models(parent: Path) -> list[str]:
    """Build the tiny CLIP and BLIP under `parent` and return the lines that say how to use them."""
    from tests.tiny import build_tiny_blip, build_tiny_clip

    clip, blip = build_tiny_clip(parent / "tiny-clip"), build_tiny_blip(parent / "tiny-blip")
    return [
        f"tiny CLIP (Q16 and the CLIP score; Q16 uses the repository's data/q16/vit-l-14.npy): {clip}",
        f"tiny BLIP (the BLIP score): {blip}",
        "offline scoring with them (random weights: the scores mean nothing, the pipeline runs):",
        f"  unveil refine flags: --score --scorers q16,clip,blip --q16-clip-model {clip} --clip-model {clip}",
        f"  unveil refine environment: UNVEIL_BLIP_MODEL={blip}",
        f"  unveil evaluate ipr flags: --q16-clip-model {clip} --blip-model {blip}",
        f'  Studio (the ipr graph\'s context): "score": true, "q16_clip_model": "{clip}", "clip_model": "{clip}", '
        f'"blip_model": "{blip}"',
    ]


def main(argv: list[str]) -> int:
    """Build the models (the generator in FOLDER, default `examples/studio/tiny-sd`), print how to use the
    scorers' models, and print the generator spec last."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny import build_tiny_sd

    scorers = "--no-scorers" not in argv
    args = [a for a in argv if a != "--no-scorers"]
    folder = Path(args[0]) if args else ROOT / "examples" / "studio" / "tiny-sd"
    spec = "diffusers:" + build_tiny_sd(folder)
    if scorers:
        try:
            print("\n".join(scorer_models(folder.resolve().parent)))
        except ImportError as exc:  # the CLIP folder's open_clip layout needs the `scores` extra
            print(f"no scorer models: {exc.name or exc} is missing (./scripts/setup.sh --with scores)")
        print("generator:")
    print(spec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
