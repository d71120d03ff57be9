"""Conformance suite of the text-to-image generator registry (`tools.t2i.registry.KINDS`): every registered kind
parses its spec, refuses an unknown option and a parameter by name, and renders offline (the tiny random-weight SD
pipeline, or a fake OpenAI client) into stored images of the requested count and size. A new kind fails here, by
name, until it has an offline recipe in `RECIPES`."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from PIL import Image

from tests.tiny import build_tiny_sd
from tools.image_store import ImageStore, get_image_store
from tools.t2i import GenerationRequest, ImageGenerator, UnsupportedOptionError, get_generator
from tools.t2i.options import DIFFUSERS_OPTIONS, OPENAI_OPTIONS
from tools.t2i.registry import KINDS, parse_spec


class _FakeImages:
    """The OpenAI client's `images` endpoint, answering each request with `n` 8x8 PNGs."""

    async def generate(self, **kwargs: Any) -> SimpleNamespace:
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (10, 20, 30)).save(buf, format="PNG")
        data = base64.b64encode(buf.getvalue()).decode()
        return SimpleNamespace(data=[SimpleNamespace(b64_json=data) for _ in range(kwargs.get("n", 1))])


# kind -> (tiny SD folder, ESD UNet weights) -> (spec, options): how the kind is built offline. A new kind adds one.
Recipe = Callable[[str, Path], tuple[str, dict[str, Any]]]
RECIPES: dict[str, Recipe] = {
    "diffusers": lambda sd, unet: (f"diffusers:{sd}", {}),
    "sd-np": lambda sd, unet: (f"sd-np:{sd}", {}),
    "esd": lambda sd, unet: (f"esd:{sd}?unet={unet}", {}),
    "openai": lambda sd, unet: ("openai:dall-e-3", {"client": SimpleNamespace(images=_FakeImages())}),
    **{k: (lambda sd, unet, k=k: (f"{k}:{sd}", {})) for k in KINDS if k.startswith("sld-")},
}
# The options of the other backend: each kind refuses them by name.
FOREIGN = {
    kind: sorted(DIFFUSERS_OPTIONS - OPENAI_OPTIONS if kind == "openai" else OPENAI_OPTIONS - DIFFUSERS_OPTIONS)
    for kind in KINDS
}


@pytest.fixture(scope="module")
def sd_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_tiny_sd(tmp_path_factory.mktemp("tiny-sd"))


@pytest.fixture(scope="module")
def unet_file(sd_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = get_generator(f"diffusers:{sd_dir}")
    path = tmp_path_factory.mktemp("esd") / "esd-unet.pt"
    torch.save(base.pipeline.unet.state_dict(), path)  # type: ignore[attr-defined]
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ImageStore:
    return get_image_store(tmp_path_factory.mktemp("store"))


def _recipe(kind: str) -> Recipe:
    if kind not in RECIPES:
        pytest.fail(f"generator kind {kind!r} has no offline recipe: add one to RECIPES in {Path(__file__).name}")
    return RECIPES[kind]


def test_every_registered_kind_has_a_recipe() -> None:
    assert not set(KINDS) ^ set(RECIPES), "RECIPES and the registry list different kinds"


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_parses_its_spec_and_refuses_one_without_a_model(kind: str) -> None:
    assert parse_spec(f"{kind}:org/model") == (kind, "org/model", {})
    assert parse_spec(f"{kind}:org/model?accel=eager")[2] == {"accel": "eager"}
    with pytest.raises(UnsupportedOptionError, match="names no model"):
        parse_spec(f"{kind}:")


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_refuses_unknown_and_foreign_options_by_name(kind: str, tmp_path: Path) -> None:
    spec, options = _recipe(kind)(str(tmp_path / "never-loaded"), tmp_path / "unet.pt")
    for option in ["no_such_option", *FOREIGN[kind]]:
        with pytest.raises(UnsupportedOptionError, match=option):
            get_generator(spec, **{**options, option: 1})  # type: ignore[misc]
    sep = "&" if "?" in spec else "?"
    with pytest.raises(UnsupportedOptionError, match="'\\?' parameters" if kind == "openai" else "no_such_param"):
        get_generator(f"{spec}{sep}no_such_param=1", **options)


@pytest.mark.slow  # a tiny SD render per kind: about 10 s each on 2 cores
@pytest.mark.parametrize("kind", KINDS)
async def test_a_kind_renders_offline_into_stored_images(
    kind: str, sd_dir: str, unet_file: Path, store: ImageStore
) -> None:
    spec, options = _recipe(kind)(sd_dir, unet_file)
    generator = get_generator(spec, store=store, **options)
    assert isinstance(generator, ImageGenerator)
    request = GenerationRequest(prompt="a lighthouse at dusk", width=32, height=32, steps=2, num_images=2, seed=3)
    ids = await generator.generate(request)
    assert isinstance(ids, list) and len(ids) == 2 and all(isinstance(i, str) and store.has(i) for i in ids)
    sizes = {store.open(i).size for i in ids}
    assert sizes == ({(8, 8)} if kind == "openai" else {(32, 32)})  # the fake client's PNGs; else the request's
