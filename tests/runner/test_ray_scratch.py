"""The render members' scratch folder (`runner.ray.members.scratch_base`): one per user, never written through a
link another user planted at its name."""

from __future__ import annotations

import os
import stat
import tempfile

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


def test_a_link_planted_at_the_scratch_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"unveil-ray-{os.getuid()}").symlink_to(target)
    with pytest.raises(UnsafePathError, match="scratch folder"):
        _Scratch("render")
    assert list(target.iterdir()) == []


def test_a_gpu_member_gets_its_share_of_the_node_cores_and_a_cpu_member_keeps_rays_setting():
    from runner.ray.members import member_threads

    # Ray gives a member OMP_NUM_THREADS = its reservation (1): a GPU member takes one GPU's share of the cores.
    assert member_threads(cores=16, node_gpus=1, reserved_cpus=1, member_gpus=1) == 16
    assert member_threads(cores=64, node_gpus=4, reserved_cpus=1, member_gpus=0.75) == 16
    assert member_threads(cores=4, node_gpus=8, reserved_cpus=2, member_gpus=1) == 2  # never below its reservation
    # On a CPU the thread count changes the pixels and the compile key: Ray's setting (the user's) stands.
    assert member_threads(cores=16, node_gpus=0, reserved_cpus=1, member_gpus=0) is None
