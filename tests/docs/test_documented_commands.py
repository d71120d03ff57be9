"""Every `unveil ...` command line shown in README.md and docs/ parses with the real command-line parser, so a
renamed or removed flag cannot linger in the documentation."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from unveil.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SEPARATORS = {"&&", "||", ";", "|"}


def code_lines(path: Path) -> list[str]:
    """The lines of a Markdown file's fenced code blocks, with backslash continuations joined."""
    out, inside, pending = [], False, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def documented_commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of each `unveil` invocation in a code block; synopses with `...` or `[...]` are skipped."""
    found = []
    for path in DOCS:
        for line in code_lines(path):
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:
                continue
            commands: list[list[str]] = [[]]
            for tok in tokens:
                if tok in SEPARATORS:
                    commands.append([])
                else:
                    commands[-1].append(tok)
            for cmd in commands:
                while cmd and re.match(r"^[A-Z_][A-Z0-9_]*=", cmd[0]):  # VAR=value prefixes
                    cmd = cmd[1:]
                if cmd[:1] == ["unveil"]:
                    argv = cmd[1:]
                elif cmd[:3] == ["python3", "-m", "unveil.cli"] or cmd[:3] == ["python", "-m", "unveil.cli"]:
                    argv = cmd[3:]
                else:
                    continue
                if any(t == "..." or t.startswith("[") for t in argv):
                    continue
                found.append((str(path.relative_to(ROOT)), argv))
    return found


COMMANDS = documented_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 25  # the scan itself works (README and docs hold dozens)


@pytest.mark.parametrize(("doc", "argv"), COMMANDS, ids=[f"{d}:{' '.join(a)[:60]}" for d, a in COMMANDS])
def test_documented_command_parses(doc: str, argv: list[str]) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{doc}: `unveil {' '.join(argv)}` does not parse: {err.getvalue().strip()}")
