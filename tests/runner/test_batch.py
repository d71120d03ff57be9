"""Batches: bad lines recorded, torn tails repaired, a SIGKILLed run resumed with nothing lost or duplicated,
and no image bytes in any checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from runner.batch import BatchRun, run_batch
from runner.batch_input import read_jsonl
from tests.runner.test_kill_support import wait_for_lines
from tools.jsonl_files import done_records


def test_bad_lines_become_failed_items(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(
        b'{"id": "a", "text": "x"}\n'
        b"not json\n"
        b'["a list"]\n'
        b'{"id": "a", "text": "again"}\n'
        b'{"id": {"nested": 1}}\n'
        b'{"id": "b", "text": "\xff\xfe"}\n'
        b"\n"
        b'{"id": 7, "text": "int id"}\n'
    )
    items = list(read_jsonl(src))
    assert [i.id for i in items if i.error is None] == ["a", "7"]
    errors = {i.id: i.error for i in items if i.error}
    assert "not valid JSON" in errors["line-2"] and "expected a JSON object" in errors["line-3"]
    assert "duplicate id 'a'" in errors["a#dup-line-4"]
    assert "must be a string or integer" in errors["line-5"] and "not UTF-8" in errors["line-6"]


async def test_failures_are_recorded_and_the_batch_goes_on(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "n": i}) + "\n" for i in range(6)) + "oops\n")
    out = tmp_path / "out.jsonl"

    async def worker(sid, rec):
        if rec["n"] == 3:
            raise ValueError("text: empty or missing")
        return {"double": rec["n"] * 2}

    summary = await run_batch(list(read_jsonl(src)), worker, BatchRun(out, concurrency=3, progress=False))
    assert (summary.completed, summary.failed) == (5, 2)
    recs = done_records(out)
    assert recs["3"]["status"] == "failed" and "text: empty" in recs["3"]["error"]
    assert recs["line-7"]["status"] == "failed" and recs["5"]["double"] == 10
    # rerun: nothing to do; --retry-failed reruns only the failures
    again = await run_batch(list(read_jsonl(src)), worker, BatchRun(out, progress=False))
    assert again.skipped == 7 and again.completed == again.failed == 0
    retried = await run_batch(list(read_jsonl(src)), worker, BatchRun(out, retry_failed=True, progress=False))
    assert retried.skipped == 5 and retried.failed == 2
    assert len(out.read_text().splitlines()) == 7


async def test_torn_tail_is_cut_before_resuming(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "0", "status": "ok"}\n{"id": "1", "stat')
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(i)}) + "\n" for i in range(3)))

    async def worker(sid, rec):
        return {"v": sid}

    await run_batch(list(read_jsonl(src)), worker, BatchRun(out, progress=False))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == ["0", "1", "2"]


@pytest.mark.slow(
    reason="its subject is real `unveil detect` processes, two SIGKILLed mid-run and a third that resumes: a process "
    "entry point (8 s of make test-fast); the fast loop resumes batches in the process (torn tails, reruns, "
    "tests/runner/test_batch_integrity.py) and tests/runner/test_kill_detect.py kills TAG batches at random points"
)
def test_killed_detect_batch_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    # one content-matched rule answers every sample, so concurrency cannot change any answer
    script.write_text(json.dumps({"vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "benign"}}]}))
    src = tmp_path / "pairs.jsonl"
    n = 24
    src.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "image_description": f"scene {i}", "text": f"text {i}"}) + "\n" for i in range(n)
        )
    )
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "UNVEIL_CACHE": "off", "UNVEIL_IMAGE_STORE": str(tmp_path / "store")}
    cmd = [
        sys.executable,
        "-m",
        "unveil.cli",
        "detect",
        "--method",
        "vanilla",
        "--input",
        str(src),
        "--output",
        str(out),
        "--model",
        f"scripted:{script}?latency=0.15",
        "--concurrency",
        "2",
        "--no-progress",
    ]
    for seed in range(2):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_lines(proc, out, 3 + 4 * seed, timeout=60)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    lines = out.read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert sorted(ids) == sorted(f"s{i}" for i in range(n)) and len(ids) == n
    assert all(json.loads(line)["status"] == "ok" for line in lines)


async def test_no_image_bytes_in_any_checkpoint(tmp_path: Path, write_script, gateway, monkeypatch) -> None:
    monkeypatch.setenv("UNVEIL_IMAGE_ROOTS", str(tmp_path))  # the server's own setting
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from graphs.tag import TagContext, builder

    img = tmp_path / "photo.png"
    Image.effect_noise((64, 64), 50).convert("RGB").save(img)
    spec = write_script(
        {
            "root_extractor.image": [{"entities": [{"name": "noise"}]}],
            "root_extractor.text": [{"entities": [{"name": "static"}]}],
            "root_judge": [{"toxic": False}],
            "expander": [
                {
                    "expansions": [
                        {
                            "parent_id": "v0.0",
                            "children": [{"concept": "tv", "association": "similarity", "probability": 1}],
                        }
                    ]
                },
                {
                    "expansions": [
                        {
                            "parent_id": "t0.0",
                            "children": [{"concept": "radio", "association": "similarity", "probability": 1}],
                        }
                    ]
                },
            ],
            "pair_judge": [{"toxic_pairs": []}],
        }
    )
    db = tmp_path / "ckpt.sqlite"
    async with aiosqlite.connect(db) as conn:
        saver = AsyncSqliteSaver(conn)
        graph = builder.compile(checkpointer=saver)
        out = await graph.ainvoke(
            {"image": str(img), "text": "static"},
            {"configurable": {"thread_id": "t1"}},
            context=TagContext(model=spec, l_max=2),
        )
        assert out["image_id"] and Path(out["image_path"]).is_file()
    blob = db.read_bytes()
    png = img.read_bytes()
    assert b"\x89PNG" not in blob and b"iVBORw0KGgo" not in blob and b"data:image" not in blob
    assert png[100:140] not in blob
    assert out["image_id"].encode() in blob  # the id is there, the bytes are not


def test_only_an_output_of_nothing_but_configuration_failures_is_forgotten(tmp_path: Path) -> None:
    from runner.batch import forget_configuration_failures

    def write(name: str, *recs: dict) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return path

    bad = {"status": "failed", "error": "Q16SettingsError: ...", "error_kind": "configuration"}
    only_bad = write("a.jsonl", {"id": "a", **bad}, {"id": "b", **bad})
    assert forget_configuration_failures(only_bad) == 2 and only_bad.read_text() == ""
    mixed = write("b.jsonl", {"id": "a", **bad}, {"id": "b", "status": "ok"})
    other_failure = write("c.jsonl", {"id": "a", "status": "failed", "error": "ModelCallError: timeout"})
    not_results = write("d.jsonl", {"prompt": "a cat", "error_kind": "configuration"})
    for path in (mixed, other_failure, not_results):
        before = path.read_text()
        assert forget_configuration_failures(path) == 0 and path.read_text() == before
    other_kind = write("e.jsonl", {"id": "a", "kind": "detect", **bad})
    assert forget_configuration_failures(other_kind, kind="refine") == 0
