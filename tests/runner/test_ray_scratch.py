"""The render members' scratch folder (`runner.ray.members.scratch_base`): one per user, never written through a
link another user planted at its name."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("ray")

from runner.ray.members import _Scratch, scratch_base
from tools.safe_files import UnsafePathError


def test_each_user_has_a_private_scratch_folder(tmp_path, monkeypatch):
    """A folder another user made first at the old shared name (`/tmp/unveil-ray`, root's from an earlier run)
    failed every render of the next user with 'Permission denied'; each user now gets `unveil-ray-UID`, mode 700."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "unveil-ray").mkdir(mode=0o500)  # someone else's folder, not writable here
    base = scratch_base()
    assert base == str(tmp_path / f"unveil-ray-{os.getuid()}")
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
    scratch = _Scratch("render")
    assert scratch.root.startswith(base + os.sep)


@pytest.fixture
def places(tmp_path, monkeypatch):
    """The temp folder and this user's home, both under `tmp_path`."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "home").mkdir(mode=0o700)
    return tmp_path


def _planted(tmp: Path, kind: str) -> Path:
    """What another user (or a mistake) left at this user's scratch name."""
    name = tmp / f"unveil-ray-{os.getuid()}"
    if kind == "link":
        target = tmp / "elsewhere"
        target.mkdir()
        name.symlink_to(target)
    elif kind == "file":
        name.write_text("made first, to block the name")
    elif kind == "another user's folder":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        name.mkdir(mode=0o700)
        os.chown(name, 4242, 4242)
    else:  # this user's own folder, left writable by everyone
        name.mkdir()
        name.chmod(0o777)
    return name


@pytest.mark.parametrize("kind", ["link", "file", "another user's folder", "own folder, mode 777"])
def test_what_stands_at_the_scratch_name_is_never_written_through(places, kind, caplog):
    """A link there was written through; another user blocked the name by making it first; an own folder left
    mode 777 was used as it was. Each is left alone, and the members use a private folder in the user's cache."""
    planted = _planted(places / "tmp", kind)
    before = sorted(p.name for p in planted.iterdir()) if planted.is_dir() else None
    scratch = _Scratch("render")
    base = Path(scratch_base())
    assert base.parent == places / "home" / ".cache" / "unveil" and base.name.startswith("ray-scratch-")
    assert scratch.root.startswith(str(base) + os.sep) and stat.S_IMODE(base.stat().st_mode) == 0o700
    assert (sorted(p.name for p in planted.iterdir()) if planted.is_dir() else None) == before
    if kind == "link":
        assert list((places / "tmp" / "elsewhere").iterdir()) == []
    assert "scratch folder" in caplog.text and "instead" in caplog.text


def test_when_no_private_folder_can_be_had_it_is_an_error(places):
    _planted(places / "tmp", "file")
    (places / "home" / ".cache").write_text("not a folder")
    with pytest.raises(UnsafePathError, match="scratch folder"):
        scratch_base()


def test_a_gpu_member_gets_its_share_of_the_node_cores_and_a_cpu_member_keeps_rays_setting():
    from runner.ray.members import member_threads

    # Ray gives a member OMP_NUM_THREADS = its reservation (1): a GPU member takes one GPU's share of the cores.
    assert member_threads(cores=16, node_gpus=1, reserved_cpus=1, member_gpus=1) == 16
    assert member_threads(cores=64, node_gpus=4, reserved_cpus=1, member_gpus=0.75) == 16
    assert member_threads(cores=4, node_gpus=8, reserved_cpus=2, member_gpus=1) == 2  # never below its reservation
    # On a CPU the thread count changes the pixels and the compile key: Ray's setting (the user's) stands.
    assert member_threads(cores=16, node_gpus=0, reserved_cpus=1, member_gpus=0) is None
