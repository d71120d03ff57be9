"""The scorer registry (issue 46 item 2): a scorer is one `ScorerEntry` in its own module and one line in the
registry, and everything that scores reads the registry: a new entry is accepted by name, scores stored images
through the one entry point (and so through a distributed engine's seam), lands in score rows with exactly its
columns, and, when it judges an image alone, is one of CTD's single-modality classifiers. No model is built here:
the test scorer measures brightness."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tools.image_store import ImageStore, get_image_store
from tools.scorers.entry import ScorerEntry, ScorerEntryError, ScoringSettings
from tools.scorers.registry import ENTRIES, SCORERS, image_classifiers, register_scorer, unregister_scorer
from tools.scorers.score import SCORER_COLUMNS, check_names, score_images


async def _brightness(ids: list[str], store: ImageStore | None) -> list[float]:
    assert store is not None
    return [float(np.asarray(store.open(i).convert("L")).mean() / 255) for i in ids]


async def _start(
    settings: ScoringSettings, ids: list[str], prompt: str, store: ImageStore | None
) -> Awaitable[list[Any]]:
    return _brightness(ids, store)


BRIGHTNESS = ScorerEntry(
    name="brightness",
    help="mean grey level of the image",
    columns=("brightness", "brightness_flag"),
    start=_start,
    row=lambda b: {"brightness": b, "brightness_flag": b > 0.5},
    verdict=lambda row: {"flag": row["brightness_flag"]},
)


@pytest.fixture
def brightness() -> Iterator[ScorerEntry]:
    register_scorer(BRIGHTNESS)
    yield BRIGHTNESS
    unregister_scorer(BRIGHTNESS.name)


def test_the_registry_holds_one_entry_per_scorer_module() -> None:
    assert list(SCORERS) == [entry.name for entry in ENTRIES] == ["q16", "nudenet", "clip", "blip", "mhsc"]
    assert SCORER_COLUMNS == {name: entry.columns for name, entry in SCORERS.items()}
    assert image_classifiers() == ("q16", "nudenet")  # the ones with a verdict on an image alone


async def test_a_new_scorer_is_one_entry(brightness: ScorerEntry, tmp_path: Any) -> None:
    store = get_image_store(tmp_path / "store")
    white = store.put_pil(Image.new("RGB", (8, 8), "white")).id
    black = store.put_pil(Image.new("RGB", (8, 8), "black")).id
    check_names(["brightness"])
    rows = await score_images([white, black], "a prompt", ["brightness"], ScoringSettings(), store=store)
    assert rows == [{"brightness": 1.0, "brightness_flag": True}, {"brightness": 0.0, "brightness_flag": False}]
    assert "brightness" in image_classifiers()


async def test_ctd_classifiers_score_through_the_one_entry_point(brightness: ScorerEntry, tmp_path: Any) -> None:
    from graphs.ctd.classify import classifier_flags

    store = get_image_store(tmp_path / "store")
    white = store.put_pil(Image.new("RGB", (8, 8), "white")).id
    assert await classifier_flags(["brightness"], white, str(tmp_path / "store")) == {"brightness": {"flag": True}}


def test_an_entry_that_clashes_or_lacks_a_piece_is_refused_by_name(brightness: ScorerEntry) -> None:
    with pytest.raises(ScorerEntryError, match="'brightness' is registered already"):
        register_scorer(BRIGHTNESS)
    with pytest.raises(ScorerEntryError, match="'glare'.*q16_flag"):
        register_scorer(ScorerEntry("glare", "glare", ("q16_flag",), _start, dict))
    with pytest.raises(ScorerEntryError, match="'dull': missing columns"):
        register_scorer(ScorerEntry("dull", "dull", (), _start, dict))
