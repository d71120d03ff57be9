"""The `unveil` console script. Subcommands live in `unveil.commands.*`, each with a `register(subparsers)`; the
parser is built by `unveil.commands.parser` and escaped errors are told by `unveil.commands.report`."""

from __future__ import annotations

import logging
import sys

from unveil.commands.parser import build_parser as build_parser
from unveil.commands.parser import command_line
from unveil.commands.report import BUG_EXIT as BUG_EXIT
from unveil.commands.report import report_error

PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader closed the pipe


def main(argv: list[str] | None = None) -> int:
    """Entry point. Everything a command prints, its errors included, is made safe for a terminal
    (`tools.terminal_text`): samples, ids and job names may hold escape sequences."""
    from tools.terminal_text import safe_terminal_output

    with safe_terminal_output():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.command_line = command_line(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from tools.redact import install_log_redaction

    install_log_redaction(logging.getLogger().handlers)  # nothing a log line carries may hold a credential
    if getattr(args, "no_progress", False):
        from unveil.commands.common import quiet_library_progress

        quiet_library_progress()
    from runner.engine import engine_session
    from unveil.commands.common import engine_settings

    try:
        with engine_session(engine_settings(args)):
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a reader that went away is told here, not at the interpreter's exit
            return code
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every escape gets a redacted report; a bug also its traceback
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            return closed_pipe()
        return report_error(args, exc)


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader went away (its write end polls as an error), so a `BrokenPipeError`
    is that reader's doing, not a model server's connection breaking."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (an embedding caller's stdout): not a pipe
        return False


def closed_pipe() -> int:
    """The reader of stdout went away (`unveil compare --json | head`): no bug and nothing to report. Later
    writes, Python's own flush at exit included, go to /dev/null; exit `PIPE_EXIT` as a Unix tool killed by SIGPIPE
    does."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stdout with no file descriptor (an embedding caller's): nothing to redirect
        pass
    return PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
