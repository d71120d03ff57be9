"""The compiled path's warm-up (`tools.t2i.warmup`): every bucket compiled before the first request, nothing
compiled after it for any batch the buckets cover (a shape outside them is compiled, said loudly and counted),
concurrent warm-ups taking different shapes first, and the compiled artefacts shared through a cluster folder.

No GPU here: the UNet of a tiny pipeline is compiled by Dynamo with its `eager` backend (the Inductor stand-in), so
Dynamo's graph counts are real and the images are the eager path's; a UNet without attention layers, which Dynamo
traces several times faster and which counts its shapes and graphs the same."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.compile_artefacts import artefact_file
from tests.tiny import TINY_IMAGE_SIZE, build_tiny_sd, build_tiny_sd_without_attention
from tools.t2i.fast import PRESETS, compile_static
from tools.t2i.warmup import (
    CompileSettings,
    WarmShape,
    save_shared_artefacts,
    shape_lock,
    warm_shapes,
    warm_up,
)

SIZE = TINY_IMAGE_SIZE


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """A private compile cache folder (its lock files) and the tiny sizes as the warm-up's."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("UNVEIL_T2I_BUCKETS", "1,2")
    monkeypatch.setenv("UNVEIL_T2I_WARMUP_SIZES", f"{SIZE}x{SIZE}")
    monkeypatch.delenv("UNVEIL_T2I_WARMUP", raising=False)
    monkeypatch.delenv("UNVEIL_COMPILE_SHARED", raising=False)
    return tmp_path


def _shape(rows: int) -> WarmShape:
    return WarmShape(rows, SIZE, SIZE, (("steps", 2),))


# Artefact files in torch's own format (a warm-up checks every entry before loading): one entry each.
BUCKET_1, BUCKET_2 = (
    artefact_file(("autotune", "b1/bucket1.best_config", b"1")),
    artefact_file(("autotune", "b2/bucket2.best_config", b"2")),
)
STALE, GOOD = artefact_file(("autotune", "st/stale", b"s")), artefact_file(("autotune", "go/good", b"g"))


def test_a_warm_up_takes_the_shapes_no_other_process_holds_first(cache_env):
    """Two warm-ups at once each compile a different shape first; the one whose shape the other holds waits for
    that lock and then runs it (by then from the cache)."""
    first, second = _shape(2), _shape(1)
    order: list[int] = []
    second_ran = threading.Event()

    def run(shape: WarmShape) -> None:
        order.append(shape.rows)
        if shape.rows == 1:
            second_ran.set()

    with shape_lock(first.lock_name("model"), blocking=True):  # another process compiles shape 2
        worker = threading.Thread(target=lambda: records.extend(warm_shapes([first, second], run, "model")))
        records: list[dict] = []
        worker.start()
        assert second_ran.wait(60)  # it did not wait for shape 2's lock to start on shape 1
        assert order == [1]
    worker.join(60)
    assert order == [1, 2] and [r["rows"] for r in records] == [1, 2]
    assert records[0]["waited_s"] == 0.0 and set(records[1]) >= {"seconds", "waited_s", "graphs", "size"}


def test_a_shape_compiled_on_this_machine_loads_without_waiting_for_its_lock(cache_env):
    """Once a shape ran to the end on this machine, later warm-ups load it from the cache side by side: none waits
    for that shape's lock (held here, as by a process still compiling another model's shape of that name)."""
    shape = _shape(2)
    assert warm_shapes([shape], lambda s: None, "model")[0]["waited_s"] == 0.0  # the first: compiles, marks done
    ran = threading.Event()
    with shape_lock(shape.lock_name("model"), blocking=True):
        worker = threading.Thread(target=lambda: warm_shapes([shape], lambda s: ran.set(), "model"))
        worker.start()
        assert ran.wait(60)  # it ran while the lock was held: it did not take the lock
    worker.join(60)
    assert not worker.is_alive()


