"""How an error that escapes a command is told to the user: one redacted line for a user's mistake (exit 1), the
traceback and a line saying it is a bug for anything else (exit `BUG_EXIT`).

Used by the console script (`unveil/cli.py`) and by `unveil run` for each of its jobs."""

from __future__ import annotations

import argparse
import sys
import traceback

BUG_EXIT = 70  # sysexits' EX_SOFTWARE: an error Unveil did not raise on purpose, so a script can tell it apart


def is_user_error(exc: BaseException) -> bool:
    """Whether an error is the user's to fix (one line) rather than a bug (a traceback).

    Only an `UnveilError` is: Unveil raises one on purpose where it hands the user's input to code that can refuse
    it (a file the user named that cannot be read, a value a library rejects), naming that input. A bare
    `ValueError` or `OSError` that escapes a command was not foreseen, so it is reported as the bug it is.
    """
    from tools.errors import UnveilError

    return isinstance(exc, UnveilError)


def report_error(args: argparse.Namespace, exc: BaseException) -> int:
    """Print an error that escaped a command, redacted: one line for a user's mistake (exit 1), the traceback and
    a line saying it is a bug for anything else (exit `BUG_EXIT`)."""
    from tools.errors import CommandLineError
    from tools.redact import redact_secrets

    user = is_user_error(exc)
    if args.verbose or not user:
        print(redact_secrets(traceback.format_exc()), file=sys.stderr)
    kind = "error" if user else "internal error (this is a bug in Unveil: please report it with the traceback above)"
    # A command line's own mistake needs no class name; any other error keeps it (it says what refused the input).
    text = str(exc) if isinstance(exc, CommandLineError) else f"{type(exc).__name__}: {exc}"
    print(f"unveil {args.command}: {kind}: {redact_secrets(text)}", file=sys.stderr)
    raw = getattr(exc, "raw", None)
    if raw:
        print(f"last model answer: {redact_secrets(str(raw))[:2000]}", file=sys.stderr)
    return 1 if user else BUG_EXIT
