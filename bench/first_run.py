"""The README's first command, timed: `./scripts/setup.sh` and then `unveil detect` on the bundled examples, with
the time to the demo's first printed result. Prints numbers; asserts nothing.

    python3 bench/first_run.py                       # the default model (transformers:smollm2)
    python3 bench/first_run.py --model llamacpp:smollm2 --skip-setup
    python3 bench/first_run.py --fresh-home          # an empty ~/.cache (the model is dequantized again)
    python3 bench/first_run.py --fresh-venv --fresh-home   # a new virtual environment: what a fresh clone gets
    python3 bench/first_run.py --fresh-venv --setup-args="--with t2i"   # the core and an extra

The machine's load is printed with the numbers: on a shared machine they are only comparable within one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    """Run and time the first command."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="spec for every role (default: the embedded default)")
    p.add_argument("--skip-setup", action="store_true", help="do not run ./scripts/setup.sh first")
    p.add_argument("--fresh-home", action="store_true", help="run with an empty HOME (no cached model or answers)")
    p.add_argument(
        "--fresh-venv",
        action="store_true",
        help="set up a new virtual environment (python3 -m venv, deleted afterwards) instead of this Python",
    )
    p.add_argument("--setup-args", default="", help="arguments for ./scripts/setup.sh, e.g. '--with t2i'")
    p.add_argument("--first-only", action="store_true", help="stop `unveil detect` after its first result")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    home = Path(tempfile.mkdtemp(prefix="unveil-first-run-"))
    # A user's UNVEIL_* settings would change what is measured; the thread count is a knob of the measurement.
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNVEIL_") or k == "UNVEIL_TORCH_THREADS"}
    if args.fresh_home:
        # pip reads this machine's index and find-links from ~/.config/pip: they stay with the real HOME.
        user_pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
        if user_pip_conf.is_file():
            env.setdefault("PIP_CONFIG_FILE", str(user_pip_conf))
        env["HOME"] = str(home)
    env["UNVEIL_CACHE"] = str(home / "responses.sqlite")  # a cold answer cache, always
    python = sys.executable
    venv = home / "venv"
    try:
        if args.fresh_venv:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            python = str(venv / "bin" / "python")
            env["PYTHON"] = python
        if not args.skip_setup:
            started = time.monotonic()
            subprocess.run(["./scripts/setup.sh", *shlex.split(args.setup_args)], cwd=ROOT, env=env, check=True)
            print(f"setup: {time.monotonic() - started:.1f} s (load average now {os.getloadavg()[0]:.1f})", flush=True)
        return run_detect(python, args.model, home, env, first_only=args.first_only)
    finally:
        shutil.rmtree(home, ignore_errors=True)  # the venv and uv's cache are gigabytes (torch)


def run_detect(python: str, model: str | None, home: Path, env: dict[str, str], *, first_only: bool = False) -> int:
    """Time `unveil detect` on the bundled examples: the first printed result and the whole run."""
    cmd = [python, "-m", "unveil.cli", "detect", "--no-progress", "--output", str(home / "out.jsonl")]
    if model:
        cmd += ["--model", model]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("[") and first is None:
            first = time.monotonic() - started
            print(f"first result after {first:.1f} s: {line.strip()}", flush=True)
            if first_only:
                proc.terminate()
                proc.wait()
                return 0
    proc.wait()
    print(f"detect: {time.monotonic() - started:.1f} s in all (exit {proc.returncode})", flush=True)
    # CPU seconds say what an idle machine would need, whatever else the cores were busy with.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    print(f"detect CPU time: {cpu:.1f} s (user+sys, all threads)", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}", flush=True)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