def _compiling(data: bytes, saved_by: list[bytes]):
    """A warm-up run that compiles (counts an FX graph cache miss) and whose process then holds artefacts `data`."""

    def run(shape: WarmShape) -> None:
        from torch._dynamo.utils import counters

        counters["inductor"]["fxgraph_cache_miss"] += 1  # what a real compilation counts
        saved_by.append(data)

    return run


def test_compiled_artefacts_are_saved_for_and_loaded_from_the_cluster_folder(cache_env, monkeypatch):
    """Two machines compiling different shapes each save a file of their own (neither overwrites the other), and a
    third machine loads both before its warm-up; a warm-up that compiled nothing saves nothing."""
    held: list[bytes] = []
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (held[-1], None))
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: loaded.append(data))
    settings = CompileSettings(shared_cache=str(cache_env / "cluster"))
    for host, data, rows in (("machine-a", BUCKET_1, 1), ("machine-b", BUCKET_2, 2)):
        monkeypatch.setattr(socket, "gethostname", lambda host=host: host)
        report = warm_up([_shape(rows)], _compiling(data, held), "model", settings)
        assert report["shared"]["save"].startswith("saved")
    assert report["shared"]["load"].startswith("loaded 1 file(s)")  # machine b found a's file first
    files = sorted((cache_env / "cluster").iterdir())
    assert [f.read_bytes() for f in files] == [BUCKET_1, BUCKET_2]
    assert ["machine-a" in files[0].name, "machine-b" in files[1].name] == [True, True]
    # A third machine: loads both files first; compiles nothing new, so saves nothing.
    loaded.clear()
    monkeypatch.setattr(socket, "gethostname", lambda: "machine-c")
    again = warm_up([_shape(1), _shape(2)], lambda shape: None, "model", settings)
    assert again["shared"]["load"].startswith("loaded 2 file(s)") and sorted(loaded) == sorted([BUCKET_1, BUCKET_2])
    assert again["shared"]["save"] == "nothing new"
    # Another model's warm-up loads none of them.
    assert warm_up([_shape(1)], lambda shape: None, "other", settings)["shared"]["load"].startswith("none yet")
    assert warm_up([_shape(1)], lambda shape: None, "model", CompileSettings())["shared"]["load"] == "no shared cache"


def test_saving_leaves_another_machines_write_in_progress(cache_env, monkeypatch):
    """In the cluster's folder a temp file whose process does not run on this machine may be another machine's
    artefact being written: saving here leaves it (a single machine's folders remove such files as dead)."""
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # a pid that runs nowhere here, as another machine's writer's would not
    folder = cache_env / "cluster"
    folder.mkdir()
    elsewhere = folder / f".{finished.pid}.unveil-compiled-x-machine-a-7.bin.0a1b2c3d.tmp"
    elsewhere.write_bytes(b"half written on machine a")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"this machine's graphs", None))
    report = save_shared_artefacts(CompileSettings(shared_cache=str(folder)), "model")
    assert report.startswith("saved")
    assert elsewhere.read_bytes() == b"half written on machine a"
    assert [f.read_bytes() for f in folder.glob("unveil-compiled-*.bin")] == [b"this machine's graphs"]


def test_a_shared_folder_that_cannot_be_written_is_a_warning_and_the_warm_up_goes_on(cache_env, monkeypatch, caplog):
    """The graphs are compiled and in this machine's cache when the save fails: the warm-up ends with its report
    (saying why nothing was saved) instead of failing, as an unreadable file only costs a compilation when loading."""
    blocker = cache_env / "not-a-folder"
    blocker.write_text("a file where the shared folder's parent should be")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"this machine's graphs", None))
    settings = CompileSettings(shared_cache=str(blocker / "cluster"))
    report = warm_up([_shape(1)], _compiling(b"graphs", []), "model", settings)
    assert report["shared"]["load"].startswith("none yet")
    assert report["shared"]["save"].startswith("not saved") and "could not save" in caplog.text
    assert [r["rows"] for r in report["shapes"]] == [1]


