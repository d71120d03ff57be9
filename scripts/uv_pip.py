"""`pip install ARGS` through uv, with pip's own configuration: what scripts/setup.sh installs with when it can.

uv installs the same packages several times faster than pip (it unpacks wheels in parallel and links them from its
cache; on this project's 2-core machine the core install takes ~15 s instead of ~70 s), but it does not read
pip's configuration. This script reads that configuration (`pip config list`: pip's files and its PIP_*
environment variables, in pip's precedence) and passes each setting to uv as the matching option: indexes,
find-links, constraints, certificates, timeouts. A setting it cannot translate makes it refuse (exit 3) rather
than install from somewhere else than pip would; scripts/setup.sh then uses pip.

    python scripts/uv_pip.py -e '.[t2i]'        # installs into the Python that runs this script

uv is taken from the environment (`python -m uv`), else installed into it with pip first. Exit status: uv's, or
3 when uv cannot be used here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

CANNOT = 3
# pip setting -> uv option taking one value per whitespace-separated item.
LIST_OPTIONS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraints",
    "trusted-host": "--allow-insecure-host",
    "only-binary": "--only-binary",
    "no-binary": "--no-binary",
}
# pip setting -> environment variable uv reads for the same thing.
ENV_OPTIONS = {
    "cert": "SSL_CERT_FILE",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "timeout": "UV_HTTP_TIMEOUT",
    "proxy": "HTTPS_PROXY",
}
# pip settings about pip's own output or behaviour that change nothing in what gets installed.
IGNORED = {
    "disable-pip-version-check",
    "no-color",
    "progress-bar",
    "quiet",
    "verbose",
    "no-input",
    "retries",
    "root-user-action",
    "require-virtualenv",
    "prefer-binary",
    "cache-dir",
    "no-cache-dir",
    "no-warn-script-location",
    "no-python-version-warning",
    "use-feature",
    "exists-action",
    "config-file",
}  # PIP_CONFIG_FILE: its settings are already among those listed
SECTIONS = (":env:", "install", "global")  # pip's precedence: environment, then the command's section, then global


def pip_settings() -> dict[str, str]:
    """pip's effective settings for `pip install`, by option name."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    found: dict[tuple[str, str], str] = {}
    for line in out.stdout.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot:
            continue
        found[(section, name)] = str(ast.literal_eval(raw))
    settings: dict[str, str] = {}
    for section in reversed(SECTIONS):  # later (higher-precedence) sections overwrite earlier ones
        settings.update({name: value for (sec, name), value in found.items() if sec == section})
    return settings


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for pip's settings; raises ValueError naming a setting uv cannot honour."""
    args: list[str] = ["--index-strategy", "unsafe-best-match"]  # pip takes the best version across all indexes
    env: dict[str, str] = {}
    for name, value in settings.items():
        if name in IGNORED:
            continue
        if name == "index-url":
            args += ["--default-index", value]
        elif name in LIST_OPTIONS:
            for item in value.split():
                args += [LIST_OPTIONS[name], item]
        elif name in ENV_OPTIONS:
            env[ENV_OPTIONS[name]] = value
        elif name == "no-index" and value.lower() in ("1", "true", "yes", "on"):
            args.append("--no-index")
        elif name == "pre" and value.lower() in ("1", "true", "yes", "on"):
            args += ["--prerelease", "allow"]
        else:
            raise ValueError(f"pip setting {name}={value!r} has no uv equivalent here")
    return args, env


def uv_command() -> list[str] | None:
    """How to run uv in this environment (installing it with pip when missing), or None."""
    probe = [sys.executable, "-m", "uv", "--version"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return probe[:3]
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "uv"], capture_output=True)
    if installed.returncode == 0 and subprocess.run(probe, capture_output=True).returncode == 0:
        return probe[:3]
    return None


def main(argv: list[str]) -> int:
    """Install `argv` (pip install's arguments) with uv; CANNOT when uv cannot be used faithfully."""
    try:
        args, env = uv_options(pip_settings())
    except (ValueError, SyntaxError, subprocess.CalledProcessError) as exc:
        print(f"uv_pip: {exc}; using pip", file=sys.stderr)
        return CANNOT
    uv = uv_command()
    if uv is None:
        print("uv_pip: uv is not available; using pip", file=sys.stderr)
        return CANNOT
    # --compile-bytecode: pip writes every module's .pyc at install; uv does not unless asked, and then each process
    # compiles what it imports (torch alone: 700+ modules, seconds a start) wherever bytecode is not written.
    cmd = [*uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable, *args, *argv]
    return subprocess.run(cmd, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
