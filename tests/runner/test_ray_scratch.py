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