def test_an_unreadable_artefact_file_is_skipped_with_a_warning(cache_env, monkeypatch, caplog):
    """A stale or partial file costs only the compilation it would have saved: the others still load."""

    def load(data: bytes) -> None:
        if data == STALE:
            raise RuntimeError("artefacts of another torch")

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", load)
    settings = CompileSettings(shared_cache=str(cache_env / "cluster"))
    held = [STALE]
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (held[-1], None))
    for host in ("machine-a", "machine-b"):
        monkeypatch.setattr(socket, "gethostname", lambda host=host: host)
        warm_up([_shape(1)], _compiling(STALE if host == "machine-a" else GOOD, held), "model", settings)
    report = warm_up([_shape(1)], lambda shape: None, "model", settings)
    assert report["shared"]["load"].startswith("loaded 1 file(s)") and "1 unreadable" in report["shared"]["load"]
    assert "could not load" in caplog.text


@pytest.fixture
def compiled_generator(cache_env):
    """A tiny CPU generator on the compiled preset's bucketing, its UNet compiled by Dynamo (eager backend)."""
    from tools.t2i.diffusers_backend import DiffusersGenerator, clear_pipeline_cache

    folder = build_tiny_sd_without_attention(cache_env / "sd")  # what is counted here needs no attention layers
    gen = DiffusersGenerator("tiny", folder, device="cpu", max_batch=4, store=None)
    gen.fast_path = replace(PRESETS["eager"], compile=True, bucket_batches=True)
    torch._dynamo.reset()
    compile_static(gen._load().unet, backend="eager")
    try:
        yield gen, folder
    finally:
        clear_pipeline_cache()
        torch._dynamo.reset()


@pytest.mark.slow  # Dynamo compiles the tiny UNet for four shapes
async def test_a_compiled_generator_is_warm_before_its_first_request(compiled_generator, tmp_path, capsys):
    from tools.image_store import get_image_store
    from tools.t2i import GenerationRequest, get_generator

    gen, folder = compiled_generator
    gen.store = store = get_image_store(tmp_path / "store")
    _ = gen.pipeline  # loading it warms it up
    stats = gen.compile_stats()
    warm = stats["warmup"]
    # Buckets 1 and 2 below max_batch 4, and max_batch itself, at the warm-up size: each compiled once.
    assert stats["ready"] and [s["rows"] for s in warm["shapes"]] == [4, 2, 1]
    assert all(s["graphs"] >= 1 and s["size"] == f"{SIZE}x{SIZE}" for s in warm["shapes"])
    assert gen.warm_up() == warm  # once per pipeline: later calls return the first report
    capsys.readouterr()

    requests = [GenerationRequest(prompt=f"a red car {i}", seed=i, width=SIZE, height=SIZE, steps=2) for i in range(3)]
    ids = [(await gen.generate(r))[0] for r in requests[:1]]
    import asyncio

    ids += [x[0] for x in await asyncio.gather(*(gen.generate(r) for r in requests[1:]))]
    after = gen.compile_stats()
    assert after["late_compiles"] == 0 and "COMPILED AFTER THE WARM-UP" not in capsys.readouterr().err

    # A size the warm-up did not cover still renders, and the compilation it needs is said loudly and counted.
    await gen.generate(GenerationRequest(prompt="a boat", seed=9, width=48, height=48, steps=2))
    late = gen.compile_stats()
    assert late["late_compiles"] == 1 and late["late_shapes"] == [(1, 48, 48)]
    assert "COMPILED AFTER THE WARM-UP" in capsys.readouterr().err

    # The padded, compiled renders are the plain eager path's images (one per call, the UNet no longer compiled).
    from tools.t2i.fast import disable_compile

    disable_compile(gen.pipeline.unet)
    eager = get_generator(f"diffusers:{folder}", store=store, device="cpu", max_batch=1)
    for request, image_id in zip(requests, ids, strict=True):
        alone = np.asarray(store.open((await eager.generate(request))[0])).astype(int)
        assert np.abs(np.asarray(store.open(image_id)).astype(int) - alone).max() <= 1


