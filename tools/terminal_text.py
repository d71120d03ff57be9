"""Untrusted text made harmless for a terminal: every command's printed output goes through one sanitiser.

Samples, ids, model answers, job names and file names reach `review`, `calls`, `compare`, `run` and every other
command's output, and a terminal obeys the escape sequences they may hold: an ESC sequence can clear the screen,
retitle the window, rewrite a line already printed (a verdict shown as another), or, in some terminals, write
files; a carriage return or a bidirectional control reorders what is seen. `safe_terminal_output` (installed by
`unveil.cli.main` around every command) wraps `sys.stdout` and `sys.stderr` so that every control character (C0
but tab and line feed, DEL, C1) and every bidirectional control is written as its visible escape `\\u001b`; a
carriage return is kept only at the very start of a write (a progress bar redrawing its own line), and tqdm's own
cursor-up writes pass (a library's nested bars, such as transformers' "Loading weights", move up to redraw: shown
as `\\u001b[A` they littered the README demo's first run). Only a write that is nothing but cursor-up sequences
and that tqdm itself makes passes: text never rides along, and no other caller can move the cursor.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TextIO

# Characters a terminal acts on rather than shows: C0 controls but tab and line feed, DEL and C1 controls, and the
# bidirectional embeddings, overrides and isolates (and the marks that flip a run's direction).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What tqdm writes, alone, to move up to a bar at another position (`tqdm.std.tqdm.moveto`).
_CURSOR_UP = re.compile("(?:\x1b\\[\\d*A)+")


def terminal_safe(text: str) -> str:
    """`text` with every character a terminal would act on written as its visible escape (`\\u001b`); the same
    escape is valid inside a JSON string, so JSON output stays JSON."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeTextStream:
    """A text stream that writes `terminal_safe` text to `inner` (a leading carriage return kept) and passes
    everything else (flush, isatty, encoding, fileno) through."""

    def __init__(self, inner: TextIO):
        self.inner = inner

    def write(self, text: str) -> int:
        """Write `text` made safe; returns the length of `text`, as callers expect."""
        if _CURSOR_UP.fullmatch(text) and str(sys._getframe(1).f_globals.get("__name__", "")).startswith("tqdm."):
            self.inner.write(text)
            return len(text)
        lead = "\r" if text.startswith("\r") else ""
        self.inner.write(lead + terminal_safe(text[len(lead) :]))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        """Write each line made safe."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@contextlib.contextmanager
def safe_terminal_output() -> Iterator[None]:
    """Within the block, `sys.stdout` and `sys.stderr` write only `terminal_safe` text (not wrapped twice, and
    restored after)."""
    saved = sys.stdout, sys.stderr
    # None (a process without a console) stays None: print() skips it, a wrapper around it would fail.
    if sys.stdout is not None and not isinstance(sys.stdout, SafeTextStream):
        sys.stdout = SafeTextStream(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, SafeTextStream):
        sys.stderr = SafeTextStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
