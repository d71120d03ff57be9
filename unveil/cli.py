"""The `unveil` console script. Subcommands live in `unveil.commands.*`, each with a `register(subparsers)`; the
parser is built by `unveil.commands.parser` and escaped errors are told by `unveil.commands.report`."""

from __future__ import annotations

import logging
import sys

from unveil.commands.parser import build_parser as build_parser
from unveil.commands.parser import command_line
from unveil.commands.report import BUG_EXIT as BUG_EXIT
from unveil.commands.report import report_error


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
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
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every escape gets a redacted report; a bug also its traceback
        return report_error(args, exc)


if __name__ == "__main__":
    sys.exit(main())
