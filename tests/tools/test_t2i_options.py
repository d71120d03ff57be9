"""The typed generator options: the sets each backend accepts, their documentation, and how the registry passes
them on (no pipeline is loaded: generators load lazily)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.image_store import get_image_store
from tools.t2i import SAFETY_NEGATIVE_PROMPT, UnsupportedOptionError, get_generator
from tools.t2i.options import DIFFUSERS_OPTIONS, OPENAI_OPTIONS, DiffusersOptions, GeneratorOptions, OpenAIOptions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tools.md"


def test_each_backend_accepts_the_keys_of_its_typed_options_and_store() -> None:
    assert DIFFUSERS_OPTIONS == set(DiffusersOptions.__optional_keys__) | {"store"}
    assert OPENAI_OPTIONS == set(OpenAIOptions.__optional_keys__) | {"store"}
    assert set(GeneratorOptions.__optional_keys__) == (DIFFUSERS_OPTIONS | OPENAI_OPTIONS) - {"store"}
    assert not GeneratorOptions.__required_keys__


def test_the_docs_table_lists_exactly_the_diffusers_options() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### Options", 1)[1].split("OpenAI options:", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))
    assert documented == DIFFUSERS_OPTIONS


def test_negative_prompt_option_replaces_the_variants_own(tmp_path: Path) -> None:
    store = get_image_store(tmp_path / "store")
    model = str(tmp_path / "never-loaded")
    assert get_generator(f"sd-np:{model}", store=store, device="cpu").default_negative == SAFETY_NEGATIVE_PROMPT
    assert get_generator(f"sd-np:{model}", store=store, device="cpu", negative_prompt=None).default_negative is None
    own = get_generator(f"diffusers:{model}", store=store, device="cpu", negative_prompt="blurry")
    assert own.default_negative == "blurry"
    assert get_generator(f"diffusers:{model}", store=store, device="cpu").default_negative is None


def test_esd_renders_without_the_negative_prompt_by_default_as_the_papers_rows(tmp_path: Path) -> None:
    # IPR Table 5's Template-prompt column: ESD 0.70 beside SD 0.72 and SD-NP 0.44, so its ESD rows had no
    # negative prompt at inference; `np=1` is the named option that adds SD-NP's list.
    store = get_image_store(tmp_path / "store")
    model = str(tmp_path / "never-loaded")
    assert get_generator(f"esd:{model}?unet=w.pt", store=store, device="cpu").default_negative is None
    with_np = get_generator(f"esd:{model}?unet=w.pt&np=1", store=store, device="cpu")
    assert with_np.default_negative == SAFETY_NEGATIVE_PROMPT
    assert get_generator(f"esd:{model}?unet=w.pt&np=0", store=store, device="cpu").default_negative is None


def test_options_reach_the_backend_and_a_store_folder_is_opened(tmp_path: Path) -> None:
    model = str(tmp_path / "never-loaded")
    gen = get_generator(
        f"diffusers:{model}?accel=eager",
        store=str(tmp_path / "store"),
        device="cpu",
        dtype="fp32",
        max_batch=3,
        max_wait_ms=5,
        truncate_long_prompts=True,
    )
    assert (gen.device, gen.dtype, gen.max_batch, gen.max_wait_s) == ("cpu", "fp32", 3, 0.005)
    assert gen.truncate_long_prompts is True
    assert gen.fast_path.name == "eager"
    assert gen.store is get_image_store(tmp_path / "store")
    # The same spec, store and options give the process-wide generator back.
    again = get_generator(
        f"diffusers:{model}?accel=eager",
        store=str(tmp_path / "store"),
        device="cpu",
        dtype="fp32",
        max_batch=3,
        max_wait_ms=5,
        truncate_long_prompts=True,
    )
    assert again is gen


def test_an_option_of_another_backend_is_refused_with_the_supported_ones(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOptionError, match=r"option\(s\) quality .*supported: accel, device"):
        get_generator(f"diffusers:{tmp_path}", quality="hd")
    with pytest.raises(UnsupportedOptionError, match=r"option\(s\) max_batch .*supported: api_key, base_url"):
        get_generator("openai:dall-e-3", max_batch=2)
