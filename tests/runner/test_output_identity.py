"""Outputs know what made them: a rerun with other settings, another command's output or the input itself is refused
before anything is written or any model called; the run lock holds the file under every name; exit codes count the
failures already in the output; rewrites follow the umask; configuration and flag errors stop the command at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem
from runner.output_identity import OutputIdentity, read_identity, settings_path
from tests.cli_args import refusal
from tests.faultserver import FaultServer, UnveilAnswers
from tools.atomic_files import OutputBusyError, atomic_write_text
from tools.safe_files import UnsafePathError
from unveil.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = {"vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "an ordinary pair"}}]}


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return f"scripted:{path}"


def _pairs(path: Path, n: int = 2, **extra: Any) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "text": f"text {i}", "image_description": "a picture", **extra}) + "\n"
            for i in range(n)
        )
    )
    return path


def test_a_rerun_with_another_model_is_refused_before_any_model_call(
    spec: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    # The reported case: a finished run, then the same command with another --model on an OpenAI-compatible server.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "o.jsonl"
    assert main(["detect", "--model", spec, "--method", "vanilla", "--output", str(out), "--no-progress"]) == 0
    before = out.read_bytes()
    assert read_identity(out)["settings"]["models"]["vanilla_detector"] == spec
    capsys.readouterr()
    with FaultServer(UnveilAnswers()) as server:
        rc = main(
            ["detect", "--model", server.spec("smollm2"), "--method", "vanilla", "--output", str(out), "--no-progress"]
        )
        assert rc == 1 and server.bodies == []  # refused: the server never saw a request
    err = capsys.readouterr().err
    assert "other settings" in err and "vanilla_detector" in err and spec in err and "smollm2" in err
    assert "--output" in err and "--allow-mixed-settings" in err
    assert out.read_bytes() == before  # and nothing was written


def test_another_model_gets_its_own_default_output(spec: str, tmp_path: Path, monkeypatch, capsys) -> None:
    from agents.spec import DEFAULT_SPEC
    from unveil.commands.common import default_output_name

    # the embedded model keeps the README's name; any other model (the same weights through llama.cpp included) gets
    # a file of its own
    assert default_output_name("detect-tag-pairs", {"pair_judge": DEFAULT_SPEC}) == "detect-tag-pairs.jsonl"
    assert default_output_name("detect-tag-pairs", ["transformers:SmolLM2-135M"]) == "detect-tag-pairs.jsonl"
    assert default_output_name("d", ["llamacpp:smollm2"]) == "d-llamacpp-smollm2.jsonl"
    one = default_output_name("d", ["openai:smollm2@http://127.0.0.1:8081/v1"])
    assert one.startswith("d-openai-smollm2-") and one.endswith(".jsonl")
    assert default_output_name("d", ["openai:smollm2@http://127.0.0.1:8082/v1"]) != one
    # a password in the URL is not part of the name (nor of its hash)
    assert default_output_name("d", ["openai:smollm2@http://u:pw@127.0.0.1:8081/v1"]) == default_output_name(
        "d", ["openai:smollm2@http://u:other@127.0.0.1:8081/v1"]
    )
    monkeypatch.chdir(tmp_path)
    assert main(["detect", "--model", spec, "--method", "vanilla", "--no-progress"]) == 0
    with FaultServer(UnveilAnswers()) as first, FaultServer(UnveilAnswers()) as second:
        for server in (first, second):  # two servers serving the same model name
            assert main(["detect", "--model", server.spec("smollm2"), "--method", "vanilla", "--no-progress"]) == 0
            assert server.bodies  # the new model really ran
    files = sorted(p.name for p in (tmp_path / "runs").glob("*.jsonl"))
    assert len(files) == 3 and "detect-vanilla-pairs-scripted-script.json.jsonl" in files
    assert sum(f.startswith("detect-vanilla-pairs-openai-smollm2-") for f in files) == 2


def test_an_edited_script_on_the_same_output_is_refused_as_a_model_change(
    spec: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["detect", "--model", spec, "--method", "vanilla", "--no-progress"]
    assert main(argv) == 0
    output = tmp_path / "runs" / "detect-vanilla-pairs-scripted-script.json.jsonl"
    before = output.read_bytes()
    assert main(argv) == 0  # the same script: resumed (nothing to do)
    script = Path(spec.removeprefix("scripted:"))
    script.write_text(script.read_text(encoding="utf-8").replace("}", " }", 1), encoding="utf-8")
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "other settings" in err and "model_content" in err and "vanilla_detector" in err, err
    assert output.read_bytes() == before


def test_a_foreign_output_or_the_input_itself_is_refused_before_anything_is_written(
    spec: str, tmp_path: Path, capsys
) -> None:
    src = _pairs(tmp_path / "pairs.jsonl")
    # a results file of `unveil refine` given to `unveil detect`
    refine_out = tmp_path / "refined.jsonl"

    async def echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": rec["text"]}

    asyncio.run(
        run_batch(
            [BatchItem("p0", {"text": "x"})],
            echo,
            BatchRun(refine_out, progress=False, identity=OutputIdentity("refine", {"t_max": 3})),
        )
    )
    before = refine_out.read_bytes()
    assert (
        main(
            [
                "detect",
                "--model",
                spec,
                "--method",
                "vanilla",
                "--input",
                str(src),
                "--output",
                str(refine_out),
                "--no-progress",
                "--allow-mixed-settings",
            ]
        )
        == 1
    )
    assert "result file of `unveil refine`" in capsys.readouterr().err
    assert refine_out.read_bytes() == before
    # an input whose lines carry `status` given as its own output: --retry-failed must never delete its lines
    tricky = _pairs(tmp_path / "tricky.jsonl", status="failed")
    text = tricky.read_bytes()
    link = tmp_path / "tricky-link.jsonl"
    link.symlink_to(tricky)
    for output in (tricky, link):
        for extra in ([], ["--allow-mixed-settings"]):
            rc = main(
                [
                    "detect",
                    "--model",
                    spec,
                    "--method",
                    "vanilla",
                    "--input",
                    str(tricky),
                    "--output",
                    str(output),
                    "--retry-failed",
                    "--no-progress",
                    *extra,
                ]
            )
            assert rc == 1 and "is the input file" in capsys.readouterr().err
    assert tricky.read_bytes() == text and not settings_path(tricky).exists()


def test_an_output_without_recorded_settings_is_refused_with_a_clear_message(spec: str, tmp_path: Path, capsys) -> None:
    src = _pairs(tmp_path / "pairs.jsonl", n=3)
    out = tmp_path / "o.jsonl"
    argv = [
        "detect",
        "--model",
        spec,
        "--method",
        "vanilla",
        "--input",
        str(src),
        "--output",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n")  # an older Unveil's output: records, no settings beside them
    settings_path(out).unlink()
    capsys.readouterr()
    assert main(argv) == 1
    assert "no record of the settings" in capsys.readouterr().err
    assert main([*argv, "--allow-mixed-settings"]) == 0  # readable and resumable on request
    assert len(out.read_text().splitlines()) == 3
    assert read_identity(out)["mixed"][0]["settings"] is None  # the sidecar says part of it is of unknown settings


def _hold(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tools.atomic_files import exclusive_output
        with exclusive_output({str(path)!r}):
            print("held", flush=True)
            time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_the_run_lock_holds_the_file_under_every_name(tmp_path: Path, link: str) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("")
    other = tmp_path / "other-name.jsonl"
    other.symlink_to(out) if link == "symlink" else os.link(out, other)

    async def echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    holder = _hold(out)
    try:
        # a hard link is the same file: busy; a symbolic link is refused outright, before any lock file is made
        with pytest.raises(OutputBusyError if link == "hardlink" else UnsafePathError):
            asyncio.run(run_batch([BatchItem("a", {})], echo, BatchRun(other, progress=False)))
    finally:
        holder.kill()
        holder.wait()
    assert out.read_text() == ""
    # three processes on three names of one file: every record is written once
    third = tmp_path / "third.jsonl"
    third.symlink_to(other) if link == "symlink" else os.link(out, third)
    code = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(ROOT)!r})
        from runner.batch import BatchRun, run_batch
        from runner.batch_input import BatchItem
        from tools.atomic_files import OutputBusyError
        from tools.safe_files import UnsafePathError
        async def work(sid, rec):
            await asyncio.sleep(0.05)
            return {{"ok": True}}
        try:
            items = [BatchItem(f"s{{i}}", {{}}) for i in range(20)]
            asyncio.run(run_batch(items, work, BatchRun(sys.argv[1], progress=False)))
        except OutputBusyError:
            pass
        except UnsafePathError:  # a symlinked output is refused outright (writes never follow a link)
            sys.exit(3)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)]) for p in (out, other, third)]
    codes = [proc.wait(60) for proc in procs]
    # Every hard link shares the lock (busy: exit 0 here); a symlink's name is refused before anything (exit 3).
    assert codes[1:] == ([3, 3] if link == "symlink" else [0, 0]), codes
    assert codes[0] == 0
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(ids) == len(set(ids))


def test_a_rerun_counts_the_failures_already_in_the_output(spec: str, tmp_path: Path, capsys) -> None:
    src = tmp_path / "pairs.jsonl"
    src.write_text('{"id": "a", "text": "t", "image_description": "d"}\nnot json\n')
    out = tmp_path / "o.jsonl"
    argv = [
        "detect",
        "--model",
        spec,
        "--method",
        "vanilla",
        "--input",
        str(src),
        "--output",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 2
    capsys.readouterr()
    assert main(argv) == 2  # nothing ran, but the output still holds a failed record
    err = capsys.readouterr().err
    assert "0 done, 0 failed, 2 already in" in err and "(1 of them failed then)" in err and "--retry-failed" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n[1]\n")  # an all-failed batch, rerun
    argv = [
        "detect",
        "--model",
        spec,
        "--method",
        "vanilla",
        "--input",
        str(bad),
        "--output",
        str(tmp_path / "b.jsonl"),
        "--no-progress",
    ]
    assert main(argv) == 2 and main(argv) == 2


def test_rewritten_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "view.jsonl", "x\n")
        assert (tmp_path / "view.jsonl").stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.jsonl", "x\n")
        assert (tmp_path / "private.jsonl").stat().st_mode & 0o777 == 0o600
        os.umask(0o002)

        async def echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
            return {}

        out = tmp_path / "out.jsonl"
        asyncio.run(
            run_batch([BatchItem("a", {})], echo, BatchRun(out, progress=False, identity=OutputIdentity("x", {})))
        )
        assert out.stat().st_mode & 0o777 == 0o664 and settings_path(out).stat().st_mode & 0o777 == 0o664
        (tmp_path / "view.jsonl").chmod(0o640)
        atomic_write_text(tmp_path / "view.jsonl", "y\n")  # a rewrite keeps the file's own mode
        assert (tmp_path / "view.jsonl").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    "method, env, what",
    [
        ("guard:no-such-guard", {}, "unknown guard"),
        ("guard:template=/no/such/template.toml", {}, "template.toml"),
        ("vanilla", {"UNVEIL_REQUEST_TIMEOUT": "soon"}, "UNVEIL_REQUEST_TIMEOUT"),
        ("vanilla", {"UNVEIL_IMAGE_REQUEST_TIMEOUT": "-1"}, "UNVEIL_IMAGE_REQUEST_TIMEOUT"),
    ],
)
def test_configuration_errors_stop_the_command_before_the_first_sample(
    spec: str, tmp_path: Path, monkeypatch, capsys, method: str, env: dict[str, str], what: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    src = _pairs(tmp_path / "pairs.jsonl", n=3)
    out = tmp_path / "o.jsonl"
    argv = ["detect", "--model", spec, "--role-model", f"guard={spec}", "--method", method, "--input", str(src)]
    assert what in refusal([*argv, "--output", str(out), "--no-progress"], capsys)  # one message, exit 1
    assert not out.exists()  # no failure per sample


@pytest.mark.parametrize(
    "argv, what",
    [
        (["evaluate", "detection", "--dataset", "d.jsonl", "--limit", "-1"], "--limit"),
        (["generate", "--category", "drugs", "--n", "99999999999", "--out", "OUT"], "--n"),
        (["refine", "--input", "p.jsonl", "--num-images", "99999999999"], "--num-images"),
        (["evaluate", "detection", "--dataset", "d.jsonl", "--beta", "nan"], "--beta"),
        (["ui", "x.jsonl", "--port", "99999"], "--port"),
        (["evaluate", "ipr", "--prompts", "p.jsonl", "--ipr-t-max", "1,-2"], "--ipr-t-max"),
        (["detect", "--l-max", "0"], "--l-max"),
        (["refine", "a cat", "--guidance", "inf"], "--guidance"),
    ],
)
def test_numeric_flags_are_bounded_and_usage_errors_exit_1(argv: list[str], what: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 1 and what in capsys.readouterr().err


def test_render_into_a_missing_folder_is_refused_without_creating_it(tmp_path: Path, capsys) -> None:
    target = tmp_path / "missing" / "dir" / "t.png"
    with pytest.raises(SystemExit) as exc:
        main(["detect", "--text", "t", "--image-description", "d", "--render", str(target)])
    assert exc.value.code == 1 and "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def test_the_settings_sidecar_keeps_its_format_through_a_mixed_rerun(tmp_path: Path) -> None:
    # The sidecar is read back by older and newer versions alike: its keys, their order and the list of mixed
    # settings are its format (a tuple and a list of the same specs are one setting).
    out = tmp_path / "o.jsonl"

    async def echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
        return {"echo": rec["t"]}

    def run(settings: dict[str, Any], command: str, allow_mixed: bool = False) -> None:
        items = [BatchItem(f"s{i}", {"t": i}) for i in range(2)]
        identity = OutputIdentity("detect", settings, command, allow_mixed=allow_mixed)
        asyncio.run(run_batch(items, echo, BatchRun(out, progress=False, kind="detect", identity=identity)))

    run({"models": ("a", "b"), "l_max": 3}, "unveil detect --l-max 3")
    first = {
        "format": 1,
        "kind": "detect",
        "settings": {"l_max": 3, "models": ["a", "b"]},
        "command": "unveil detect --l-max 3",
        "mixed": [],
    }
    assert settings_path(out).read_text(encoding="utf-8") == json.dumps(first, indent=1) + "\n"
    run({"models": ["a", "b"], "l_max": 3}, "unveil detect again")  # the same settings: nothing to record
    run({"models": ["a", "b"], "l_max": 4}, "unveil detect --l-max 4", allow_mixed=True)
    mixed = {**first, "mixed": [{"command": "unveil detect --l-max 4", "settings": {"l_max": 4, "models": ["a", "b"]}}]}
    assert settings_path(out).read_text(encoding="utf-8") == json.dumps(mixed, indent=1) + "\n"
