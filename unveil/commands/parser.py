"""The `unveil` argument parser: every subcommand of `unveil.commands`, and the command line a run records.

Here, below the console script (`unveil/cli.py`), so that a command that needs the real parser (`unveil run`
parses each job with it) does not import upward."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import NoReturn

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
    """The argument parser with every available subcommand (each module of `unveil.commands` with a `register`)."""
    import unveil.commands

    parser = Parser(prog="unveil", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="log gateway retries and repairs")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(unveil.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"unveil.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser
