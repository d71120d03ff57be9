"""scripts/setup.sh and .ci/run, run for real with every outside effect stubbed.

PATH holds only a folder of stubs (apt-get, sudo, id, python) and the few system tools the scripts call, so
chromium is hidden, `id -u` says root or a user as the test chooses, and nothing is installed: the stubs write
their argv (and apt-get its DEBIAN_FRONTEND) to a log that the tests compare exactly.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{BASH}\n{body}\n", encoding="utf-8")
    path.chmod(0o755)


@pytest.fixture
def stubs(tmp_path: Path) -> Path:
    """A bin folder of stubs and links; every stub appends one line per call to $STUB_LOG."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env", "dirname"):  # the only system tools the scripts run, besides bash's builtins
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    _stub(
        bin_dir,
        "apt-get",
        'printf "apt-get DEBIAN_FRONTEND=%s" "${DEBIAN_FRONTEND-<unset>}" >> "$STUB_LOG"; '
        'printf " %s" "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"',
    )
    _stub(
        bin_dir,
        "sudo",
        'printf "sudo" >> "$STUB_LOG"; printf " %s" "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"\n'
        '[ "$1" = -n ] && shift; [ "$1" = true ] && exit 0; exec "$@"',
    )
    _stub(bin_dir, "id", 'if [ "$1" = -u ]; then echo "$STUB_UID"; else echo "id: stub" >&2; exit 1; fi')
    # python: `-c` snippets (reading pyproject.toml's extras, probing an import) run in the real interpreter;
    # every install, the model preparation and the CI tools are only logged.
    _stub(
        bin_dir,
        "python3",
        f'if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\n'
        'printf "python" >> "$STUB_LOG"; printf " %s" "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"',
    )
    return bin_dir


def run_script(
    script: str, args: list[str], stubs: Path, uid: int, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run a repository script under the stub PATH as uid `uid`; its result and the stubs' log lines."""
    log = tmp_path / "calls.log"
    log.write_text("", encoding="utf-8")
    env = {"PATH": str(stubs), "HOME": str(tmp_path), "STUB_LOG": str(log), "STUB_UID": str(uid), **(extra_env or {})}
    proc = subprocess.run([BASH, str(ROOT / script), *args], env=env, capture_output=True, text=True, timeout=60)
    return proc, [line.strip() for line in log.read_text(encoding="utf-8").splitlines()]


def apt_calls(lines: list[str]) -> list[str]:
    """The log lines of sudo and apt-get, in order."""
    return [line for line in lines if line.startswith(("apt-get", "sudo"))]


APT_AS_ROOT = [
    "apt-get DEBIAN_FRONTEND=noninteractive update -qq",
    "apt-get DEBIAN_FRONTEND=noninteractive install -y -qq chromium",
]


def test_the_chromium_step_as_root_runs_apt_get_without_sudo(stubs: Path, tmp_path: Path) -> None:
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(calls) == APT_AS_ROOT
    assert "setup: chromium installed" in proc.stderr and "setup: embedded model ready" in proc.stderr


def test_the_chromium_step_as_a_user_goes_through_sudo(stubs: Path, tmp_path: Path) -> None:
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 1000, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(calls) == [
        "sudo -n true",  # password-less sudo only: setup never waits at a password prompt
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        APT_AS_ROOT[0],
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium",
        APT_AS_ROOT[1],
    ]


def test_a_user_who_cannot_install_packages_is_warned_and_setup_goes_on(stubs: Path, tmp_path: Path) -> None:
    _stub(
        stubs,
        "sudo",
        'printf "sudo" >> "$STUB_LOG"; printf " %s" "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"\n'
        'echo "sudo: a password is required" >&2; exit 1',
    )
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 1000, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(calls) == ["sudo -n true"]
    assert "browser tests will be skipped" in proc.stderr and "sudo apt-get install chromium" in proc.stderr
    assert "setup: embedded model ready" in proc.stderr
    (stubs / "sudo").unlink()  # no sudo at all: the same
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 1000, tmp_path)
    assert proc.returncode == 0 and apt_calls(calls) == [] and "browser tests will be skipped" in proc.stderr


def test_chromium_on_path_or_no_dev_means_no_apt_get(stubs: Path, tmp_path: Path) -> None:
    _stub(stubs, "chromium", "exit 0")
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(calls) == []
    (stubs / "chromium").unlink()
    proc, calls = run_script("scripts/setup.sh", [], stubs, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert apt_calls(calls) == [] and any("scripts/uv_pip.py -e ." in line for line in calls)


def test_a_failing_apt_get_fails_setup(stubs: Path, tmp_path: Path) -> None:
    _stub(stubs, "apt-get", 'echo "E: no network" >&2; exit 100')
    proc, _ = run_script("scripts/setup.sh", ["--dev"], stubs, 0, tmp_path)
    # apt-get's own message and exit status, and no "chromium installed" after it.
    assert proc.returncode == 100 and "E: no network" in proc.stderr
    assert "apt-get could not install chromium (exit 100)" in proc.stderr and "chromium installed" not in proc.stderr


def test_setup_skips_a_second_run_with_the_same_arguments_only(stubs: Path, tmp_path: Path) -> None:
    proc, calls = run_script("scripts/setup.sh", ["--dev"], stubs, 0, tmp_path, {"UNVEIL_SETUP_DONE": "--dev"})
    assert proc.returncode == 0 and calls == [] and "already set up with '--dev'" in proc.stderr
    proc, calls = run_script("scripts/setup.sh", ["--all"], stubs, 0, tmp_path, {"UNVEIL_SETUP_DONE": "--dev"})
    assert proc.returncode == 0 and any("scripts/uv_pip.py -e .[all]" in line for line in calls)


def readme_test_command() -> str:
    """The command of the README's "Run the tests" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run the tests", 1)[1]
    return section.split("```bash", 1)[1].split("```", 1)[0].strip()


def test_ci_sets_up_once_then_style_gate_then_the_readme_command(stubs: Path, tmp_path: Path) -> None:
    command = readme_test_command()
    assert command == "./scripts/setup.sh --dev && python3 -m pytest -q -n auto --dist loadgroup"
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    _stub(stubs, "chromium", "exit 0")
    proc, calls = run_script(".ci/run", [], stubs, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    python = [line.split(" ", 1)[1] for line in calls if line.startswith("python ")]
    installs = [c for c in python if c.startswith("scripts/uv_pip.py -e ")]
    assert installs == ["scripts/uv_pip.py -e .[dev]"]  # setup's install ran once
    order = [
        c for c in python if c.startswith(("-m ruff", "-m mypy", "-m pytest", "-m agents.providers", "scripts/mypy_"))
    ]
    assert order == [
        "-m agents.providers.transformers_lm smollm2",
        "-m ruff check .",
        "-m ruff format --check .",
        "-m mypy",
        "scripts/mypy_core.py",  # mypy as on a core install: tests/project/test_mypy_core.py
        "-m pytest -q -n auto --dist loadgroup",
    ]


def test_ci_stops_at_a_style_error(stubs: Path, tmp_path: Path) -> None:
    _stub(stubs, "chromium", "exit 0")
    _stub(
        stubs,
        "python3",
        f'if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\n'
        'printf "python" >> "$STUB_LOG"; printf " %s" "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"\n'
        '[ "$2" = ruff ] && exit 1; exit 0',
    )
    proc, calls = run_script(".ci/run", [], stubs, 0, tmp_path)
    assert proc.returncode == 1 and "ruff: style errors" in proc.stderr
    assert not any("-m pytest" in line for line in calls)
