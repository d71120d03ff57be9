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
