"""The machine's compile cache folder (`tools.t2i.compile_settings.default_cache_dir`) is the one every process of
the machine uses, a Ray render member included: torch's own default, which `import torch._dynamo` writes into
`TORCHINDUCTOR_CACHE_DIR` (and which Ray workers inherit from a driver that imported diffusers), is no choice of the
user's and is replaced; a folder the user set is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.t2i.compile_settings import default_cache_dir, torch_default_cache_dir

ROOT = Path(__file__).resolve().parents[2]


def test_torch_own_default_is_replaced_by_the_machine_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", torch_default_cache_dir())
    monkeypatch.setenv("UNVEIL_COMPILE_CACHE", str(tmp_path / "machine"))
    assert default_cache_dir() == str(tmp_path / "machine")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "machine")


def test_a_folder_the_user_set_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("UNVEIL_COMPILE_CACHE", str(tmp_path / "machine"))
    assert default_cache_dir() == str(tmp_path / "mine")


def test_the_default_is_the_unveil_folder_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("UNVEIL_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == str(tmp_path / ".cache" / "unveil" / "inductor")


def test_importing_dynamo_first_as_diffusers_does_still_gives_the_machine_folder(tmp_path: Path) -> None:
    # The order of a Ray render member: torch._dynamo imported (by diffusers, transformers or the driver) before the
    # project asks for the folder. Until this was fixed the process compiled into /tmp/torchinductor_<user>.
    code = (
        "import os, torch._dynamo\n"
        "assert os.environ['TORCHINDUCTOR_CACHE_DIR'].endswith('torchinductor_' + __import__('getpass').getuser())\n"
        "from tools.t2i.compile_settings import default_cache_dir\n"
        "print(default_cache_dir())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "UNVEIL_COMPILE_CACHE")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == str(tmp_path / ".cache" / "unveil" / "inductor")
