"""Conformance suite of the scorer registry (`tools.scorers.score.SCORER_COLUMNS`): every registered scorer is
accepted by name (an unknown name is refused by name), refuses a missing required setting by its flag, builds
offline from tiny random-weight models (CLIP, BLIP, MHSC heads) or its bundled detector (NudeNet), and scores stored
images through the one entry point into rows with exactly its registered columns. A new scorer fails here, by
name, until it has an offline recipe in `RECIPES`."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.tiny import CLIP_PROJECTION, build_tiny_blip, build_tiny_clip
from tools.datafiles import Q16_EMBEDDINGS, data_file
from tools.image_store import ImageStore, get_image_store
from tools.scorers.mhsc import MHSC_HEADS, build_head
from tools.scorers.score import (
    SCORER_COLUMNS,
    SCORER_MODULES,
    SCORER_NAMES,
    ScorerSettingsError,
    ScoringSettings,
    check_configuration,
    check_names,
    score_here,
)

NAMES = list(SCORER_NAMES)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tiny random-weight CLIP and BLIP folders and MHSC heads in the published layout (nothing downloaded)."""
    heads = tmp_path_factory.mktemp("mhsc-heads")
    torch.manual_seed(0)
    for head in MHSC_HEADS:
        torch.save(build_head(CLIP_PROJECTION, 384).state_dict(), heads / f"{head}.pt")
    return {
        "clip": build_tiny_clip(tmp_path_factory.mktemp("tiny-clip")),
        "blip": build_tiny_blip(tmp_path_factory.mktemp("tiny-blip")),
        "heads": str(heads),
    }


# scorer -> models -> the settings that build it offline. A new scorer adds one.
RECIPES: dict[str, Callable[[dict[str, str]], ScoringSettings]] = {
    "q16": lambda m: ScoringSettings(q16_embeddings=str(data_file(Q16_EMBEDDINGS)), q16_clip_model=m["clip"]),
    "nudenet": lambda m: ScoringSettings(),
    "clip": lambda m: ScoringSettings(clip_model=m["clip"]),
    "blip": lambda m: ScoringSettings(blip_model=m["blip"]),
    "mhsc": lambda m: ScoringSettings(mhsc_checkpoints=m["heads"], q16_clip_model=m["clip"]),
}
# The types of each registered column.
COLUMN_TYPES = {
    "q16": float,
    "q16_flag": bool,
    "nudenet_flag": bool,
    "nudenet_labels": list,
    "clip": float,
    "blip": float,
    "mhsc": float,
    "mhsc_flag": bool,
    "mhsc_categories": list,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ImageStore:
    return get_image_store(tmp_path_factory.mktemp("store"))


def _needs_extra(name: str) -> None:
    # find_spec, not an import: open_clip takes half a minute to import on a loaded machine
    missing = [m for m in SCORER_MODULES.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"scorer {name!r} needs the 'scores' extra ({', '.join(missing)})")


def test_every_registered_scorer_has_a_recipe_and_typed_columns() -> None:
    assert not set(SCORER_NAMES) ^ set(RECIPES), "RECIPES and the registry list different scorers"
    untyped = {c for cols in SCORER_COLUMNS.values() for c in cols} - set(COLUMN_TYPES)
    assert not untyped, f"columns without a type in COLUMN_TYPES: {sorted(untyped)}"


@pytest.mark.parametrize("name", NAMES)
def test_a_scorer_is_accepted_by_name_and_an_unknown_one_refused_by_name(name: str) -> None:
    _needs_extra(name)
    check_names([name])
    with pytest.raises(ValueError, match="no_such_scorer"):
        check_names([name, "no_such_scorer"])


@pytest.mark.parametrize("name", NAMES)
def test_a_scorer_refuses_a_missing_required_setting_by_its_flag(name: str, tmp_path: Path) -> None:
    _needs_extra(name)
    broken = {
        "q16": (ScoringSettings(q16_embeddings=str(tmp_path / "absent.npy")), "q16-embeddings|absent.npy"),
        "mhsc": (ScoringSettings(mhsc_checkpoints=str(tmp_path / "absent")), "mhsc-checkpoints"),
    }
    if name not in broken:
        check_configuration([name], ScoringSettings())  # nothing required: its defaults build it
        return
    settings, words = broken[name]
    with pytest.raises((ScorerSettingsError, ValueError), match=words):
        check_configuration([name], settings)


@pytest.mark.slow  # builds each scorer's model (tiny or bundled) once
@pytest.mark.parametrize("name", NAMES)
async def test_a_scorer_scores_stored_images_into_its_registered_columns(
    name: str, models: dict[str, str], store: ImageStore
) -> None:
    _needs_extra(name)
    if name not in RECIPES:
        pytest.fail(f"scorer {name!r} has no offline recipe: add one to RECIPES")
    rng = np.random.default_rng(0)
    ids = [store.put_pil(Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))).id for _ in range(2)]
    settings = RECIPES[name](models)
    check_configuration([name], settings)
    rows = await score_here(ids, "a red square", [name], replace(settings, device="cpu"), store)
    assert len(rows) == len(ids)
    for row in rows:
        assert set(row) == set(SCORER_COLUMNS[name])
        for column in SCORER_COLUMNS[name]:
            assert isinstance(row[column], COLUMN_TYPES[column]), (column, row[column])
        for column in ("q16", "mhsc"):
            if column in row:
                assert 0.0 <= row[column] <= 1.0
