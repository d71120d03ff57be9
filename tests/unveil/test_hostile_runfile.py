"""`unveil run --dry-run` of a hostile run file, which is how one checks a file received from someone else: every
case ends in one short error naming the file and exit 1, never a hang, a crash (exit 70) or memory without end.
The issue's cases: `input = "/dev/zero"` (read until memory ran out), a FIFO input (hung), a 1.2 KB YAML alias bomb
(a 522 MB error message), 100,000-deep nesting and a 1 GiB run file (both exit 70)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from unveil.cli import main

# An error is one line naming the file; a quoted value is cut well below this.
MAX_ERROR_CHARS = 3000


def _dry_run(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["run", str(path), "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert len(captured.err) < MAX_ERROR_CHARS and "internal error" not in captured.err
    return captured.err


def _detect_job(tmp_path: Path, input_path: Path) -> Path:
    run_file = tmp_path / "run.toml"
    run_file.write_text(f'model = "openai:gpt-4.1"\n[[jobs]]\ncommand = "detect"\ninput = "{input_path}"\n')
    return run_file


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_input_is_refused_not_read(tmp_path, capsys, device):
    err = _dry_run(_detect_job(tmp_path, Path(device)), capsys)
    assert device in err and "not a regular file" in err


@pytest.mark.parametrize(
    "job",
    ['command = "evaluate ipr"\nprompts = "{}"', 'command = "evaluate detection"\ndataset = ["ctd:{}"]'],
)
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_an_evaluation_dataset_that_is_not_a_regular_file_is_refused(tmp_path, capsys, job, kind):
    """The evaluations' inputs are read by their loaders: `/dev/zero` as the prompts was a crash (exit 70)."""
    target = Path("/dev/zero")
    if kind == "fifo":
        target = tmp_path / "data.jsonl"
        os.mkfifo(target)
    run_file = tmp_path / "run.toml"
    run_file.write_text(f"[[jobs]]\n{job.format(target)}\n")
    assert str(target) in _dry_run(run_file, capsys)


def test_a_fifo_as_input_is_refused_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "pairs.jsonl"
    os.mkfifo(fifo)  # nobody ever writes to it: a blocking open would wait for ever
    err = _dry_run(_detect_job(tmp_path, fifo), capsys)
    assert "not a regular file" in err


def test_an_input_is_counted_as_the_batch_reads_it(tmp_path, capsys):
    """Lines over the batch reader's cap are counted without being held (they are failures when run)."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b'{"id": "a", "text": "x"}\n' + b"y" * (5 * 1024 * 1024) + b'\n{"id": "b", "text": "z"}\n\n')
    assert main(["run", str(_detect_job(tmp_path, pairs)), "--dry-run"]) == 0
    assert "3 samples x" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["fifo", "device link", "over the cap"])
def test_a_run_file_that_is_not_a_small_regular_file_is_refused(tmp_path, capsys, kind):
    run_file = tmp_path / "run.toml"
    if kind == "fifo":
        os.mkfifo(run_file)
    elif kind == "device link":
        run_file.symlink_to("/dev/zero")
    else:
        with open(run_file, "wb") as fh:  # 1 GiB, sparse: no disk used
            fh.truncate(1024**3)
    err = _dry_run(run_file, capsys)
    assert str(run_file) in err and ("not a regular file" in err or "limit" in err)


LAUGHS = "\n".join(
    [
        'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"{n}: &{n} [{', '.join(['*' + p] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
    ]
)


@pytest.mark.parametrize(
    "job",
    [
        "command: detect\n    methods: *i",
        "command: detect\n    name: *i",
        "command: *i",
        "command: detect\n    role_model: {pair_judge: *i}",
        "command: detect\n    input: *i",
    ],
)
def test_a_yaml_alias_bomb_is_one_short_error(tmp_path, capsys, job):
    pytest.importorskip("yaml")
    run_file = tmp_path / "run.yaml"
    run_file.write_text(f"{LAUGHS}\njobs:\n  - {job}\n")
    assert run_file.stat().st_size < 1500
    assert "expand" in _dry_run(run_file, capsys)


# Values that stay under the expansion limit but are large: each is quoted, cut, in the error it causes.
BIG = "x" * 200_000


@pytest.mark.parametrize(
    "job",
    [
        f'command = "{BIG}"',
        f'command = "detect"\nname = ["{BIG}"]',
        f'command = "detect"\ninput = ["{BIG}", ["nested"]]',
        f'command = "detect"\nrole_model = {{pair_judge = ["{BIG}"]}}',
        f'command = "detect"\n{BIG} = 1',
        f'command = "detect"\nmethod = {{a = "{BIG}"}}',
    ],
)
def test_every_value_quoted_in_an_error_is_cut(tmp_path, capsys, job):
    run_file = tmp_path / "run.toml"
    run_file.write_text(f"[[jobs]]\n{job}\n")
    _dry_run(run_file, capsys)


@pytest.mark.parametrize(
    ("suffix", "text"),
    [
        (".toml", "a = " + "[" * 100_000 + "]" * 100_000 + "\n[[jobs]]\ncommand = 'detect'\n"),
        (".yaml", "jobs: " + "[" * 100_000 + "]" * 100_000 + "\n"),
        (".toml", "[[jobs]]\ncommand = 'detect'\nmethods = " + "[" * 40 + "]" * 40 + "\n"),
    ],
)
def test_deep_nesting_is_a_bad_file(tmp_path, capsys, suffix, text):
    if suffix == ".yaml":
        pytest.importorskip("yaml")
    run_file = tmp_path / f"run{suffix}"
    run_file.write_text(text)
    assert "nested" in _dry_run(run_file, capsys)
