"""A link planted in a dataset folder, a run folder or the image store never makes a writer write outside it.

Each test plants a symbolic link where a writer will write (the file itself, or a folder on its way), pointing at a
victim file or folder outside, runs the writer, and checks the victim is untouched: either the write is refused
with an error naming the path, or it lands in a new file inside the folder.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from runner.ctd_dataset import DECISIONS, dataset_lock, write_views
from runner.ctd_export import export_hf
from runner.ctd_reviews import apply_reviews
from tools.atomic_files import exclusive_output
from tools.image_store import ImageStore, ImageStoreError
from tools.jsonl_files import JsonlAppender
from tools.safe_files import UnsafePathError, atomic_write

VICTIM_TEXT = "the victim's own content\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text(VICTIM_TEXT)
    return victim


def _dataset(root: Path) -> None:
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (4, 4), (10, 20, 30)).save(root / "images" / "ok.png")
    recs = [
        {"id": "a", "status": "accepted", "text": "t", "image": "images/ok.png", "category": "c"},
        {"id": "p", "status": "pending_review", "text": "u", "image": "images/ok.png", "category": "c"},
    ]
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _untouched(victim: Path) -> None:
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("planted", ["export/data.parquet", "export/.data.parquet.tmp"])
def test_export_does_not_write_through_a_planted_file_link(tmp_path: Path, planted: str) -> None:
    victim = _victim(tmp_path)
    root = tmp_path / "ds"
    _dataset(root)
    (root / "export").mkdir()
    os.symlink(victim, root / planted)
    out = export_hf(root)
    _untouched(victim)
    assert out == root / "export" / "data.parquet"
    assert not out.is_symlink() and out.read_bytes()[:4] == b"PAR1"  # a new file inside the folder


def test_export_refuses_a_linked_export_folder(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    root = tmp_path / "ds"
    _dataset(root)
    os.symlink(victim.parent, root / "export")
    (victim.parent / "data.parquet").write_text(VICTIM_TEXT)
    with pytest.raises(UnsafePathError, match="export"):
        export_hf(root)
    _untouched(victim.parent / "data.parquet")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["data.parquet", "victim.txt"]  # no temp file left


def test_review_export_command_refuses_the_linked_folder(tmp_path: Path) -> None:
    from unveil.cli import main

    victim = _victim(tmp_path)
    root = tmp_path / "ds"
    _dataset(root)
    os.symlink(victim.parent, root / "export")
    (victim.parent / "data.parquet").write_text(VICTIM_TEXT)
    assert main(["review", str(root), "--export"]) == 1
    _untouched(victim.parent / "data.parquet")


@pytest.mark.parametrize("name", [DECISIONS, "samples.jsonl"])
def test_decisions_do_not_append_through_a_link(tmp_path: Path, name: str) -> None:
    victim = _victim(tmp_path)
    root = tmp_path / "ds"
    _dataset(root)
    if name == "samples.jsonl":  # the folder's records are the victim's lines, read through the link
        victim.write_text((root / name).read_text())
        (root / name).unlink()
    os.symlink(victim, root / name)
    before = victim.read_text()
    with pytest.raises(UnsafePathError, match=name):
        apply_reviews(root, {"p": {"decision": "approve", "note": ""}})
    assert victim.read_text() == before


@pytest.mark.parametrize("name", ["dataset.jsonl", "review_queue.jsonl"])
def test_views_replace_a_planted_link_instead_of_following_it(tmp_path: Path, name: str) -> None:
    victim = _victim(tmp_path)
    root = tmp_path / "ds"
    _dataset(root)
    os.symlink(victim, root / name)
    write_views(root)
    _untouched(victim)
    assert not (root / name).is_symlink() and '"id": "' in (root / name).read_text()


def test_the_folder_lock_is_not_created_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "outside" / "created-by-the-lock"
    target.parent.mkdir()
    root = tmp_path / "ds"
    root.mkdir()
    os.symlink(target, root / ".lock")
    with pytest.raises(UnsafePathError, match=".lock"), dataset_lock(root):
        pass
    assert not target.exists()


def test_a_run_output_and_its_lock_files_are_not_written_through_links(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(victim, run / ".out.jsonl.run.lock")
    with pytest.raises(UnsafePathError), exclusive_output(run / "out.jsonl"):
        pass
    _untouched(victim)  # the run lock used to be truncated and rewritten with the holder's pid
    os.symlink(victim, run / "out.jsonl")
    with pytest.raises(UnsafePathError, match="out.jsonl"):
        JsonlAppender(run / "out.jsonl")
    _untouched(victim)


def test_an_image_store_folder_link_is_refused_with_the_store_named(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = ImageStore(tmp_path / "store")
    image = Image.new("RGB", (3, 3), (1, 2, 3))
    import hashlib
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False)
    image_id = hashlib.sha256(buf.getvalue()).hexdigest()
    store.root.mkdir()
    os.symlink(outside, store.root / image_id[:2])
    with pytest.raises(ImageStoreError, match="image store .*store"):
        store.put_pil(image)
    assert list(outside.iterdir()) == []


def test_atomic_write_refuses_names_that_leave_the_folder(tmp_path: Path) -> None:
    for rel in ("../x", "/etc/x", "a/../../x"):
        with pytest.raises(UnsafePathError):
            atomic_write(tmp_path / "root", rel, b"x")
    assert not (tmp_path / "x").exists()


def test_a_full_image_store_is_one_error_naming_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.safe_files

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tools.safe_files.os, "fsync", full)
    store = ImageStore(tmp_path / "store")
    with pytest.raises(ImageStoreError, match=r"image store '.*store'.*No space left on device"):
        store.put_pil(Image.new("RGB", (3, 3), (9, 9, 9)))
    assert not [p for p in store.root.rglob("*") if p.is_file()]  # the temp file is gone


def test_a_batch_stops_at_a_full_image_store_instead_of_failing_every_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.safe_files
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import BatchItem

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tools.safe_files.os, "fsync", full)
    store = ImageStore(tmp_path / "store")
    calls: list[str] = []

    async def worker(sid: str, rec: dict[str, object]) -> dict[str, object]:
        calls.append(sid)
        return {"image_id": (await asyncio.to_thread(store.put_pil, Image.new("RGB", (2, 2), (len(calls), 0, 0)))).id}

    items = [BatchItem(f"s{i}", {}) for i in range(20)]
    out = tmp_path / "out.jsonl"
    with pytest.raises(ImageStoreError, match="image store"):
        asyncio.run(run_batch(items, worker, BatchRun(out, concurrency=1, progress=False)))
    assert len(calls) <= 2  # the run stopped (one sample may have started as the first one failed)
    assert not out.exists() or out.read_text() == ""  # not one failure record per sample


async def _echo(sid: str, rec: dict[str, object]) -> dict[str, object]:
    return {"echo": sid}


def _resumable_run(run: Path) -> Path:
    """A run folder whose output holds three records, the first two fused into a torn middle line (so a resume
    writes `out.jsonl.torn`), and its settings sidecar."""
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import BatchItem
    from runner.output_identity import OutputIdentity

    out = run / "out.jsonl"
    identity = OutputIdentity("detect", {"model": "m"})
    asyncio.run(
        run_batch([BatchItem(f"s{i}", {}) for i in range(3)], _echo, BatchRun(out, progress=False, identity=identity))
    )
    lines = out.read_bytes().split(b"\n")
    out.write_bytes(lines[0][:20] + lines[1] + b"\n" + lines[2] + b"\n")
    return out


def _resume(out: Path) -> None:
    from runner.batch import BatchRun, run_batch
    from runner.batch_input import BatchItem
    from runner.output_identity import OutputIdentity

    identity = OutputIdentity("detect", {"model": "m"})
    asyncio.run(
        run_batch([BatchItem(f"s{i}", {}) for i in range(3)], _echo, BatchRun(out, progress=False, identity=identity))
    )


@pytest.mark.parametrize(
    "name", ["out.jsonl.torn", ".out.jsonl.settings", ".out.jsonl.run.lock", ".out.jsonl.write.lock", "out.jsonl"]
)
@pytest.mark.parametrize("target", ["victim", "missing"])
def test_no_side_file_of_a_resumed_output_is_written_through_a_planted_link(
    tmp_path: Path, name: str, target: str
) -> None:
    # The attack: a received run folder with `out.jsonl.torn -> ~/.profile` got a line appended to the profile.
    victim = _victim(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    out = _resumable_run(run)
    if name == "out.jsonl":  # the output itself, moved out and linked back in
        victim.write_bytes(out.read_bytes())
        out.unlink()
    else:
        (run / name).unlink(missing_ok=True)
    pointed = victim if target == "victim" else victim.parent / "created-through-the-link"
    before = victim.read_bytes()
    outside = sorted(p.name for p in victim.parent.iterdir())
    inside = sorted(p.name for p in run.iterdir())
    os.symlink(pointed, run / name)
    if name == ".out.jsonl.settings":
        # A whole-file rewrite replaces a link at its name (never writes through it); here the output has records
        # and no readable sidecar, so the run is refused before anything is written.
        from runner.output_identity import OutputSettingsError

        with pytest.raises(OutputSettingsError):
            _resume(out)
    else:
        with pytest.raises(UnsafePathError, match=name.replace(".", r"\.")):
            _resume(out)
    assert victim.read_bytes() == before
    assert sorted(p.name for p in victim.parent.iterdir()) == outside  # nothing made outside the folder
    # ... nor inside it: the check comes before any lock file or empty output is created
    assert sorted(p.name for p in run.iterdir()) == sorted({*inside, name})
