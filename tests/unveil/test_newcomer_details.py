"""The smaller things a newcomer tripped on (issue 33, item 8), each driven as the user meets it: `--help` imports no
model stack, `unveil roles BADNAME` fails naming it, `unveil ui` on a busy port says so before any address, Ray's
own flag names stay out of Unveil's errors, boolean settings read as the words the flags take, failures list in
input order, `--no-progress` quiets the libraries' bars, a refused Studio image path names where it resolved."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cli_args import refusal
from tests.conftest import ROOT
from unveil.cli import main

HEAVY = ("langchain_core", "torch", "transformers", "agents.gateway", "runner.detect", "langgraph")


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/nonexistent"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_help_loads_no_model_stack() -> None:
    # `unveil --help` (and every subcommand's) once imported LangChain and the run layer: seconds of CPU for a page.
    proc = _run_python(
        f"""
        import sys
        from unveil.cli import main
        for argv in (["--help"], ["detect", "--help"], ["train", "sft", "--help"]):
            try:
                main(argv)
            except SystemExit:
                pass
        print("LOADED", sorted(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout[-2000:]


def test_roles_with_an_unknown_name_fails_naming_it(capsys: Any) -> None:
    assert main(["roles", "pair_judgee"]) == 1
    err = capsys.readouterr().err
    assert "no role matches 'pair_judgee'" in err and "pair_judge" in err
    assert main(["roles", "pair_judge"]) == 0
    assert "pair_judge" in json.loads(capsys.readouterr().out)["structured"]


def test_ui_on_a_busy_port_says_so_before_printing_an_address(tmp_path: Path, capsys: Any) -> None:
    results = tmp_path / "detect.jsonl"
    results.write_text(json.dumps({"id": "p0", "status": "ok", "toxic": False}) + "\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = refusal(["ui", str(results), "--port", str(port)], capsys)
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert "open http" not in err


def test_a_ray_connection_error_names_unveils_flag_not_rays(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from runner.ray import cluster

    said = (
        "Could not find any running Ray instance. Please specify the one to connect to by setting `--address` flag "
        "or `RAY_ADDRESS` environment variable."
    )

    def refuse(**_kw: Any) -> None:
        raise ConnectionError(said)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConnectionError) as exc:
        cluster.connect("auto")
    message = str(exc.value)
    assert "`--address`" not in message and "--ray-address" in message and "ray start --head" in message


def test_boolean_settings_read_as_the_words_their_flags_take(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["train", "sft", "--help"])
    out = capsys.readouterr().out
    assert "(default no)" in out and "(default yes)" in out
    assert "(default False)" not in out and "(default True)" not in out


async def test_failures_are_listed_in_input_order(tmp_path: Path) -> None:
    import asyncio

    from runner.batch import BatchRun, run_batch
    from runner.batch_input import BatchItem

    finished = [asyncio.Event() for _ in range(5)]

    async def worker(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        i = record["i"]
        if i < 4:
            await finished[i + 1].wait()  # each sample finishes after the next one: the last first
        finished[i].set()
        raise ValueError(f"bad {sample_id}")

    items = [BatchItem(f"s{i}", {"i": i}) for i in range(5)]
    summary = await run_batch(items, worker, BatchRun(tmp_path / "out.jsonl", concurrency=5, progress=False))
    assert [f["id"] for f in summary.failures] == ["s0", "s1", "s2", "s3", "s4"]


def test_no_progress_quiets_the_libraries_bars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import huggingface_hub.utils as hub
    import transformers.utils.logging as tl

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"vanilla_detector": [{"when": "", "then": {"toxic": False}}]}))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")  # unset, as for a user (and put back afterwards)
    bars_were_on, hub_bars_were_off = tl.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    tl.enable_progress_bar()  # on, as in a new process: an earlier run in this one may have turned them off
    try:
        rc = main(
            ["detect", "--method", "vanilla", "--no-progress", "--model", f"scripted:{script}", "--cache", "off"]
            + ["--output", str(tmp_path / "out.jsonl"), "--image-store", str(tmp_path / "store")]
        )
        assert (rc, tl.is_progress_bar_enabled(), os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")) == (0, False, "1")
    finally:
        (tl.enable_progress_bar if bars_were_on else tl.disable_progress_bar)()
        (hub.disable_progress_bars if hub_bars_were_off else hub.enable_progress_bars)()


def test_a_refused_image_path_names_where_it_resolved(tmp_path: Path) -> None:
    from graphs.ingest import allowed_image_path
    from tools.errors import UnveilError

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.png").write_bytes(b"x")
    with pytest.raises(UnveilError) as exc:
        allowed_image_path("a.png", str(tmp_path / "data"), [tmp_path / "elsewhere"])
    message = str(exc.value)
    assert f"resolved to '{(tmp_path / 'data' / 'a.png').resolve()}'" in message
    assert f"add its folder ('{(tmp_path / 'data').resolve()}')" in message


def test_render_of_a_vanilla_verdict_is_not_called_a_tag_picture(tmp_path: Path, capsys: Any) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "fine"}}]}))
    picture = tmp_path / "verdict.png"
    argv = ["detect", "--method", "vanilla", "--text", "Hi.", "--image-description", "a cup", "--render", str(picture)]
    assert main([*argv, "--model", f"scripted:{script}", "--cache", "off", "--image-store", str(tmp_path / "st")]) == 0
    err = capsys.readouterr().err
    assert picture.is_file() and f"picture of the verdict written to {picture}" in err and "TAG picture" not in err