def test_no_warm_up_on_the_eager_path_or_when_turned_off(compiled_generator, monkeypatch):
    from tools.t2i.diffusers_backend import DiffusersGenerator

    _gen, folder = compiled_generator
    assert DiffusersGenerator("tiny", folder, device="cpu").warm_up() == {}  # eager: nothing to compile
    monkeypatch.setenv("UNVEIL_T2I_WARMUP", "0")
    off = DiffusersGenerator("tiny", folder, device="cpu", max_batch=4)
    off.fast_path = replace(PRESETS["eager"], compile=True, bucket_batches=True)
    assert off.warm_up() == {} and off.compile_stats()["ready"] is False


def test_the_reward_renderer_warms_a_compiled_generator_up_first_in_the_callers_thread():
    """Beside the policy's build, the warm-up broke on the GPU machines (meta parameters, Dynamo's default-dtype
    guard, a CUDA-graph capture invalidated): it runs first, in the caller's thread, and only when compiled."""
    from training.render import warm_up_first

    class Compiled:
        fast_path = replace(PRESETS["eager"], compile=True)
        loads: list[str] = []

        @property
        def pipeline(self) -> object:
            self.loads.append(threading.current_thread().name)
            return object()

        def warm_up(self) -> dict:
            return {}

    warm_up_first(Compiled())
    assert Compiled.loads == [threading.current_thread().name]

    class Eager(Compiled):
        fast_path = PRESETS["eager"]
        loads: list[str] = []

    warm_up_first(Eager())
    assert Eager.loads == []


def test_the_lock_folder_is_the_machine_cache(cache_env):
    with shape_lock("x", blocking=False) as held:
        assert held
        with shape_lock("x", blocking=False) as again:
            assert not again  # a second holder (another process, or thread) does not get it
    assert (Path(cache_env) / "inductor" / "unveil-warmup-locks" / "x.lock").is_file()


@pytest.mark.slow  # Dynamo compiles the tiny UNet
def test_a_dynamic_batch_compiles_one_graph_for_every_batch(cache_env):
    """`compile+dynamic`: the warm-up's first size compiles one graph with a symbolic batch; its second size, and
    a batch of another size later, compile nothing."""
    from tools.t2i.diffusers_backend import DiffusersGenerator, clear_pipeline_cache
    from tools.t2i.diffusers_backend import _ImageJob as Job

    gen = DiffusersGenerator("tiny", build_tiny_sd_without_attention(cache_env / "sd"), device="cpu", max_batch=4)
    gen.fast_path = replace(PRESETS["eager"], compile=True, dynamic_batch=True)
    torch._dynamo.reset()
    try:
        compile_static(gen._load().unet, backend="eager", dynamic_batch=True)
        shapes = gen.warm_up()["shapes"]
        assert [s["rows"] for s in shapes] == [4, 2] and shapes[0]["graphs"] >= 1 and shapes[1]["graphs"] == 0
        kwargs = gen.call_kwargs(_request())
        gen.render_rows([Job("a cat", None, k) for k in range(3)], kwargs, keep=3, overlap=False)
        assert gen.compile_stats()["late_compiles"] == 0
    finally:
        clear_pipeline_cache()
        torch._dynamo.reset()


def _request():
    from tools.t2i import GenerationRequest

    return GenerationRequest(prompt="a cat", width=SIZE, height=SIZE, steps=2)


def test_two_folders_of_one_architecture_share_their_warm_up_locks(tmp_path):
    """Each bench process saves its own copy of the model: the copies compile the same graphs, so their warm-ups
    must coordinate on the same locks (the folder is not part of the key; the dtype is)."""
    from tools.t2i.diffusers_backend import clear_pipeline_cache, warmup_key
    from tools.t2i.pipeline_loading import load_pipeline

    try:
        a, b = (
            load_pipeline(build_tiny_sd(tmp_path / name), variant="plain", unet_file=None, device="cpu")
            for name in ("a", "b")
        )
        assert a is not b and warmup_key(a, "compile") == warmup_key(b, "compile") != warmup_key(a, "fp8")
        a.unet.to(torch.float16)
        assert warmup_key(a, "compile") != warmup_key(b, "compile")
    finally:
        clear_pipeline_cache()
