"""The `unveil` console script. Subcommands live in `unveil.commands.*`, each with a `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import traceback
from typing import NoReturn

import unveil.commands

DESCRIPTION = (
    "Unveil: multimodal safety research with LangGraph agents. Detect covert toxicity in image-text pairs (TAG), "
    "generate covert toxic datasets (CTD), make text-to-image prompts safe by iterative prompt refinement (IPR), "
    "train the IPR refiner, and reproduce the papers' evaluations."
)
EPILOG = (
    "Run `unveil COMMAND --help` for a command's options. Batch commands exit 0 when every sample succeeded, 2 when "
    "the batch ran but some samples of its output failed, in this run or an earlier one (their records say why; "
    "--retry-failed runs them again), 4 when a --max-calls/--max-cost cap stopped the batch before every sample ran "
    "(those samples are not run, not failed: a rerun with a higher cap runs them), and 1 when the command could not "
    "run, its command line included. The evaluate commands and compare exit 3 when a quality gate was missed. A "
    "command whose output pipe its reader closed (`| head`) stops quietly with 141, as Unix tools do. An internal "
    "error (a bug in Unveil, printed with its traceback) exits 70."
)
USAGE_EXIT = 1  # argparse's own is 2, which the batch commands use for "some samples failed"
MAX_QUOTED = 1000  # characters of a usage error, which may quote a value
PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader closed the pipe
BUG_EXIT = 70  # sysexits' EX_SOFTWARE: an error Unveil did not raise on purpose, so a script can tell it apart


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 1 (see `EPILOG`); subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and the error (a value it quotes cut at `MAX_QUOTED` characters: a run file's values
        reach the parser too), then exit with `USAGE_EXIT`."""
        self.print_usage(sys.stderr)
        if len(message) > MAX_QUOTED:
            message = message[:MAX_QUOTED] + "..."
        self.exit(USAGE_EXIT, f"{self.prog}: error: {message}\n")


def command_line(argv: list[str]) -> str:
    """The command as typed, for the record an output keeps of what made it (credentials redacted)."""
    import shlex

    from tools.redact import redact_secrets

    return redact_secrets(shlex.join(["unveil", *argv]))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = Parser(prog="unveil", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="log gateway retries and repairs")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(unveil.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"unveil.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


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


if __name__ == "__main__":
    sys.exit(main())
