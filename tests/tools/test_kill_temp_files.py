"""Temp files of writers killed mid-write (image store, atomic whole-file writes) are removed by the next writer
into the same folder, and only those: a live process's temp file stays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from tools.atomic_files import atomic_write_text
from tools.image_store import ImageStore


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_dead_writers_temp_files_are_removed(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    img = Image.new("RGB", (4, 4), "red")
    first = Path(store.put_pil(img).path)
    folder = first.parent
    dead, live = _dead_pid(), os.getppid()
    (folder / f".{dead}.half.tmp").write_bytes(b"half an image")
    (folder / f".{live}.busy.tmp").write_bytes(b"being written")
    first.unlink()
    again = Path(store.put_pil(img).path)
    assert again == first and again.is_file()
    assert sorted(p.name for p in folder.iterdir()) == sorted([first.name, f".{live}.busy.tmp"])

    out = tmp_path / "views" / "dataset.jsonl"
    out.parent.mkdir()
    (out.parent / f".{dead}.dataset.jsonl.x.tmp").write_text("torn")
    atomic_write_text(out, "whole\n")
    assert [p.name for p in out.parent.iterdir()] == ["dataset.jsonl"] and out.read_text() == "whole\n"
