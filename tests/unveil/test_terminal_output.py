"""Terminal escape sequences in samples, ids and job names never reach the terminal raw: every command's printed
output goes through one sanitiser (`tools.terminal_text`, installed by `unveil.cli.main`). The issue's commands
are run for real here (`compare`, whose ids and categories come from result files; `run`, whose job names come
from a run file), over the whole class of characters a terminal acts on."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tools.terminal_text import SafeTextStream, terminal_safe
from unveil.cli import main

# The class: C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional controls.
UNSAFE = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))] + list(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
RAW = re.compile("[" + "".join(re.escape(c) for c in UNSAFE) + "]")


def _results(path: Path, toxic: bool) -> Path:
    """A detection result file whose every id and category carries one character of the class, inside an ESC
    sequence that would clear the screen and retitle the window."""
    rows = [
        {
            "id": f"s{n}\x1b[2J\x1b]0;owned\x07{char}",
            "status": "ok",
            "toxic": toxic,
            "label": 1,
            "category": f"violence{char}\x1b[31m",
        }
        for n, char in enumerate(UNSAFE)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("as_json", [False, True])
def test_compare_prints_no_control_character(tmp_path, capsys, as_json):
    a, b = _results(tmp_path / "a.jsonl", True), _results(tmp_path / "b.jsonl", False)
    assert main(["compare", str(a), str(b), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr()
    assert not RAW.search(out.out + out.err)
    assert "\\u001b[2J" in out.out  # shown, as its escape
    if as_json:
        shown = json.loads(out.out)  # still JSON: the escape is a JSON escape
        assert any("\x1b" in s["id"] for s in shown["samples"])


def test_run_prints_no_control_character_of_a_job_name(tmp_path, capsys):
    run_file = tmp_path / "run.toml"
    names = [f"job {n} \x1b[2K\r{c} all clear" for n, c in enumerate(UNSAFE)]
    run_file.write_text(
        "".join(f'[[jobs]]\ncommand = "detect"\nname = {json.dumps(name)}\ntext = "x"\n' for name in names)
    )
    assert main(["run", str(run_file), "--dry-run"]) == 0
    out = capsys.readouterr()
    assert not RAW.search(out.out + out.err) and out.out.count("\\u001b[2K") == len(UNSAFE)


def test_every_character_of_the_class_is_shown_as_its_escape():
    text = "".join(UNSAFE)
    safe = terminal_safe(text)
    assert not RAW.search(safe) and safe == "".join(f"\\u{ord(c):04x}" for c in UNSAFE)
    assert terminal_safe("tab\tand\nnew line, ünïcode, 日本") == "tab\tand\nnew line, ünïcode, 日本"


def test_a_progress_bar_keeps_its_leading_carriage_return(capsys):
    stream = SafeTextStream(sys.stdout)
    stream.write("\r 50%|#####     | 5/10")
    stream.write("a\rb")
    assert capsys.readouterr().out == "\r 50%|#####     | 5/10a\\u000db"


def test_a_process_without_a_console_still_prints_nothing(monkeypatch):
    from tools.terminal_text import safe_terminal_output

    monkeypatch.setattr(sys, "stdout", None)
    with safe_terminal_output():
        print("\x1b[2J nothing to print to")  # print() skips a None stdout; a wrapper around it would fail
        assert sys.stdout is None


def test_nested_library_bars_move_up_raw_and_nothing_else_does(capsys):
    # transformers' "Loading weights" is a nested tqdm bar: it writes "\x1b[A" alone to redraw the outer one. Shown
    # as text it littered the README demo's first run; any other writer's cursor-up is still escaped.
    from tqdm import tqdm

    from tools.terminal_text import safe_terminal_output

    with safe_terminal_output():
        for _ in tqdm(range(2), position=0, desc="outer", file=sys.stderr):
            for _ in tqdm(range(2), position=1, desc="inner\x1b[2J", leave=False, file=sys.stderr):
                pass
        sys.stderr.write("\x1b[A")
        print("\x1b[A\x1b[A")
    captured = capsys.readouterr()
    bars = captured.err.removesuffix("\\u001b[A")
    assert "\x1b[A" in bars and "\\u001b[A" not in bars  # tqdm's own moves pass
    assert "inner\\u001b[2J" in bars and "\x1b[2J" not in bars  # text inside a bar is still escaped
    assert captured.err.endswith("\\u001b[A")  # a write of the same sequence by anyone else is escaped
    assert captured.out == "\\u001b[A\\u001b[A\n"
