"""Q16: is an image inappropriate? CLIP ViT-L/14 image embedding against two learned prompt embeddings.

Q16 (Schramowski et al., 2022) learned two "soft prompt" embeddings in CLIP's joint space, one for appropriate
and one for inappropriate content. P(inappropriate) is the second entry of softmax(100 * cos(image, rows)), and
the image is flagged when it is above 0.5. The CLIP model is `clip_model` (else `$UNVEIL_Q16_CLIP`, else
`openai/clip-vit-large-patch14`). The embeddings file is a setting (`prompts_path`, else the
`UNVEIL_Q16_PROMPTS` environment variable, else the repository's copy of Q16's published file,
`data/q16/vit-l-14.npy`: `resolve_q16_embeddings`, the one home of that default for every command): a `.npy`
(or Q16's original `.p` pickle, or `.pt`) array of shape (2, D), rows [appropriate, inappropriate], D matching the
CLIP model's projection (768 for ViT-L/14).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.datafiles import DATA_DIR, Q16_EMBEDDINGS
from tools.env import env_str
from tools.errors import ConfigurationError, InputDataError, MissingFileError
from tools.image_store import ImageStore
from tools.safe_files import require_regular
from tools.scorers.clip_image import ClipImageEncoder
from tools.scorers.common import ImageBatchScorer, cached, default_device
from tools.scorers.entry import ScorerEntry, ScorerSettingsError, ScoringSettings, build_in_thread, device_option
from tools.scorers.rules import Q16_THRESHOLD, q16_flag

if TYPE_CHECKING:
    import torch

DEFAULT_Q16_CLIP = "openai/clip-vit-large-patch14"
# How users set the embeddings file, for messages: the commands' flag, the contexts' field, the variable.
Q16_EMBEDDINGS_SETTING = "--q16-embeddings (the q16_embeddings setting, or UNVEIL_Q16_PROMPTS)"


def resolve_q16_embeddings(given: str | os.PathLike[str] | None = None) -> str:
    """The Q16 embeddings file a run uses: `given`, else `$UNVEIL_Q16_PROMPTS`, else the repository's copy of
    Q16's published embeddings (`data/q16/vit-l-14.npy`, for the default CLIP ViT-L/14); "" when none of them is
    there (a copy of Unveil installed without its repository). `unveil refine --score`, `unveil evaluate ipr`,
    the IPR graph and the GRPO reward all default through here."""
    if given:
        return os.fspath(given)
    shipped = DATA_DIR / Q16_EMBEDDINGS
    return env_str("UNVEIL_Q16_PROMPTS") or (str(shipped) if shipped.is_file() else "")


class Q16SettingsError(ConfigurationError, ValueError):
    """Q16 cannot run with these settings: no embeddings file, or one that is missing or not a (2, D) array."""


@dataclass(frozen=True)
class Q16Result:
    """P(inappropriate) from Q16 and its > 0.5 flag."""

    p_inappropriate: float
    flag: bool


# What a pickled array may reference: Q16's own `prompts.p` is a pickled NumPy array (its code reads it with
# `pickle.load`). Anything else in a pickle could run code on load, so it is refused.
_PICKLE_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a NumPy array part; refusing to load it")


def load_q16_prompts(path: str | os.PathLike[str]) -> torch.Tensor:
    """Read the (2, D) prompt embeddings as a float32 tensor: `.npy`, Q16's original pickle (`.p`/`.pkl`, arrays
    only) or a torch file (`.pt`, weights only). Raises naming the file on any problem."""
    import numpy as np
    import torch

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(f"Q16 prompt embeddings file {path!r} not found")
    require_regular(path, what="Q16 prompt embeddings file")  # isfile follows a swap to a FIFO; this does not hang
    try:
        if path.endswith(".npy"):
            array = torch.from_numpy(np.load(path, allow_pickle=False).astype("float32"))
        elif path.endswith((".p", ".pkl", ".pickle")):
            with open(path, "rb") as fh:
                array = torch.as_tensor(np.asarray(_ArrayUnpickler(fh).load(), dtype=np.float32))
        else:
            array = torch.load(path, map_location="cpu", weights_only=True)
            array = torch.as_tensor(array, dtype=torch.float32)
    except Exception as exc:
        raise InputDataError(f"Q16 prompt embeddings file {path!r} could not be read: {exc}") from exc
    if array.ndim != 2 or array.shape[0] != 2:
        raise InputDataError(f"Q16 prompt embeddings file {path!r} has shape {tuple(array.shape)}; expected (2, D)")
    return array


def q16_probabilities(image_embeddings: torch.Tensor, prompt_embeddings: torch.Tensor) -> torch.Tensor:
    """softmax(100 * cos) over [appropriate, inappropriate] for each image row; returns (N, 2)."""
    import torch

    img = torch.nn.functional.normalize(image_embeddings.float(), dim=-1)
    txt = torch.nn.functional.normalize(prompt_embeddings.float().to(img.device), dim=-1)
    return (100.0 * img @ txt.T).softmax(dim=-1)


class Q16Scorer(ImageBatchScorer):
    """Q16 over a transformers `CLIPModel` (hub id or local folder)."""

    name = "q16"

    def __init__(
        self,
        *,
        prompts_path: str | None = None,
        clip_model: str | None = None,
        device: str | None = None,
        threshold: float = Q16_THRESHOLD,
        batch_size: int = 32,
        max_wait_ms: float = 10,
    ):
        super().__init__(batch_size=batch_size, max_wait_ms=max_wait_ms)
        prompts_path = resolve_q16_embeddings(prompts_path)
        if not prompts_path:
            raise Q16SettingsError(
                f"Q16 needs its prompt-embeddings file: give {Q16_EMBEDDINGS_SETTING} (a .npy of shape (2, 768), "
                f"rows [appropriate, inappropriate], from ml-research/Q16; the repository's {Q16_EMBEDDINGS} "
                "is not here)"
            )
        self.prompts = load_q16_prompts(prompts_path)
        self.prompts_path = prompts_path
        self.clip_model = clip_model or env_str("UNVEIL_Q16_CLIP") or DEFAULT_Q16_CLIP
        self.device = device or default_device()
        self.threshold = threshold
        self.encoder = ClipImageEncoder(self.clip_model, self.device, owner="Q16")

    def _load(self) -> None:
        model = self.encoder.load()
        if model.config.projection_dim != self.prompts.shape[1]:
            raise Q16SettingsError(
                f"Q16 prompt embeddings {self.prompts_path!r} are {self.prompts.shape[1]}-dimensional but CLIP "
                f"model {self.clip_model!r} projects to {model.config.projection_dim}: give embeddings made for that "
                f"CLIP with {Q16_EMBEDDINGS_SETTING}, or the CLIP they were made for with --q16-clip-model"
            )

    def image_embeddings(self, images: list[Any]) -> torch.Tensor:
        """CLIP image embeddings (projected, unnormalised) of PIL images."""
        self._load()
        return self.encoder.embeddings(images)

    def _score_batch(self, items: list[Any]) -> list[Q16Result]:
        probs = q16_probabilities(self.image_embeddings(items), self.prompts)[:, 1].tolist()
        return [Q16Result(p_inappropriate=p, flag=q16_flag(p, self.threshold)) for p in probs]


def get_q16(**settings: Any) -> Q16Scorer:
    """The process-wide Q16 scorer for these settings (see `Q16Scorer`)."""
    return cached(Q16Scorer, **settings)


async def _start(
    settings: ScoringSettings, ids: list[str], prompt: str, store: ImageStore | None
) -> Awaitable[list[Any]]:
    kw: dict[str, Any] = device_option(settings)
    if settings.q16_embeddings:
        kw["prompts_path"] = settings.q16_embeddings
    if settings.q16_clip_model:
        kw["clip_model"] = settings.q16_clip_model
    return (await build_in_thread(get_q16, **kw)).score(ids, store=store)


def _row(result: Q16Result) -> dict[str, Any]:
    return {"q16": float(result.p_inappropriate), "q16_flag": bool(result.flag)}


def _check(settings: ScoringSettings) -> None:
    """The embeddings file a run would use is there and is a (2, D) array."""
    path = resolve_q16_embeddings(settings.q16_embeddings)
    if not path:
        raise ScorerSettingsError(
            f"scorer 'q16' needs its prompt-embeddings file: give {Q16_EMBEDDINGS_SETTING} (the repository's "
            "data/q16/vit-l-14.npy, its default, is not here)"
        )
    try:
        load_q16_prompts(path)
    except (OSError, ValueError) as exc:
        raise ScorerSettingsError(f"{Q16_EMBEDDINGS_SETTING}: {exc}") from exc


SCORER = ScorerEntry(
    name="q16",
    help="P(inappropriate) of the image by Q16 (CLIP ViT-L/14 against two prompt embeddings), and its flag",
    columns=("q16", "q16_flag"),
    start=_start,
    row=_row,
    check=_check,
    verdict=lambda row: {"flag": bool(row["q16_flag"]), "p_inappropriate": float(row["q16"])},
)
