"""Context validation (graphs/context.py) and the image-folder guard of the detection graphs, in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from graphs.context import ContextError, check_model_spec
from graphs.ctd import CtdContext
from graphs.ingest import SampleInputError, ingest_pair
from graphs.ipr import IPRContext
from graphs.tag import TagContext
from graphs.vanilla import VanillaContext


def test_fields_are_coerced_to_their_types_and_null_means_the_default() -> None:
    ctx = TagContext(l_max="2", k_max=3.0, screen_pairs="true", association_types=None, model=None)  # type: ignore[arg-type]
    assert (ctx.l_max, ctx.k_max, ctx.screen_pairs) == (2, 3, True)
    assert len(ctx.association_types) == 9 and ctx.model == TagContext().model
    assert TagContext(association_types="similarity, cultural").association_types == ["similarity", "cultural"]  # type: ignore[arg-type]


def test_an_empty_string_means_the_default_as_null_does(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = TagContext(l_max="", model="", association_types="", roots_mode=" ", screen_pairs="")  # type: ignore[arg-type]
    default = TagContext()
    assert (ctx.l_max, ctx.model, ctx.association_types, ctx.roots_mode, ctx.screen_pairs) == (
        default.l_max,
        default.model,
        default.association_types,
        default.roots_mode,
        default.screen_pairs,
    )
    assert IPRContext(t_max="", generator="").generator == IPRContext().generator  # type: ignore[arg-type]
    assert CtdContext(review="", max_rounds="").review == CtdContext().review  # type: ignore[arg-type]
    # Like null, an empty field takes the environment's value where one is set.
    monkeypatch.setenv("UNVEIL_L_MAX", "3")
    assert TagContext(l_max="").l_max == 3 and TagContext(l_max=None).l_max == 3  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cls, settings, field",
    [
        (TagContext, {"l_max": 0}, "l_max"),
        (TagContext, {"k_max": -3}, "k_max"),
        (TagContext, {"children_per_parent": 0}, "children_per_parent"),
        (TagContext, {"l_max": "two"}, "l_max"),
        (TagContext, {"association_types": []}, "association_types"),
        (TagContext, {"association_types": ["similarity", "telepathic"]}, "telepathic"),
        (TagContext, {"association_types": [1, 2]}, "association_types"),
        (TagContext, {"bogus_setting": 1}, "bogus_setting"),
        (VanillaContext, {"image_roots": 5}, "image_roots"),
        (IPRContext, {"t_max": -1}, "t_max"),
        (IPRContext, {"on_refiner_error": "ignore"}, "on_refiner_error"),
        (IPRContext, {"scorers": ["q17"]}, "q17"),
        (CtdContext, {"review": "later"}, "review"),
        (CtdContext, {"max_rounds": 0}, "max_rounds"),
        (CtdContext, {"image_classifiers": ["nsfw"]}, "nsfw"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(cls: type, settings: dict, field: str) -> None:
    with pytest.raises(ContextError, match=field):
        cls(**settings)


def test_environment_overrides_are_validated_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNVEIL_L_MAX", "3")
    assert TagContext().l_max == 3 and TagContext(l_max=5).l_max == 5
    # A value the caller gives wins even when it equals the default (the CLI's --l-max 4 over UNVEIL_L_MAX).
    assert TagContext(l_max=4).l_max == 4 and TagContext(l_max=None).l_max == 3  # type: ignore[arg-type]
    monkeypatch.setenv("UNVEIL_L_MAX", "0")
    with pytest.raises(ContextError, match="l_max"):
        TagContext()


def test_model_specs_are_checked_for_script_files_and_api_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ContextError, match=r"pair_judge_model: the script file .*missing\.json"):
        check_model_spec("pair_judge_model", f"scripted:{tmp_path / 'missing.json'}?latency=0.1")
    with pytest.raises(ContextError, match="OPENAI_API_KEY"):
        check_model_spec("model", "openai:gpt-4.1-mini")
    check_model_spec("model", "openai:qwen@http://127.0.0.1:8000/v1")  # local servers need no key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_model_spec("model", "openai:gpt-4.1-mini")
    with pytest.raises(ContextError, match="model: model spec"):
        check_model_spec("model", "no-provider")
    # Only the roles a run calls are checked: an unused screen model does not fail a run without the screen.
    ctx = TagContext(model="openai:x@http://127.0.0.1:1/v1", screen_model=f"scripted:{tmp_path / 'none.json'}")
    ctx.check_environment()
    ctx.screen_pairs = True
    with pytest.raises(ContextError, match="screen_model"):
        ctx.check_environment()


async def test_image_paths_must_lie_in_the_store_or_an_allowed_root(tmp_path: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(data / "a.png")
    Image.new("RGB", (8, 8), (3, 2, 1)).save(other / "b.png")
    (data / "link.png").symlink_to(other / "b.png")
    store = str(tmp_path / "store")
    sample = {"text": "hello"}
    ok = await ingest_pair({**sample, "image": "a.png"}, store_root=store, base_dir=str(data), image_roots=[str(data)])
    assert Path(ok["image_path"]).is_file() and Path(store) in Path(ok["image_path"]).parents
    # A stored image can be named by its path in the store or its id, with no extra root.
    again = await ingest_pair({**sample, "image": ok["image_path"]}, store_root=store)
    assert again["image_id"] == ok["image_id"]
    assert (await ingest_pair({**sample, "image": ok["image_id"]}, store_root=store))["image_id"] == ok["image_id"]
    refused = [
        (str(other / "b.png"), None),  # absolute path elsewhere
        ("b.png", str(other)),  # a base_dir chosen by the caller grants nothing
        ("../other/b.png", str(data)),  # escapes the dataset folder
        ("link.png", str(data)),  # a link out of the allowed folder
        (str(other / "b.png"), str(other)),
        ("0" * 64, str(other)),  # an id-like name that is not in the store is a path like any other
    ]
    (other / ("0" * 64)).write_bytes((other / "b.png").read_bytes())
    for ref, base in refused:
        with pytest.raises(SampleInputError, match="image"):
            await ingest_pair({**sample, "image": ref}, store_root=store, base_dir=base, image_roots=[str(data)])


def test_studio_entries_refuse_unknown_setting_names_the_server_would_drop() -> None:
    import asyncio
    from types import SimpleNamespace

    from graphs import studio

    with pytest.raises(ContextError, match=r"l_maxx: unknown setting\(s\) of TagContext.*valid: .*l_max"):
        asyncio.run(studio.tag(SimpleNamespace(context={"model": "scripted:x.json", "l_maxx": 3})))  # type: ignore[arg-type]
    with pytest.raises(ContextError, match="refiner_modle"):
        asyncio.run(studio.ipr(SimpleNamespace(context={"refiner_modle": "x"})))  # type: ignore[arg-type]
    # Known names with good values pass, and a read without a run context too.
    empty = SimpleNamespace(context={"model": "", "vanilla_detector_model": None})
    assert asyncio.run(studio.vanilla(empty)) is not None  # type: ignore[arg-type]
    assert asyncio.run(studio.ctd(SimpleNamespace())) is not None  # type: ignore[arg-type]


def test_every_langgraph_json_entry_loads_and_is_handed_the_run_context() -> None:
    """`langgraph dev` resolves each factory's type hints to decide what to pass it: a hint that does not resolve
    (a type imported only for the type checker) would get the config instead of the runtime, and misspelt settings
    would pass unchecked."""
    import importlib
    import json

    utils = pytest.importorskip("langgraph_api._factory_utils")
    entries = json.loads((Path(__file__).resolve().parents[2] / "langgraph.json").read_text())["graphs"]
    assert set(entries) == {"tag", "vanilla", "guard", "ipr", "ctd"}
    for name, target in entries.items():
        path, attr = target.split(":")
        factory = getattr(importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", ".")), attr)
        hook = utils._classify_factory(factory)
        assert hook is not None and hook(config="CONFIG", runtime="RUNTIME") == {"runtime": "RUNTIME"}, name


def test_explicit_context_coerces_like_the_constructor(monkeypatch) -> None:
    """Explicit values win over the environment and go through the context's coercion (not raw setattr)."""
    from graphs.tag import TagContext
    from runner.context import explicit_context

    monkeypatch.setenv("UNVEIL_L_MAX", "2")
    ctx = explicit_context(TagContext, l_max="3", screen_pairs="yes")
    assert (ctx.l_max, ctx.screen_pairs) == (3, True)
    assert ctx == TagContext(l_max="3", screen_pairs="yes")
    # A default given explicitly still beats the environment.
    assert explicit_context(TagContext, l_max=4).l_max == 4
    assert TagContext().l_max == 2


def test_choices_have_one_spelling_the_literal_type() -> None:
    """A field's choices come from its Literal type: the same tuple the code checks against, refused with them."""
    import typing

    from graphs.context import ContextError, field_choices
    from graphs.tag import TagContext
    from graphs.tag.tree import PRUNE_MODES, Prune

    assert field_choices(typing.get_type_hints(TagContext)["prune"]) == PRUNE_MODES == typing.get_args(Prune)
    with pytest.raises(ContextError, match="per_layer, per_node"):
        TagContext(prune="per_tree")
