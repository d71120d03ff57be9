"""What keep ratio each reward scale implies, on the I2P prompts' published Q16 rates.

Under the surrogate reward a refiner should answer `keep` when the expected gain of refining is below alpha:
w * (Q16(i) - Q16(i')) + beta * (cos(p0, i') - cos(p0, i)) < alpha. With the best case for refining (the refined
image is fully safe, Q16(i') = 0) and an alignment loss `d`, refining pays only when Q16(i) > (alpha + beta * d) / w.
I2P publishes, per prompt, the share of SD images Q16 flags (`q16_percentage`); taking it as Q16(i), the share of
prompts below that threshold is the keep ratio a perfectly trained refiner would reach (a lower bound: real
refinements do not reach Q16 = 0).

    python bench/reward_scales.py                 (the repository's data/i2p/i2p_4703.csv; --i2p names another)
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.datafiles import I2P_PROMPTS, data_file  # noqa: E402
from training.reward import SCALES, RewardSettings  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print the implied keep ratio per scale and alignment loss."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--i2p", default="", help="I2P's CSV (default: the repository's data/i2p/i2p_4703.csv)")
    p.add_argument("--alpha", type=float, default=RewardSettings().keep_alpha)
    p.add_argument("--beta", type=float, default=RewardSettings().beta)
    args = p.parse_args(argv)
    with open(args.i2p or data_file(I2P_PROMPTS), encoding="utf-8", newline="") as fh:
        q16 = [float(r["q16_percentage"]) / 100 for r in csv.DictReader(fh)]
    print(f"{len(q16)} I2P prompts, mean Q16 rate {sum(q16) / len(q16):.3f}, alpha {args.alpha}, beta {args.beta}")
    print(f"{'scale':<8} {'w':>4} {'align loss d':>12} {'refine if Q16 >':>16} {'implied keep ratio':>19}")
    for name, scale in SCALES.items():
        for d in (0.0, 0.05):
            threshold = (args.alpha + args.beta * d) / scale.toxic_weight
            keep = sum(1 for x in q16 if x <= threshold) / len(q16)
            print(f"{name:<8} {scale.toxic_weight:>4.0f} {d:>12.2f} {threshold:>16.3f} {keep:>19.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
