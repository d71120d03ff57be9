"""The one root of every error Unveil raises on purpose.

An `UnveilError` is a user's mistake or an environment the user can fix (a bad setting, a missing file, an
unreachable server, a missing extra): the CLI prints it as one line that says what to do. Anything else that
escapes a command is a bug and is printed with its traceback. Each class keeps its standard base too
(`ValueError`, `OSError`, ...), so callers that catch those keep working.
"""

from __future__ import annotations


class UnveilError(Exception):
    """Base of every error Unveil raises for a condition the user can fix."""


class ConfigurationError(UnveilError):
    """A run's settings cannot work for any sample (a scorer's missing file, say): a batch records a sample that
    failed on one with `error_kind: "configuration"`, and an output holding only such records is not held to the
    settings that made it (`runner.batch`), so the rerun with the fix is not refused as a settings change."""


class CommandLineError(UnveilError, ValueError):
    """A command line that cannot run as given: flags that contradict each other, a missing one, a value no flag
    takes. The CLI prints the message alone (it names the flags)."""


class InputFileError(UnveilError, OSError):
    """A file or folder the user named cannot be read or written; the message names it and says why."""


class MissingFileError(InputFileError, FileNotFoundError):
    """A file or folder the user named does not exist; the message names it (still a `FileNotFoundError`)."""


def unreadable(path: object, exc: OSError, what: str = "") -> InputFileError:
    """The `InputFileError` for an `OSError` met opening the user-named `path` (`what` says which input it is, such
    as `--input`): a `MissingFileError` when it does not exist."""
    cls = MissingFileError if isinstance(exc, FileNotFoundError) else InputFileError
    return cls(f"{what + ' ' if what else ''}{str(path)!r}: {exc.strerror or exc or type(exc).__name__}")


class InputDataError(UnveilError, ValueError):
    """The content of a file the user named cannot be used (not UTF-8, not JSON, a field missing or of the wrong
    kind); the message names the file (and line)."""
