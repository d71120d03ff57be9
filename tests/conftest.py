"""Shared pytest fixtures: an isolated gateway and image store per test, script files for the scripted provider,
and a `langgraph dev` server on a free loopback port."""

from __future__ import annotations

import functools
import gc
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from extras_plugin import pytest_collection_modifyitems as mark_extras
from extras_plugin import pytest_configure as declare_extras
from extras_plugin import (  # noqa: F401 - hooks: a missing extra skips with its name
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)

from agents.gateway import Gateway, GatewaySettings, set_gateway
from tests.tiny_cache import CACHE_ENV as TINY_CACHE_ENV

ROOT = Path(__file__).resolve().parent.parent

# Tests that must not run beside each other under `pytest -n auto --dist loadgroup` (pytest-xdist), by module or
# by test (`file.py::name`, parameters left out): each group runs on one worker, one test at a time. Ray: one
# local cluster at a time on this machine (each starts a head and workers sized to the machine's CPUs). langgraph
# dev: the server keeps its state in the repository's `.langgraph_api/`, which two servers in one checkout share.
XDIST_GROUPS = {
    "test_ray_engine.py": "ray",
    "test_gpu_suite.py::test_the_tiny_suite_runs_every_part_and_writes_one_json": "ray",
    "test_gpu_suite.py::test_the_ipr_part_evaluates_a_slice_on_ray_and_extrapolates": "ray",
    "test_bench_smoke.py::test_scale_render_tiny_runs_the_local_and_ray_engines": "ray",
    # its own local Ray (`ray.init(address="local")`), which would start beside the group's now that both are handed
    # out among the first units (`_heaviest_first`)
    "test_bench_smoke.py::test_compile_reuse_tiny_compiles_once_across_a_plain_process_and_a_ray_actor": "ray",
    "test_langgraph_dev.py": "langgraph_dev",
    "test_guard_langgraph_dev.py": "langgraph_dev",
    "test_server_boundary_dev.py": "langgraph_dev",
}
WIDE_SCOPES = ("module", "class", "package", "session")
TESTS = Path(__file__).resolve().parent


_TINY_CACHE_MADE: list[str] = []  # the folder this process made for the run's tiny models, removed at its end


def pytest_configure(config: pytest.Config) -> None:
    """The extras' marker, and one folder per run where each tiny model is built once (`tests/tiny_cache.py`):
    made by the process that starts the run, before pytest-xdist starts its workers, which inherit it."""
    declare_extras(config)
    _write_bytecode_caches()
    _share_the_cores(config)
    _hand_out_in_collection_order(config)
    if not os.environ.get(TINY_CACHE_ENV):
        import tempfile

        _TINY_CACHE_MADE.append(tempfile.mkdtemp(prefix="unveil-tiny-models-"))
        os.environ[TINY_CACHE_ENV] = _TINY_CACHE_MADE[0]


def _write_bytecode_caches() -> None:
    """Bytecode caches (`__pycache__/`, ignored by git) are written even where the environment turns them off
    (`PYTHONDONTWRITEBYTECODE=1`, as in many containers and on the development VM), as `make test` does, so that
    the README's and CI's own command (`python3 -m pytest -q -n auto --dist loadgroup`) gets them too: else each
    pytest worker rewrites and compiles every test file again on every run (docs/testing.md, round six, has the
    cost), and each process a test starts (a command, a Ray worker, a child pytest) compiles the project's modules
    it imports. Set in the process that starts the run, before pytest-xdist starts its workers,
    which inherit it, as do the processes their tests start."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def _share_the_cores(config: pytest.Config) -> None:
    """A pytest-xdist worker gets its share of the CPUs for torch's thread pool (the processes its tests start
    inherit it through `OMP_NUM_THREADS`): with one worker per CPU, each worker's default pool of one thread per
    CPU puts two threads on every core, and torch's threads then spin waiting on each other (a 1-second tiny render
    took 19 s beside another worker's). The tiny models gain nothing from more threads; a variable set by the
    caller stays as it is."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    if workers < 2 or os.environ.get("OMP_NUM_THREADS"):
        return
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    if "torch" in sys.modules:  # imported before this hook: its pool is already sized, so size it again
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _hand_out_in_collection_order(config: pytest.Config) -> None:
    """pytest-xdist's controller hands out the work units (a group, or one test) by their number of tests, most first
    (`--loadscope-reorder`, its default): a single slow test then started near the end of a run, while the other
    worker had run out of work. Under `--dist loadgroup` it keeps the order the workers collect instead, which
    `_heaviest_first` sets."""
    if getattr(config.option, "dist", None) == "loadgroup":
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the imports and the collection made (torch's, transformers' modules, the test items: millions of
    objects that live for the whole run) out of the garbage collector's sight (`gc.freeze`), after one last
    collection: each full collection then walks only what the tests make. Without it a worker spent about 15 s of
    a `make test-fast` run in 30 full collections, and 4 s at its end in pytest's last ones."""
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_freeze_what_survives_a_full_collection)


