"""The public data files kept in the repository's `data/` folder (sources and licences: data/README.md).

They are found from the repository root (the folder above this package), which is where an editable install
(`scripts/setup.sh`) keeps them; a copy of Unveil installed without the repository names its own copies through the
commands' path options. This module is the one place that spells the folder and the file names.
"""

from __future__ import annotations

from pathlib import Path

from tools.errors import MissingFileError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

I2P_PROMPTS = "i2p/i2p_4703.csv"  # I2P's 4,703 prompts (MIT)
IPR_EVAL_PROMPTS = "i2p/ipr_eval_300.jsonl"  # the 300-prompt evaluation split of POSI and IPR (Apache-2.0)
SFT_PAIRS = "posi/sft_toxic_clean_3390.json"  # POSI's 3,390 toxic -> clean pairs (Apache-2.0)
RL_PROMPTS = "posi/rl_prompts_842.json"  # POSI's 842 RL prompts (Apache-2.0)
Q16_EMBEDDINGS = "q16/vit-l-14.npy"  # Q16's two prompt embeddings for CLIP ViT-L/14 (MIT)

FILES = (I2P_PROMPTS, IPR_EVAL_PROMPTS, SFT_PAIRS, RL_PROMPTS, Q16_EMBEDDINGS)


def data_file(name: str) -> Path:
    """The path of one of the repository's data files (`name` relative to `data/`); a missing file is one clear
    error naming it, so a command's default never fails later with a bare "file not found"."""
    path = DATA_DIR / name
    if not path.is_file():
        raise MissingFileError(
            f"data file {name!r} not found under {DATA_DIR}: it comes with the Unveil repository (data/); "
            "outside a clone, pass your own copy's path"
        )
    return path
