"""The review policy of a dataset folder (`DIR/review_policy.json`): how many reviewers decide a sample, how their
judgements combine, and how many reviewers each sample is assigned to. The one reader and writer of that file.

```json
{"min_reviewers": 2, "rule": "unanimous", "overlap": 2}
```

The policy is a setting of the folder, not of one process: the web app (`unveil ui --min-reviewers`), `unveil
review`, `unveil reviewers assign --per-sample` and Studio's review node all read it, so one call without the flag
cannot decide a sample under another rule than the others use. Each value is set once, by the first call that
asks for it (the others keep their defaults until then: 1 reviewer, `unanimous`, no assignment); a later call
that asks for another value is refused with a `ReviewPolicyError` naming the stored policy. `unveil reviewers
policy DIR` prints it and, with its flags, is the one way to change a stored value (decisions already taken keep
the policy they were taken under, in their record's `review`).

The file is written atomically (`tools.safe_files.atomic_writer`: a new file renamed into place, a link at its name
replaced, not written through) and read as a regular file under a size cap, a link refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.errors import UnveilError
from tools.safe_files import atomic_writer, read_named_file

POLICY = "review_policy.json"
RULES = ("unanimous", "majority")
MAX_REVIEWERS = 100
MAX_BYTES = 16 * 1024
DEFAULTS: dict[str, Any] = {"min_reviewers": 1, "rule": "unanimous", "overlap": None}


class ReviewPolicyError(UnveilError, ValueError):
    """A policy file that is not the expected shape, or a call asking for another policy than the folder's."""


@dataclass(frozen=True)
class FolderPolicy:
    """A folder's review policy: `min_reviewers` judgements decide a sample under `rule` (`unanimous`: one
    rejection rejects; `majority`), and `overlap` is how many reviewers `unveil reviewers assign` gives each sample
    (None: no assignment asked for)."""

    min_reviewers: int = 1
    rule: str = "unanimous"
    overlap: int | None = None

    def describe(self) -> str:
        """The policy in words, as refusals and pages name it."""
        n = self.min_reviewers
        text = f"{n} reviewer{'s' if n != 1 else ''} per sample, {self.rule}"
        return text + (f", each sample assigned to {self.overlap}" if self.overlap else "")


def policy_path(folder: str | os.PathLike[str]) -> Path:
    """Where a dataset folder's review policy lives."""
    return Path(folder) / POLICY


def _check(name: str, value: object, where: str) -> str | int:
    """One value of the policy checked, as stored or as asked (a `ReviewPolicyError` naming it)."""
    if name == "rule":
        if value not in RULES:
            raise ReviewPolicyError(f"{where}: rule: {value!r} is not one of {', '.join(RULES)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REVIEWERS:
        raise ReviewPolicyError(f"{where}: {name}: expected a whole number from 1 to {MAX_REVIEWERS}, got {value!r}")
    return value


def stored_values(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The values the folder's policy file sets (none without the file); anything but a regular file of the
    expected JSON is a `ReviewPolicyError` naming it."""
    p = policy_path(folder)
    raw = read_named_file(p, MAX_BYTES, what="review policy", error=ReviewPolicyError, nofollow=True, missing_ok=True)
    if raw is None:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReviewPolicyError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or set(data) - set(DEFAULTS):
        raise ReviewPolicyError(f"{p}: expected an object with min_reviewers, rule and overlap only")
    return {k: _check(k, v, str(p)) for k, v in data.items() if v is not None}


def load_policy(folder: str | os.PathLike[str]) -> FolderPolicy:
    """The folder's review policy: its stored values, the defaults for the others."""
    return FolderPolicy(**{**DEFAULTS, **stored_values(folder)})


def _asked(min_reviewers: int | None, rule: str | None, overlap: int | None, where: str) -> dict[str, Any]:
    """The values a call asks for (None: not asked), checked."""
    given = {"min_reviewers": min_reviewers, "rule": rule, "overlap": overlap}
    return {k: _check(k, v, where) for k, v in given.items() if v is not None}


def resolve_policy(
    folder: str | os.PathLike[str],
    *,
    min_reviewers: int | None = None,
    rule: str | None = None,
    overlap: int | None = None,
) -> tuple[FolderPolicy, dict[str, Any]]:
    """The policy a call works under, and the values it asks for that the folder does not store yet (to store
    with `record_policy` once the call is sure to go ahead). A value asked that differs from a stored one is a
    `ReviewPolicyError` naming the stored policy; nothing is written here."""
    p = policy_path(folder)
    stored = stored_values(folder)
    asked = _asked(min_reviewers, rule, overlap, str(p))
    differ = {k: v for k, v in asked.items() if k in stored and stored[k] != v}
    if differ:
        current = FolderPolicy(**{**DEFAULTS, **stored})
        what = ", ".join(f"{k} {v!r} (stored: {stored[k]!r})" for k, v in differ.items())
        raise ReviewPolicyError(
            f"{folder}: this folder's review policy is {current.describe()} ({p}); this call asks for {what}. "
            "Leave the flag out to use the folder's policy, or change it for everyone with "
            "`unveil reviewers policy DIR --min-reviewers N --review-rule RULE --overlap N`"
        )
    new = {k: v for k, v in asked.items() if k not in stored}
    return FolderPolicy(**{**DEFAULTS, **stored, **asked}), new


def record_policy(folder: str | os.PathLike[str], values: dict[str, Any]) -> FolderPolicy:
    """Store `values` in the folder's policy file beside the values it holds (a value given replaces the stored
    one: `unveil reviewers policy` changing it); returns the policy now in force."""
    p = policy_path(folder)
    merged = {
        **stored_values(folder),
        **_asked(values.get("min_reviewers"), values.get("rule"), values.get("overlap"), str(p)),
    }
    if values:
        data = json.dumps(merged, indent=2, sort_keys=True) + "\n"
        with atomic_writer(Path(folder), POLICY) as fh:
            fh.write(data.encode("utf-8"))
    return FolderPolicy(**{**DEFAULTS, **merged})


def settle_policy(
    folder: str | os.PathLike[str],
    *,
    min_reviewers: int | None = None,
    rule: str | None = None,
    overlap: int | None = None,
) -> FolderPolicy:
    """`resolve_policy`, then the values asked that the folder did not store kept there: the first call that asks
    for a value sets it for every later one."""
    policy, new = resolve_policy(folder, min_reviewers=min_reviewers, rule=rule, overlap=overlap)
    if new:
        record_policy(folder, new)
    return policy