def _freeze_what_survives_a_full_collection(phase: str, info: dict[str, int]) -> None:
    """What survives an automatic full collection during the run (modules a test imports, diffusers' and peft's;
    the tiny models a module shares) is frozen too, so the next one walks only what is newer."""
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """pytest's own last collections (which report what finalizers raise) run as they would without the freezing."""
    if _freeze_what_survives_a_full_collection in gc.callbacks:
        gc.callbacks.remove(_freeze_what_survives_a_full_collection)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the tiny models' folder this process made."""
    import shutil

    for folder in _TINY_CACHE_MADE:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(TINY_CACHE_ENV, None)
    _TINY_CACHE_MADE.clear()


def _uses_a_wide_fixture_of_the_suite(item: pytest.Item) -> bool:
    """Whether the test uses a fixture of this suite (not pytest's own `tmp_path_factory`) wider than one test."""
    info = getattr(item, "_fixtureinfo", None)
    for fixturedefs in info.name2fixturedefs.values() if info is not None else ():
        if fixturedefs and fixturedefs[-1].scope in WIDE_SCOPES and _defined_in_the_suite(fixturedefs[-1].func):
            return True
    return False


@functools.cache
def _defined_in_the_suite(func: Callable[..., Any]) -> bool:
    """Whether a fixture's function is defined under tests/ (asked once a fixture, not once a test: collection)."""
    source = inspect.getsourcefile(func)
    return source is not None and TESTS in Path(source).resolve().parents


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test in its `xdist_group`: the module's entry of `XDIST_GROUPS`, else, for a test that uses a
    fixture wider than one test (a tiny model built once a module, a server), its module, so that fixture is built
    on one worker only. Without xdist the markers do nothing. The extras' markers first (`extras_plugin`)."""
    mark_extras(config, items)
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        module = item.path.name
        name = getattr(item, "originalname", item.name)  # without its parameters
        group = XDIST_GROUPS.get(f"{module}::{name}", XDIST_GROUPS.get(module))
        if group is None:
            group = item.nodeid.split("::")[0] if _uses_a_wide_fixture_of_the_suite(item) else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False):  # a pytest-xdist worker under --dist loadgroup
        items[:] = _heaviest_first(items)


