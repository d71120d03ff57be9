"""The Ray engine (`--engine ray`) on a real two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`).

One module-scoped cluster (a 2-CPU head, no dashboard, and a 2-CPU second node with a custom resource
`unveil_render`) serves every test: records equal the local engine's for detect, refine and generate; rendering
placed on the second node lands in the driver's store; a render actor killed mid-run and a driver killed with
SIGKILL lose and duplicate nothing; the cluster-wide limiter holds a rate and a concurrency across worker
processes. Without `--engine ray` Ray is never imported (a subprocess checks `sys.modules`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.graphs import test_ctd as ctd
from tests.runner.test_kill_support import (
    ROOT,
    hashes_by_id,
    read_records,
    referenced_ids,
    store_ids,
    temp_files,
    wait_for_lines,
)
from tests.unveil.test_detect_cli import SCRIPT as DETECT_SCRIPT

pytestmark = pytest.mark.slow
N = 6
TIMING = ("time", "elapsed", "duration", "latency", "wall")


def _same(record: Any) -> Any:
    """A record without timing fields; usage, cost and everything else must match exactly."""
    if isinstance(record, dict):
        return {k: _same(v) for k, v in record.items() if not any(t in k for t in TIMING)}
    if isinstance(record, list):
        return [_same(v) for v in record]
    return record


def _by_id(path: Path, roots: dict[str, str]) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    for root, name in roots.items():
        text = text.replace(root, name)
    return {rec["id"]: _same(rec) for rec in (json.loads(line) for line in text.splitlines() if line.strip())}


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two records differ (for failure messages)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:120]!r} != {str(b)[:120]!r}"]


@pytest.fixture(scope="module")
def sd_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.tiny import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("sd") / "sd")


@pytest.fixture(scope="module")
def cluster() -> Any:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    render_node = c.add_node(num_cpus=2, resources={"unveil_render": 1})
    ray.init(address=c.address, namespace="unveil", logging_level=logging.WARNING)
    try:
        yield c, render_node
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(autouse=True)
def same_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render actors use as many CPU threads as this process: on a CPU, a float sum (and so a pixel) depends on
    how many threads share it, and Ray gives an actor `OMP_NUM_THREADS` = its CPUs (GPUs are not affected)."""
    import torch

    monkeypatch.setenv("UNVEIL_RAY_RENDER_CPUS", str(torch.get_num_threads()))


def _refine_setup(tmp_path: Path, sd: str, n: int = N) -> list[str]:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "refiner.0": [
                    {"when": "grenade", "then": "<answer>a toy water pistol</answer>"},
                    {"when": "", "then": "keep"},
                ],
                "refiner": [{"when": "", "then": "keep"}],
            }
        )
    )
    src = tmp_path / "prompts.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "prompt": f"a grenade {i}" if i % 3 == 0 else f"a garden {i}", "seed": i}) + "\n"
            for i in range(n)
        )
    )
    return [
        "refine",
        "--input",
        str(src),
        "--refiner",
        f"scripted:{script}?latency=0.2",
        "--generator",
        f"diffusers:{sd}",
        "--size",
        "32",
        "--steps",
        "2",
        "--t-max",
        "2",
        "--cache",
        "off",
        "--no-progress",
        "--concurrency",
        "3",
    ]


def test_a_render_member_compiles_in_the_machine_cache_folder_not_torchs_own(
    cluster: Any, tmp_path: Path, sd_folder: str
) -> None:
    # A worker of a driver that imported diffusers (so torch._dynamo) inherits torch's own default folder in
    # TORCHINDUCTOR_CACHE_DIR; the member must still use the folder every plain process of the machine uses.
    import ray

    from runner.ray.members import RENDER_ACTOR
    from tools.t2i.compile_settings import torch_default_cache_dir

    machine = tmp_path / "machine-cache"
    env = {"TORCHINDUCTOR_CACHE_DIR": torch_default_cache_dir(), "UNVEIL_COMPILE_CACHE": str(machine)}
    actor = RENDER_ACTOR.options(num_cpus=1, runtime_env={"env_vars": env}).remote(
        f"diffusers:{sd_folder}", "truncate", {}
    )
    try:
        ready = ray.get(actor.ready.remote(), timeout=240)
    finally:
        ray.kill(actor, no_restart=True)
    assert ready["process"]["cache_dir"] == str(machine)
    assert ready["process"]["threads"] >= 1


