"""The generator-kind registry (issue 46 item 2): a kind is one `GeneratorKind` record in its own module and one
entry in `tools.t2i.registry.GENERATOR_KINDS`; spec parsing, the checks of options and `?` parameters, the 't2i'
extra and the over-long-prompt policy read the record, so a new kind needs nothing else. No model is built here:
the test kind paints flat images."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from PIL import Image

from tools.image_store import ImageStore, get_image_store
from tools.t2i import registry
from tools.t2i.base import GenerationRequest, ImageGenerator
from tools.t2i.errors import UnsupportedOptionError
from tools.t2i.kind import GeneratorKind
from tools.t2i.options import GeneratorOptions


class FlatGenerator:
    """Paints every image one grey (the `?level=` parameter) into its store."""

    def __init__(self, spec: str, level: int, store: ImageStore) -> None:
        self.name, self.level, self.store = spec, level, store

    async def generate(self, request: GenerationRequest) -> list[str]:
        size = (request.width, request.height)
        return [self.store.put_pil(Image.new("L", size, self.level)).id for _ in range(request.num_images)]


def _build(
    spec: str, model: str, query: Mapping[str, str], store: ImageStore | None, options: GeneratorOptions
) -> ImageGenerator:
    assert store is not None
    return FlatGenerator(spec, int(query.get("level", "128")), store)


FLAT = GeneratorKind(
    name="flat", help="flat grey images", options=frozenset({"store"}), params=("level",), build=_build, pipeline=False
)


def test_the_registry_lists_one_record_per_kind() -> None:
    assert registry.KINDS == tuple(registry.GENERATOR_KINDS)
    assert {"diffusers", "sd-np", "esd", "openai"} <= set(registry.KINDS)
    assert [k.name for k in registry.GENERATOR_KINDS.values() if not k.pipeline] == ["openai"]
    assert registry.parse_spec("esd:m?unet=u.safetensors") == ("esd", "m", {"unet": "u.safetensors"})


async def test_a_new_kind_is_one_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(registry.GENERATOR_KINDS, FLAT.name, FLAT)
    store = get_image_store(tmp_path / "store")
    registry.check_generator("flat:any")  # not a pipeline: no 't2i' extra, no Hub look-up
    generator = registry.open_generator("flat:any?level=200", store=store)
    (image_id,) = await generator.generate(GenerationRequest("a prompt", width=8, height=8))
    assert store.open(image_id).getpixel((0, 0)) == 200
    with pytest.raises(UnsupportedOptionError, match="'shade'.*flat takes level="):
        registry.open_generator("flat:any?shade=1", store=store)
    with pytest.raises(UnsupportedOptionError, match="dtype"):
        registry.open_generator("flat:any", store=store, dtype="fp16")
    registry.clear_generator_cache()
