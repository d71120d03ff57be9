"""The batch runner's promises about what it writes: whole records or a loud failure (a full disk), one writer per
output, no output that is not its own, ids that never collide, lines split on `\\n` only."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.batch import BatchRun, run_batch
from runner.batch_input import BatchItem, read_jsonl
from tools import jsonl_files
from tools.atomic_files import BatchWriteError, OutputBusyError, OutputMismatchError
from tools.jsonl_files import JsonlAppender

ROOT = Path(__file__).resolve().parents[2]


def _items(n: int) -> list[BatchItem]:
    return [BatchItem(f"s{i}", {"text": f"sample {i}"}) for i in range(n)]


async def _echo(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"echo": rec["text"], "pad": "x" * 200}


def _lines(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "the file must end on a whole line"
    return [json.loads(line) for line in raw.split(b"\n") if line]


def test_a_short_write_is_cut_back_and_raised_and_a_rerun_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    real_write = os.write

    def flaky_write(fd: int, data: Any) -> int:
        if b'"s3"' in bytes(data):  # the 4th record: half of it fits, then the disk is full
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", flaky_write)
    with pytest.raises(BatchWriteError) as err:
        asyncio.run(run_batch(_items(10), _echo, BatchRun(out, concurrency=1, progress=False)))
    assert str(out) in str(err.value) and "No space left" in str(err.value)
    written = _lines(out)  # every line parses: the half record was cut off, not fused with the next
    assert len(written) == 3
    monkeypatch.setattr(os, "write", real_write)
    summary = asyncio.run(run_batch(_items(10), _echo, BatchRun(out, concurrency=3, progress=False)))
    assert summary.skipped == 3 and summary.completed == 7
    ids = [r["id"] for r in _lines(out)]
    assert sorted(ids) == sorted(f"s{i}" for i in range(10)) and len(ids) == len(set(ids))


def test_a_write_that_makes_no_progress_fails_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(BatchWriteError, match="accepted no more bytes"):
        asyncio.run(run_batch(_items(2), _echo, BatchRun(tmp_path / "o.jsonl", concurrency=1, progress=False)))


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )


def test_a_real_full_disk_leaves_whole_records_only(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "16k"):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        out = disk / "out.jsonl"
        with pytest.raises(BatchWriteError):
            asyncio.run(run_batch(_items(200), _echo, BatchRun(out, concurrency=4, progress=False)))
        kept = _lines(out)
        assert 0 < len(kept) < 200 and len({r["id"] for r in kept}) == len(kept)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize(
    "bad_line",
    [
        '{"id": "big", "n": ' + "9" * 5000 + "}",
        '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
)
def test_a_line_that_does_not_parse_becomes_its_own_failed_record(tmp_path: Path, bad_line: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "x"}\n' + bad_line + '\n{"id": "b", "text": "y"}\n', encoding="utf-8")
    items = list(read_jsonl(src))
    assert [it.id for it in items] == ["a", "line-2", "b"]
    assert items[1].error and "line 2" in items[1].error
    summary = asyncio.run(
        run_batch(
            items, lambda i, r: _echo(i, {"text": r.get("text", "")}), BatchRun(tmp_path / "o.jsonl", progress=False)
        )
    )
    assert summary.completed == 2 and summary.failed == 1


def test_an_overlong_line_is_skipped_without_being_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_files, "MAX_LINE_BYTES", 1000)
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a"}\n{"id": "big", "t": "' + "x" * 50_000 + '"}\n{"id": "b"}\n', encoding="utf-8")
    reads: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def readline(self, size: int = -1) -> bytes:
            line = self.fh.readline(size)
            reads.append(len(line))
            return line

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.fh.close()

    monkeypatch.setattr(jsonl_files, "open", lambda p, mode="r": Spy(real_open(p, mode)), raising=False)
    items = list(read_jsonl(src))
    assert [it.id for it in items] == ["a", "line-2", "b"] and "over 1000 bytes" in (items[1].error or "")
    assert max(reads) <= 1001  # bounded reads: the 50 kB line was never held whole


def test_a_second_writer_of_the_same_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tools.atomic_files import exclusive_output
        with exclusive_output({str(out)!r}):
            print("held", flush=True)
            time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError, match=f"pid {holder.pid}"):
            asyncio.run(run_batch(_items(3), _echo, BatchRun(out, progress=False)))
        assert not out.exists() or out.read_bytes() == b""
    finally:
        holder.kill()
        holder.wait()
    # the lock dies with its holder: no stale lock after a killed run
    assert asyncio.run(run_batch(_items(3), _echo, BatchRun(out, progress=False))).completed == 3


def test_two_runs_in_one_process_on_one_output_do_not_both_run(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"

    async def both() -> list[Any]:
        return await asyncio.gather(
            run_batch(_items(20), _echo, BatchRun(out, progress=False)),
            run_batch(_items(20), _echo, BatchRun(out, progress=False)),
            return_exceptions=True,
        )

    results = asyncio.run(both())
    assert sum(isinstance(r, OutputBusyError) for r in results) == 1
    assert len(_lines(out)) == 20


def test_the_output_may_not_be_the_input_or_a_foreign_file(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "x"}\n', encoding="utf-8")
    items = list(read_jsonl(src))
    with pytest.raises(OutputMismatchError, match="is the input"):
        asyncio.run(run_batch(items, _echo, BatchRun(src, progress=False, inputs=(src,))))
    with pytest.raises(OutputMismatchError, match="not a result file"):
        asyncio.run(run_batch(items, _echo, BatchRun(src, progress=False)))
    assert src.read_text(encoding="utf-8") == '{"id": "a", "text": "x"}\n'  # untouched
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(OutputMismatchError):
        asyncio.run(run_batch(items, _echo, BatchRun(notes, progress=False)))
    assert notes.read_text(encoding="utf-8") == "my notes\n"


def test_an_output_of_another_command_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    asyncio.run(run_batch(_items(2), _echo, BatchRun(out, progress=False, kind="refine")))
    assert {r["kind"] for r in _lines(out)} == {"refine"}
    with pytest.raises(OutputMismatchError, match="unveil detect"):
        asyncio.run(run_batch(_items(2), _echo, BatchRun(out, progress=False, kind="detect")))
    assert asyncio.run(run_batch(_items(3), _echo, BatchRun(out, progress=False, kind="refine"))).completed == 1


def test_a_torn_line_in_the_middle_is_set_aside_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    asyncio.run(run_batch(_items(3), _echo, BatchRun(out, progress=False)))
    lines = out.read_bytes().split(b"\n")
    fused = lines[0][:30] + lines[1] + b"\n"  # a record cut off and fused with the next, as an old writer left it
    out.write_bytes(fused + lines[2] + b"\n")
    summary = asyncio.run(run_batch(_items(3), _echo, BatchRun(out, progress=False)))
    assert summary.completed == 2  # the two records inside the torn line run again
    assert sorted(r["id"] for r in _lines(out)) == ["s0", "s1", "s2"]
    assert (tmp_path / "o.jsonl.torn").read_bytes() == fused  # kept aside, not lost


def test_generated_ids_never_collide_with_input_ids(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        "\n".join(
            [
                '{"id": "a"}',
                "not json",
                '{"id": "a"}',
                '{"id": "line-2"}',
                '{"id": "a#dup-line-3"}',
                '{"text": "no id"}',
                '{"id": "line-6"}',
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    items = list(read_jsonl(src))
    ids = [it.id for it in items]
    assert len(ids) == len(set(ids)), ids
    assert {"a", "line-2", "a#dup-line-3", "line-6"} <= set(ids)
    assert [it.id for it in read_jsonl(src)] == ids  # stable, so a resumed run recognises them
    out = tmp_path / "o.jsonl"
    asyncio.run(run_batch(items, _echo_any, BatchRun(out, progress=False)))
    again = asyncio.run(run_batch(list(read_jsonl(src)), _echo_any, BatchRun(out, progress=False)))
    assert again.skipped == len(items) and len(_lines(out)) == len(items)


async def _echo_any(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
    return {"seen": sid}


def test_unicode_line_separators_inside_strings_are_data(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "text": "one\u2028two\u2029three"}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    items = list(read_jsonl(src))
    assert len(items) == 1 and items[0].record == {"id": "a", "text": "one\u2028two\u2029three"}


def test_nan_never_reaches_the_output(tmp_path: Path) -> None:
    async def nan(sid: str, rec: dict[str, Any]) -> dict[str, Any]:
        return {"score": float("nan"), "inf": [float("inf")], "ok": 1.5}

    out = tmp_path / "o.jsonl"
    asyncio.run(run_batch(_items(1), nan, BatchRun(out, progress=False)))
    text = out.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    assert _lines(out)[0] | {} == {"id": "s0", "status": "ok", "score": None, "inf": [None], "ok": 1.5}


def test_a_review_rewrite_during_a_running_batch_loses_no_record(tmp_path: Path) -> None:
    """`unveil review` (or the web UI) rewrites samples.jsonl atomically while `unveil generate` is appending to it:
    the appender reopens the replaced file, so both the decision and the new record survive."""
    from runner.ctd_dataset import SAMPLES, load_samples
    from runner.ctd_reviews import apply_reviews

    samples = tmp_path / SAMPLES
    appender = JsonlAppender(samples)
    try:
        asyncio.run(appender.append({"id": "p1", "status": "pending_review", "text": "t"}))
        counts = apply_reviews(tmp_path, {"p1": {"decision": "approve", "note": "fine"}})
        assert counts["approved"] == 1
        asyncio.run(appender.append({"id": "p2", "status": "pending_review", "text": "u"}))
    finally:
        appender.close()
    records = load_samples(tmp_path)
    assert records["p1"]["status"] == "accepted" and records["p2"]["status"] == "pending_review"


def test_a_record_over_the_line_cap_is_a_failure_every_reader_agrees_on(tmp_path: Path) -> None:
    """A record over the 4 MiB cap was written whole: the resume and the web app skipped it (reading the earlier
    record of the id) while others read it, so a reviewer decided on a stale copy. Now it is written as a failure
    naming the cap, and every reader reads that."""
    from tools.jsonl_files import MAX_LINE_BYTES, done_records
    from unveil.ui.index import JsonlIndex

    out = tmp_path / "o.jsonl"

    async def huge(sample_id: str, record: dict[str, Any]) -> dict[str, Any]:
        return {"text": "x" * (MAX_LINE_BYTES + 10) if sample_id == "s1" else "small"}

    summary = asyncio.run(run_batch(_items(3), huge, BatchRun(out, concurrency=1, progress=False)))
    assert (summary.completed, summary.failed) == (2, 1) and "line cap" in summary.failures[0]["error"]
    assert max(len(line) for line in out.read_bytes().splitlines()) < MAX_LINE_BYTES
    assert done_records(out)["s1"]["status"] == "failed"
    index = JsonlIndex(out, summarize=lambda rec: {"status": rec.get("status")})
    assert index.get("s1")["status"] == "failed" and not index.all_problems()