def _heaviest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests by work unit (an `xdist_group`, else the test alone), the units with the most time allowed to
    their slow tests first (each test's `timeout` marker, else the ini's `timeout`), then by number of tests; the
    order of the tests within a unit, and of units alike, is kept. With the slow units (a Ray cluster, a server, the
    README's demo on the embedded model) first and the many short ones last, the short ones fill in at the end
    whichever worker is free: a long unit handed out last kept one worker busy minutes after the other ran out."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        key = str(mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else item.nodeid
        units.setdefault(key, []).append(item)

    def allowed(item: pytest.Item) -> float:
        if not item.get_closest_marker("slow"):
            return 0.0
        mark = item.get_closest_marker("timeout")
        given = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
        return float(given or item.config.getini("timeout") or 300)

    ordered = sorted(units.values(), key=lambda unit: (-sum(map(allowed, unit)), -len(unit)))
    return [item for unit in ordered for item in unit]


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads or writes the user's cache or image store, and each starts with a fresh gateway."""
    monkeypatch.setenv("UNVEIL_IMAGE_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("UNVEIL_CACHE", "off")
    monkeypatch.setenv("UNVEIL_BACKOFF_BASE", "0.01")
    for name in list(os.environ):
        if name.startswith("UNVEIL_") and name not in ("UNVEIL_IMAGE_STORE", "UNVEIL_CACHE", "UNVEIL_BACKOFF_BASE"):
            monkeypatch.delenv(name)
    if os.environ.get("OMP_NUM_THREADS"):
        # llama.cpp sizes its pool by the CPUs, not OMP_NUM_THREADS: the worker's share of the cores for it too, else
        # its threads spin waiting on each other beside the other worker's (the embedded SmolLM2 call: 23 s, not 10).
        monkeypatch.setenv("UNVEIL_LLAMA_THREADS", os.environ["OMP_NUM_THREADS"])
    set_gateway(None)
    yield
    set_gateway(None)


@pytest.fixture
def gateway() -> Gateway:
    """A fresh process gateway without a cache."""
    gw = Gateway(GatewaySettings(cache_path=None, backoff_base=0.01))
    set_gateway(gw)
    return gw


@pytest.fixture
def no_pictures(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation's figures are neither drawn nor written (about 0.3 s a figure on 2 cores: its layout, then the
    PNG), for tests whose subject is not the pictures; the tables and every value a figure would show are still
    computed. tests/evaluation/test_eval_report.py draws each kind of figure and checks it, and
    tests/evaluation/test_eval_detection.py, test_eval_compare.py and test_eval_ipr.py write them from a whole run."""
    from evaluation import compare, detection, ipr_ablation, ipr_tables

    def no_figure(*args: object, **kwargs: object) -> None:
        return None

    for module, names in (
        (detection, ("plot_confusion", "plot_histogram")),
        (ipr_tables, ("plot_lines",)),
        (ipr_ablation, ("plot_lines",)),
        (compare, ("plot_comparison",)),
    ):
        for name in names:
            monkeypatch.setattr(module, name, no_figure)


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[dict[str, Any], str], str]:
    """Write a scripted-provider file and return its `scripted:` spec."""

    def write(answers: dict[str, Any], name: str = "script.json") -> str:
        path = tmp_path / name
        path.write_text(json.dumps(answers), encoding="utf-8")
        return f"scripted:{path}"

    return write


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LanggraphServer:
    """A running `langgraph dev` process."""

    def __init__(self, url: str, proc: subprocess.Popen, log: Path, home: Path, images: Path):
        self.url, self.proc, self.log, self.home, self.images = url, proc, log, home, images
        self.review_dir = log.parent / "review"


STUDIO_PORT_IN_README = 2025


def readme_studio_command() -> str:
    """The README's `langgraph dev` command line, exactly as written there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [
        line.strip()
        for line in text.splitlines()
        if "langgraph dev" in line and not line.lstrip().startswith(("#", "|"))
    ]
    commands = [line for line in lines if line.split()[0].endswith("=1") or line.startswith("langgraph")]
    assert commands, "README.md shows no `langgraph dev` command"
    return commands[0]


@pytest.fixture(scope="module")
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanggraphServer]:
    """Start `langgraph dev` exactly as README.md says (its command line, only the port substituted), in the repo.

    The environment is a user's default one: the response cache and the image store at their default places (HOME
    points at a temporary folder so the user's own are untouched), no `UNVEIL_*` overrides but the server's own
    folders (`UNVEIL_IMAGE_ROOTS`, `UNVEIL_FILE_ROOTS`, `UNVEIL_REVIEW_DIR`), and no `--allow-blocking`, so a
    blocking call in a graph node fails here as it would for a user. Tests pass models per run through the graphs'
    context, so one server serves every test of a module.
    """
    pytest.importorskip("langgraph_api")
    workdir = tmp_path_factory.mktemp("langgraph")
    home = workdir / "home"
    home.mkdir()
    port = free_port()
    log = workdir / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNVEIL_", "LANGSMITH_", "LANGCHAIN_"))}
    # The console script next to this interpreter (a version manager's shim would look for its root under HOME).
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["HOME"] = str(home)
    env.pop("XDG_CACHE_HOME", None)
    images = workdir / "images"  # the one folder of sample images the server allows (its own setting)
    images.mkdir()
    env["UNVEIL_IMAGE_ROOTS"] = str(images)
    # The folder a run's context may name files in (scripts, templates, stores): the tests' own temporary folders.
    env["UNVEIL_FILE_ROOTS"] = str(tmp_path_factory.getbasetemp())
    env["UNVEIL_REVIEW_DIR"] = str(workdir / "review")  # the review folder Studio shares with the web app
    command = readme_studio_command()
    assert f"--port {STUDIO_PORT_IN_README}" in command
    command = command.replace(f"--port {STUDIO_PORT_IN_README}", f"--port {port}")
    with log.open("wb") as fh:
        # Its own process group, so stopping it stops the shell and the server together.
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited early:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"langgraph dev did not start:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        yield LanggraphServer(url, proc, log, home, images)
    finally:
        if proc.poll() is None:  # a test may have stopped it to read what it writes as it stops
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
