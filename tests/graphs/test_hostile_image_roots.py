"""The folders a sample's image may be read from are the server's setting, never a run's: a client of
`langgraph dev` (or any caller of a graph) cannot widen them through the context or the sample."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from PIL import Image

from graphs.context import ContextError
from graphs.ingest import SampleInputError, grant_image_roots, server_image_roots
from graphs.vanilla import VanillaContext
from graphs.vanilla import graph as vanilla_graph

ANSWER = {"vanilla_detector": [{"toxic": False, "category": "none", "reason": "calm"}] * 4}


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "secret.png"
    path.parent.mkdir()
    Image.new("RGB", (8, 8), (9, 9, 9)).save(path)
    return path


def test_image_roots_is_not_a_run_setting(write_script) -> None:
    with pytest.raises(ContextError, match="image_roots"):
        VanillaContext(model=write_script(ANSWER), image_roots=["/"])  # type: ignore[call-arg]


@pytest.mark.parametrize("store", ["/", "elsewhere"])
async def test_a_context_image_store_does_not_open_its_folder_for_reading(
    write_script, secret: Path, store: str
) -> None:
    root = "/" if store == "/" else str(secret.parent)
    ctx = VanillaContext(model=write_script(ANSWER), image_store=root)
    with pytest.raises(SampleInputError, match="outside the allowed image folders"):
        await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)


async def test_the_servers_own_setting_opens_a_folder(
    write_script, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = VanillaContext(model=write_script(ANSWER))
    with pytest.raises(SampleInputError, match="UNVEIL_IMAGE_ROOTS"):
        await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)
    monkeypatch.setenv("UNVEIL_IMAGE_ROOTS", f"/nonexistent-root:{secret.parent}")
    out = await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)
    assert out["image_id"] and out["toxic"] is False


async def test_an_in_process_grant_holds_for_its_block_only(write_script, secret: Path) -> None:
    ctx = VanillaContext(model=write_script(ANSWER))
    with grant_image_roots([secret.parent]):
        assert str(secret.parent) in server_image_roots()
        out = await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)
        assert out["image_id"]
    assert str(secret.parent) not in server_image_roots()
    with pytest.raises(SampleInputError, match="outside the allowed image folders"):
        await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)


async def test_a_grant_in_one_task_does_not_reach_a_concurrent_one(write_script, secret: Path) -> None:
    ctx = VanillaContext(model=write_script(ANSWER))
    started = asyncio.Event()
    release = asyncio.Event()

    async def granted() -> None:
        with grant_image_roots([secret.parent]):
            started.set()
            await release.wait()

    async def other() -> None:
        await started.wait()
        try:
            with pytest.raises(SampleInputError, match="outside the allowed image folders"):
                await vanilla_graph.ainvoke({"image": str(secret), "text": "hi"}, context=ctx)
        finally:
            release.set()

    await asyncio.gather(granted(), other())
