"""Every file Unveil reads is a regular file, read with a cap: a FIFO or `/dev/zero` in a file's place is refused
at once (never a hang holding a lock, never a read without end), and an output's lines are read capped on resume.

The attacks: a settings sidecar linked to `/dev/zero` grew the run to 18.6 GB; the same sidecar as a FIFO hung the
run for ever while it held the output's lock; a 3 GiB line in an output took 3.3 GB on resume. Each test here
would hang (the suite's 300 s timeout fails it) or read without end if the open blocked or the read were uncapped.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem
from runner.output_identity import OutputIdentity, OutputSettingsError, read_identity, settings_path
from tools.safe_files import UnreadableFileError, UnsafePathError

IDENTITY = OutputIdentity("detect", {"model": "m"})


async def _echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
    return {"echo": sid}


def _run(out: Path, n: int = 3) -> Any:
    items = [BatchItem(f"s{i}", {}) for i in range(n)]
    return asyncio.run(run_batch(items, _echo, BatchRun(out, progress=False, identity=IDENTITY)))


def _hostile(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_settings_sidecar_that_is_a_fifo_or_dev_zero_is_not_read(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out.jsonl"
    _run(out)
    _hostile(settings_path(out), kind)
    assert read_identity(out) is None  # refused at once: not a regular file (or a link)
    # A resume then refuses the output as having no readable settings, without hanging while it holds the lock.
    with pytest.raises(OutputSettingsError, match="no record of the settings"):
        _run(out)
    assert len(out.read_text().splitlines()) == 3


def test_a_sidecar_over_the_cap_is_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner import output_identity

    out = tmp_path / "out.jsonl"
    _run(out)
    monkeypatch.setattr(output_identity, "MAX_SIDECAR_BYTES", 64)
    assert read_identity(out) is None


@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.torn"])
def test_an_output_or_its_torn_file_that_is_a_fifo_is_refused(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out.jsonl"
    _run(out)
    lines = out.read_bytes().split(b"\n")
    out.write_bytes(lines[0][:20] + lines[1] + b"\n" + lines[2] + b"\n")  # a torn middle line: .torn is written
    _hostile(tmp_path / name, "fifo")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        _run(out)


def test_an_overlong_output_line_is_set_aside_in_chunks_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner import output_identity

    out = tmp_path / "out.jsonl"
    _run(out)
    monkeypatch.setattr(output_identity, "MAX_LINE_BYTES", 1000)
    lines = out.read_bytes().split(b"\n")
    long_line = b'{"id": "s1", "status": "ok", "pad": "' + b"x" * 50_000 + b'"}\n'
    out.write_bytes(lines[0] + b"\n" + long_line + lines[2] + b"\n")
    summary = _run(out)
    assert summary.completed == 1  # the sample of the set-aside line runs again
    assert (tmp_path / "out.jsonl.torn").read_bytes() == long_line  # kept whole, copied in chunks
    assert sorted(json.loads(x)["id"] for x in out.read_text().splitlines()) == ["s0", "s1", "s2"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_scripts_prices_configs_and_images_must_be_regular_files(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.providers.scripted import Script
    from agents.usage import price_table
    from tools.image_store import ImageInputError, read_file_capped
    from training.config import read_config_file

    bad = tmp_path / "bad.json"
    _hostile(bad, kind)
    with pytest.raises((FileNotFoundError, UnreadableFileError)):  # refused at once, not read
        Script(bad)
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        read_config_file(bad)
    monkeypatch.setenv("UNVEIL_PRICES", str(bad))
    price_table.cache_clear()
    try:
        with pytest.raises(UnreadableFileError, match="not a regular file"):
            price_table()
    finally:
        monkeypatch.delenv("UNVEIL_PRICES")
        price_table.cache_clear()
    with pytest.raises(ImageInputError, match="bad.json': not a regular file"):
        read_file_capped(bad)


def test_an_input_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    from tools.jsonl_files import iter_lines

    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFileError, match="not a regular file"):
        list(iter_lines(fifo))


def test_a_resume_looks_for_configuration_failures_line_by_line(tmp_path: Path) -> None:
    """The look for an output of nothing but configuration failures (`forget_configuration_failures`, at every
    resume) read the whole file: a 3 GiB line was a MemoryError. It reads with the line cap now: an output whose
    second line is eight times the cap is left alone, and the most held at once stays well under that line's size."""
    import tracemalloc

    from runner.batch import forget_configuration_failures
    from tools.jsonl_files import MAX_LINE_BYTES

    out = tmp_path / "out.jsonl"
    failure = {"id": "a", "status": "failed", "error": "SettingError: ...", "error_kind": "configuration"}
    long_line = b'{"id": "b", "status": "failed", "pad": "' + b"x" * (8 * MAX_LINE_BYTES) + b'"}\n'
    out.write_bytes(json.dumps(failure).encode() + b"\n" + long_line)
    tracemalloc.start()
    try:
        assert forget_configuration_failures(out) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE_BYTES and out.stat().st_size == len(json.dumps(failure)) + 1 + len(long_line)