def test_the_local_engine_never_imports_ray(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(DETECT_SCRIPT))
    code = (
        "import sys; from unveil.cli import main; "
        f"rc = main(['detect', '--model', 'scripted:{script}', '--image-description', 'white powder', "
        "'--text', 'text the usual number', '--cache', 'off']); "
        "assert rc == 0, rc; assert 'ray' not in sys.modules, 'ray was imported'; print('no ray')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no ray" in out.stdout


def test_detect_and_generate_records_equal_the_local_engine(cluster: Any, tmp_path: Path, sd_folder: str) -> None:
    from unveil.cli import main

    script = tmp_path / "script.json"
    script.write_text(json.dumps(DETECT_SCRIPT))
    detect = ["detect", "--model", f"scripted:{script}", "--cache", "off", "--no-progress"]
    assert main([*detect, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert main([*detect, "--output", str(tmp_path / "ray.jsonl"), "--engine", "ray"]) == 0
    local = _by_id(tmp_path / "local.jsonl", {})
    assert len(local) >= 2 and all(r["status"] == "ok" for r in local.values())
    assert _by_id(tmp_path / "ray.jsonl", {}) == local, _diff(local, _by_id(tmp_path / "ray.jsonl", {}))

    spec = ctd.write_script(tmp_path, ctd.accepting_script())
    for name, extra in (("gen-local", []), ("gen-ray", ["--engine", "ray"])):
        assert main(ctd.cli_args(tmp_path / name, spec, f"diffusers:{sd_folder}", "--review", "auto", *extra, n=2)) == 0
    ref = _by_id(tmp_path / "gen-local" / "samples.jsonl", {str(tmp_path / "gen-local"): "<out>"})
    got = _by_id(tmp_path / "gen-ray" / "samples.jsonl", {str(tmp_path / "gen-ray"): "<out>"})
    assert len(ref) == 2 and {r["status"] for r in ref.values()} == {"accepted"}
    assert got == ref, _diff(ref, got)
    assert store_ids(tmp_path / "gen-ray" / "images") == store_ids(tmp_path / "gen-local" / "images") != set()


class RefineReference:
    """The refine run both kill tests compare against: its arguments (the prompts and script of one folder), and
    the local engine's records and store."""

    def __init__(self, folder: Path, sd: str):
        from unveil.cli import main

        self.common = _refine_setup(folder, sd)
        self.prompts = folder / "prompts.jsonl"
        self.out, self.store = folder / "ref.jsonl", folder / "ref-store"
        assert main([*self.common, "--output", str(self.out), "--image-store", str(self.store)]) == 0


@pytest.fixture(scope="module")
def refine_reference(tmp_path_factory: pytest.TempPathFactory, sd_folder: str) -> RefineReference:
    """The local engine's refine run, once a module (the kill tests' reference)."""
    return RefineReference(tmp_path_factory.mktemp("refine"), sd_folder)


@pytest.mark.timeout(1200)  # a hang guard only: a cluster, a pipeline per node and two runs on a shared machine
def test_refine_on_the_second_node_and_a_killed_render_actor(
    cluster: Any, tmp_path: Path, sd_folder: str, refine_reference: RefineReference, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The render actor runs on the node with `unveil_render`; killing it mid-run (Ray restarts it) loses and
    repeats nothing: the records equal the local engine's and its images end in the driver's store. A request that
    meets the member while it restarts is waited for and sent again (on a loaded 2-core machine 3 of 6 samples once
    failed with `ActorUnavailableError: ... The actor is restarting`): tests/runner/test_ray_pool.py checks that waiting
    for every interleaving with fake actors, so this run needs no busy CPUs to reach it (it took 15 minutes with
    them)."""
    import ray

    from runner.batch import BatchRun, run_batch
    from runner.batch_input import read_jsonl
    from runner.engine import EngineSettings, engine_session
    from runner.refine import prompt_of, refine_one, seed_of
    from tools.image_store import get_image_store
    from tools.t2i.registry import open_generator

    _, render_node = cluster
    common, ref_store = refine_reference.common, refine_reference.store
    reference = _by_id(refine_reference.out, {str(ref_store): "<store>"})
    assert len(reference) == N and {len(r["trajectory"]) for r in reference.values()} == {1, 2}

    monkeypatch.setenv("UNVEIL_RAY_RENDER_RESOURCES", json.dumps({"unveil_render": 1}))
    # The restarted member loads its pipeline on a machine others share: its deadline is no part of what is tested.
    monkeypatch.setenv("UNVEIL_RAY_RESTART_TIMEOUT", "3000")
    from unveil.cli import build_parser
    from unveil.commands.refine import build_context

    with engine_session(EngineSettings("ray")):
        generator: Any = open_generator(f"diffusers:{sd_folder}", store=get_image_store(tmp_path / "store"))
        (where,) = generator.pipeline  # waits for the member to load its pipeline
        assert where["node"] == render_node.node_id

        # One run, its render actor killed once the first sample is done (a run without the kill is a subset).
        out, store = tmp_path / "killed.jsonl", tmp_path / "killed-store"
        args = build_parser().parse_args([*common, "--output", str(out), "--image-store", str(store)])
        ctx = build_context(args)
        first_done = asyncio.Event()

        async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
            # What `unveil refine` writes per record (the record's other fields kept under "input").
            rec = await refine_one(prompt_of(record), ctx, seed=seed_of(record), sample_id=sample_id)
            first_done.set()
            extra = {k: v for k, v in record.items() if k not in rec and k != "id"}
            return {**rec, "input": extra} if extra else rec

        def generator_pools() -> list[Any]:
            from tools.t2i import registry

            return list(registry._REMOTE[0].pools.values())  # type: ignore[attr-defined]

        async def run_batch_and_kill() -> Any:
            prompts = list(read_jsonl(refine_reference.prompts))
            batch = asyncio.ensure_future(run_batch(prompts, worker, BatchRun(out, concurrency=3, progress=False)))
            await first_done.wait()  # the other samples are in flight
            (pool,) = [p for p in generator_pools() if p.members]
            ray.kill(pool.members[0], no_restart=False)  # Ray restarts it; its requests are sent again
            return await batch

        summary = asyncio.run(run_batch_and_kill())
        assert summary.failed == 0 and summary.completed == N, summary.failures
        (pool,) = [p for p in generator_pools() if p.members]  # the member was restarted: a new process
        assert ray.get(pool.members[0].ready.remote())["pid"] != where["pid"]
        got = _by_id(out, {str(store): "<store>"})
        assert got == reference, _diff(reference, got)
        assert store_ids(store) == store_ids(ref_store) == referenced_ids(read_records(out))
        assert temp_files(tmp_path) == []


def test_a_driver_killed_with_sigkill_resumes_without_loss(
    cluster: Any, tmp_path: Path, refine_reference: RefineReference
) -> None:
    from unveil.cli import main

    c, _ = cluster
    common, ref_store = refine_reference.common, refine_reference.store
    reference = read_records(refine_reference.out)

    out, store = tmp_path / "out.jsonl", tmp_path / "store"
    cmd = [*common, "--output", str(out), "--image-store", str(store), "--engine", "ray"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "unveil.cli", *cmd, "--ray-address", c.address],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert wait_for_lines(proc, out, 2, timeout=240) >= 2 or proc.poll() is not None, "the Ray driver wrote nothing"
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    killed_at = out.read_bytes().count(b"\n")
    assert killed_at < N, f"the driver finished before it was killed: {err.decode()[-1500:]}"

    assert main(cmd) == 0  # the rerun, again on the Ray engine
    records = read_records(out)
    assert [r["id"] for r in records].count("p0") == 1 and len(records) == N
    assert hashes_by_id(records, {str(store): "<store>"}) == hashes_by_id(reference, {str(ref_store): "<store>"})
    assert store_ids(store) == referenced_ids(records) == store_ids(ref_store)
    assert temp_files(tmp_path) == []


def test_model_api_limits_hold_across_workers(cluster: Any) -> None:
    import ray

    rpm, per_second, concurrency, n = 300.0, 5.0, 2, 6
    from tests.ray_helpers import hammer as hammer_here

    hammer = ray.remote(num_cpus=0.5)(hammer_here)
    # A backend of this test's own: the cluster's limiter outlives each command, and a driver SIGKILLed by an
    # earlier test may still hold leases on "scripted" until they expire.
    backend = f"scripted-limits-{uuid.uuid4().hex[:8]}"
    for shared in (False, True):
        calls = sorted(
            c for part in ray.get([hammer.remote(n, rpm, concurrency, shared, backend) for _ in range(2)]) for c in part
        )
        starts = [s for s, _ in calls]
        # A token bucket of `rpm` (burst 1): the k-th request of the cluster starts k / rate after the first.
        within_rate = all(starts[k] - starts[0] >= k / per_second - 0.05 for k in range(len(starts)))
        most_at_once = max(sum(1 for s, e in calls if s <= t < e) for t in starts)
        if shared:
            assert within_rate, [round(s - starts[0], 3) for s in starts]
            assert most_at_once <= concurrency
        else:  # the control: two processes with only their own limits send twice the rate
            assert not within_rate and most_at_once > concurrency


def test_scoring_on_the_scorer_pool_equals_scoring_here(cluster: Any, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    from runner.engine import EngineSettings, engine_session
    from tools.image_store import ImageStore
    from tools.scorers import score

    store = ImageStore(tmp_path / "store")
    rng = np.random.default_rng(0)
    ids = [store.put_pil(Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))).id for _ in range(2)]
    settings = score.ScoringSettings()
    here = asyncio.run(score.score_images(ids, "a photo", ["nudenet"], settings, store=store))
    with engine_session(EngineSettings("ray")):
        remote = asyncio.run(score.score_images(ids, "a photo", ["nudenet"], settings, store=store))
        pool = score._REMOTE[0].pool  # type: ignore[attr-defined]
        assert pool is not None and len(pool.members) == 1  # the rows came from the scorer pool
        (where,) = pool.ready()
        assert where["pid"] != os.getpid()
    assert remote == here and len(here) == 2 and "nudenet_flag" in here[0]


def test_cluster_info_lists_nodes_resources_and_pools(
    cluster: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from unveil.cli import main

    monkeypatch.setenv("UNVEIL_RAY_RENDER_RESOURCES", json.dumps({"unveil_render": 1}))
    c, _ = cluster
    assert main(["cluster", "info", "--ray-address", c.address]) == 0
    out = capsys.readouterr().out
    assert "cluster: 2 node(s), 4 CPUs, 0 GPUs" in out
    assert "unveil_render=1" in out and "render pool: 1 actor(s)" in out and "needs unveil_render=1" in out
    assert main(["cluster", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len(info["nodes"]) == 2 and info["pools"]["scorer"]["actors"] == 1


def test_ray_address_auto_names_the_cluster_it_joined(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--ray-address auto` joins whatever cluster runs on the machine: the run says which (issue 45)."""
    from unveil.cli import main

    c, _ = cluster
    script = tmp_path / "detect.json"
    script.write_text(json.dumps(DETECT_SCRIPT))
    argv = ["detect", "--engine", "ray", "--ray-address", "auto", "--text", "t", "--image-description", "d"]
    assert main([*argv, "--model", f"scripted:{script}", "--cache", "off"]) == 0
    said = capsys.readouterr().err
    assert (
        f"engine ray: Ray cluster at {c.address} (--ray-address auto: the cluster running on this machine): "
        "2 node(s), 0 GPU(s), 4 CPU(s)"
    ) in said


def test_engine_flags_are_checked(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from runner.engine import EngineSettings
    from runner.ray import render_settings
    from tests.cli_args import refusal

    assert "needs --engine ray" in refusal(
        ["detect", "--ray-address", "auto", "--text", "t", "--image-description", "d"], capsys
    )
    with pytest.raises(ValueError, match="engine 'spark'"):
        EngineSettings("spark")
    monkeypatch.setenv("UNVEIL_RAY_ADDRESS", "ray://head:10001")
    assert EngineSettings("ray").address() == "ray://head:10001"
    monkeypatch.setenv("UNVEIL_RAY_RENDER_RESOURCES", "render")
    with pytest.raises(ValueError, match="UNVEIL_RAY_RENDER_RESOURCES: expected a JSON object"):
        render_settings()
    monkeypatch.setenv("UNVEIL_RAY_RENDER_RESOURCES", '{"render": 1}')
    monkeypatch.setenv("UNVEIL_RAY_RENDER_ACTORS", "")
    assert render_settings().plan(4.0) == (4, 0.75) and render_settings().plan(0.0) == (1, 0.0)
    assert render_settings().resources == {"render": 1.0}


def test_an_hf_refiner_runs_in_the_vlm_pool_with_the_local_records(
    cluster: Any, tmp_path: Path, sd_folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hf:` VLMs (the IPR refiner) load in a Ray actor, not in the driver, and answer exactly as in process."""
    import agents.providers.hf_vlm as hf_vlm
    from tests.tiny_vlm import build_tiny_qwen_vl
    from unveil.cli import main

    vlm = build_tiny_qwen_vl(tmp_path / "qwen")
    src = tmp_path / "prompts.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"a garden {i}", "seed": i}) + "\n" for i in range(2)))
    args = [
        "refine",
        "--input",
        str(src),
        "--refiner",
        f"hf:{vlm}?max_new_tokens=8",
        "--generator",
        f"diffusers:{sd_folder}",
        "--size",
        "32",
        "--steps",
        "2",
        "--t-max",
        "1",
        "--cache",
        "off",
        "--no-progress",
        "--on-refiner-error",
        "stop",
    ]  # the random VLM writes noise: each record keeps it as its stop reason
    local_rc = main([*args, "--output", str(tmp_path / "local.jsonl")])

    def not_in_the_driver(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the driver loaded the hf: model itself")

    # Only the driver is patched: the VLM actor, another process, loads the model as usual.
    monkeypatch.setattr(hf_vlm, "make_hf_chat_model", not_in_the_driver)
    ray_rc = main([*args, "--output", str(tmp_path / "ray.jsonl"), "--engine", "ray"])
    assert local_rc == ray_rc
    local = _by_id(tmp_path / "local.jsonl", {})
    assert len(local) == 2 and all(r["status"] == "ok" and r["trajectory"][0]["refiner_answer"] for r in local.values())
    assert _by_id(tmp_path / "ray.jsonl", {}) == local, _diff(local, _by_id(tmp_path / "ray.jsonl", {}))


@pytest.fixture()
def gpu_node(cluster: Any) -> Any:
    """A node declaring 2 GPUs (none exist: the members render on its CPUs), so the render pool places 2 members of
    0.75 GPU each, as on a 2-GPU machine: two members can never share one of its GPUs."""
    import torch

    c, _ = cluster
    node = c.add_node(num_cpus=2 * torch.get_num_threads() + 1, num_gpus=2)
    try:
        yield node
    finally:
        c.remove_node(node)


def test_many_prompts_at_once_share_one_render_pool_on_gpus(
    cluster: Any, gpu_node: Any, tmp_path: Path, sd_folder: str
) -> None:
    """Graph runs open their generator in worker threads at once: every one must get the same pool. Before, each
    thread that found no pool made one, and members of different pools held the GPUs the others waited for: with
    2 GPUs, 12 prompts and the default IPR settings (3 refinements, a fresh seed per step) the run hung."""
    from runner.engine import EngineSettings, engine_session
    from runner.refine import ipr_context, refine_one
    from tools.t2i import registry

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refiner": [{"when": "", "then": "<answer>a calm lake at dawn</answer>"}]}))
    ctx = ipr_context(
        refiner_model=f"scripted:{script}",
        generator=f"diffusers:{sd_folder}",
        width=32,
        height=32,
        steps=2,
        image_store=str(tmp_path / "store"),
    )
    assert ctx.t_max == 3 and ctx.seed_mode == "fresh"

    async def every() -> list[dict[str, Any]]:
        runs = asyncio.gather(*(refine_one(f"a garden {i}", ctx, seed=i) for i in range(12)))
        return list(await asyncio.wait_for(runs, 240))  # the deadline on the run: a stall fails, never hangs

    with engine_session(EngineSettings("ray")):
        records = asyncio.run(every())
        pools = list(registry._REMOTE[0].pools.values())  # type: ignore[attr-defined]
        assert len(pools) == 1 and len(pools[0].members) == 2 and all(pools[0].started)
        assert {w["node"] for w in pools[0].ready()} == {gpu_node.node_id}
    assert [len(r["trajectory"]) for r in records] == [4] * 12
    seeds = [s["seed"] for s in records[0]["trajectory"]]
    assert len(set(seeds)) == 4  # a fresh seed per step


def test_a_pool_that_cannot_start_fails_its_requests_with_a_clear_error(
    cluster: Any, tmp_path: Path, sd_folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member that Ray cannot place (no node has the resource) fails the request after the start deadline, naming
    the pool and what its members wait for; a member that does not answer fails it after the request deadline."""
    from runner.engine import EngineSettings, engine_session
    from runner.ray import PoolStalledError, render_settings
    from tools.image_store import get_image_store
    from tools.t2i.base import GenerationRequest
    from tools.t2i.registry import open_generator

    # No node has the resource, so no member ever starts: any deadline gives the same error, and each second of it
    # is waited in full.
    monkeypatch.setenv("UNVEIL_RAY_START_TIMEOUT", "1")
    monkeypatch.setenv("UNVEIL_RAY_RENDER_RESOURCES", json.dumps({"unveil_nowhere": 1}))
    request = GenerationRequest(prompt="a garden", width=32, height=32, steps=2, seed=1)
    store = get_image_store(tmp_path / "store")
    with engine_session(EngineSettings("ray")):
        generator = open_generator(f"diffusers:{sd_folder}", store=store)
        started = time.monotonic()
        with pytest.raises(
            PoolStalledError,
            match=r"render pool 'diffusers:.*no member started within 1 s.*"
            r"unveil_nowhere 1.*free",
        ):
            asyncio.run(generator.generate(request))
        assert time.monotonic() - started < 30

    monkeypatch.delenv("UNVEIL_RAY_RENDER_RESOURCES")
    monkeypatch.setenv("UNVEIL_RAY_START_TIMEOUT", "120")
    monkeypatch.setenv("UNVEIL_RAY_REQUEST_TIMEOUT", "0.5")
    with engine_session(EngineSettings("ray")):
        generator = open_generator(f"diffusers:{sd_folder}", store=store)
        generator.pipeline  # noqa: B018 - the member is started; only the render itself is timed
        slow = GenerationRequest(prompt="a garden", width=32, height=32, steps=400, seed=1)
        with pytest.raises(PoolStalledError, match=r"member 0 did not answer a 'render' request within 0.5 s"):
            asyncio.run(generator.generate(slow))
    monkeypatch.setenv("UNVEIL_RAY_REQUEST_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="UNVEIL_RAY_REQUEST_TIMEOUT: expected a number of seconds above 0"):
        render_settings()


@pytest.mark.parametrize("inflight", [4, 0])
def test_a_member_that_starts_late_still_gets_its_share_of_a_burst(cluster: Any, inflight: int) -> None:
    """Calls go only to started members. Without a bound on what one member holds, a burst sent at the start all
    lands on the member that started first (on GPUs: member 0 rendered the warm-up while member 1 sat idle, then
    compiled its kernels inside the timed round); with the default bound the late member takes its share."""
    import ray

    from runner.ray import INFLIGHT, ActorPool, PoolSettings
    from tests.ray_helpers import SlowStarter

    assert INFLIGHT == PoolSettings(pool="render").inflight == 64
    actor = ray.remote(num_cpus=0)(SlowStarter).options(max_concurrency=100)
    pool = ActorPool(
        lambda k: actor.remote(k, 0.0 if k == 0 else 1.5),
        2,
        name="counter pool",
        settings=PoolSettings(pool="counter", inflight=inflight),
    )
    try:

        async def burst() -> list[int]:
            return list(await asyncio.wait_for(asyncio.gather(*(pool.call("work") for _ in range(40))), 60))

        served = asyncio.run(burst())
    finally:
        pool.kill()
    if inflight:
        assert served.count(1) >= 5, served  # the late member started 1.5 s in and took its share
        assert max(pool.load) == 0
    else:
        assert served.count(1) == 0, served  # what happened before: everything went to member 0


def test_pool_settings_read_the_inflight_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """`UNVEIL_RAY_<POOL>_INFLIGHT` sets the bound (0: none); anything but a whole number >= 0 is one clear error."""
    from runner.ray import render_settings
    from tools.env import SettingError

    assert render_settings().inflight == 64
    monkeypatch.setenv("UNVEIL_RAY_RENDER_INFLIGHT", "0")
    assert render_settings().inflight == 0
    monkeypatch.setenv("UNVEIL_RAY_RENDER_INFLIGHT", "2.5")
    with pytest.raises(SettingError, match="UNVEIL_RAY_RENDER_INFLIGHT: expected a whole number from 0 to 1000"):
        render_settings()


def _cli(args: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unveil.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def test_a_bad_or_silent_ray_address_fails_fast_with_a_clear_error(cluster: Any) -> None:
    """Ray retries an unreachable address for many minutes (590 s seen); the connect has a deadline instead."""
    import socket

    started = time.monotonic()
    out = _cli(["cluster", "info", "--ray-address", "127.0.0.1:1"], 120)
    assert out.returncode == 1 and "cannot reach the Ray cluster at '127.0.0.1:1'" in out.stderr, out.stderr[-1500:]
    out = _cli(["cluster", "info", "--ray-address", "head:port"], 120)
    assert out.returncode == 1 and "expected HOST:PORT, ray://HOST:PORT or auto" in out.stderr, out.stderr[-1500:]
    with socket.socket() as silent:  # accepts connections and never answers: not a Ray node
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        # It never answers, so any deadline gives the same error, and each second of it is waited in full.
        out = _cli(["cluster", "info", "--ray-address", address], 120, UNVEIL_RAY_CONNECT_TIMEOUT="1")
    assert out.returncode == 1, out.stderr[-1500:]
    assert f"Ray cluster at '{address}'" in out.stderr and "did not answer within 1 s" in out.stderr
    assert time.monotonic() - started < 110
    c, _ = cluster
    out = _cli(["cluster", "info", "--ray-address", c.address], 120)  # a real cluster through the same path
    assert out.returncode == 0 and "cluster: 2 node(s)" in out.stdout, out.stderr[-1500:]


LEASE_HOLDER = """
import asyncio, sys, time
import ray
from runner.ray.limiter import RayLimiter, limiter_actor
ray.init(address=sys.argv[1], namespace="unveil")
limiter = RayLimiter(limiter_actor())
async def hold():
    for _ in range(2):
        await limiter._take(sys.argv[2], 2, None)
asyncio.run(hold())
print("held", flush=True)
time.sleep(600)
"""


def test_slots_of_a_killed_driver_come_back_when_its_job_ends(
    cluster: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver SIGKILLed while holding every slot of a backend: the next run gets a slot once the job ended (not
    after the 15-minute lease), and while it waits it says for what."""
    import runner.ray.limiter as ray_engine

    c, _ = cluster
    backend = f"scripted-killed-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "holder.py"
    script.write_text(LEASE_HOLDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), c.address, backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held", proc.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    monkeypatch.setattr(ray_engine, "WAIT_NOTICE_S", 0.2)
    limiter = ray_engine.RayLimiter(ray_engine.limiter_actor())

    async def take() -> None:
        async with limiter.slot(backend, 2, None):
            pass

    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="runner.ray.limiter"):
            asyncio.run(asyncio.wait_for(take(), 60))
        assert time.monotonic() - started < 60
    finally:
        limiter.close()

    # A wait that lasts says what it waits for: here this driver holds the one slot itself.
    limiter = ray_engine.RayLimiter(ray_engine.limiter_actor())
    other = f"scripted-busy-{uuid.uuid4().hex[:8]}"

    async def blocked() -> None:
        async with limiter.slot(other, 1, None):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(limiter._acquire(other, 1, None), 1.5)

    try:
        with caplog.at_level(logging.WARNING, logger="runner.ray.limiter"):
            asyncio.run(blocked())
    finally:
        limiter.close()
    assert any(
        f"for a cluster-wide slot of model backend '{other}': 1 of 1 in use (job {limiter.job}: 1" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
