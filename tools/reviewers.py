"""Who may review a dataset folder: the reviewers file, per-reviewer tokens stored hashed, and the one check that
turns a token into a reviewer.

Without a reviewers file a folder is in **single-user mode**: the local user is its one reviewer (the name on a
decision is only a label, any entry may be undone by that user) and a rule that needs two or more reviewers is
refused, since nothing could tell two people apart. With a reviewers file (`DIR/reviewers.json`, made by
`unveil reviewers add DIR NAME`), every decision is made by an authenticated reviewer: the web app signs in with
the token, `unveil review` takes it from `UNVEIL_REVIEWER_TOKEN` or a prompt, and a Studio answer carries it as
`token`. A reviewer's name is the file's, never one the request declares; reviewers are counted by it.

The file holds only SHA-256 digests of the tokens (256-bit random tokens need no slow hash): reading it does not
let anyone act as a reviewer. It is written atomically as a new file with mode 0600 (a link planted at its name is
replaced, never written through) and read as a regular file under a size cap.

Roles: `reviewer` (decides, undoes only their own entries) and `adjudicator` (may also undo anyone's entry, logged
as an override, and settles samples where reviewers disagree).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import secrets
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from tools.env import env_str
from tools.errors import UnveilError
from tools.safe_files import atomic_writer, read_named_file

REVIEWERS = "reviewers.json"
REVIEWERS_FILE_ENV = "UNVEIL_REVIEWERS_FILE"
MAX_FILE_BYTES = 1 << 20
NAME_MAX = 100
Role = Literal["reviewer", "adjudicator"]
ROLES: tuple[str, ...] = get_args(Role)


class ReviewersFileError(UnveilError, ValueError):
    """The reviewers file cannot be read or changed (not JSON, wrong shape, a link or a device in its place)."""


class ReviewerAuthError(UnveilError, PermissionError):
    """A token that names no reviewer, or a request that needs one and carries none."""


@dataclass(frozen=True)
class Reviewer:
    """An authenticated reviewer: the name the reviewers file gives the token, and the role."""

    name: str
    role: Role = "reviewer"


def token_digest(token: str) -> str:
    """The stored form of a token (hex SHA-256)."""
    return hashlib.sha256(token.strip().encode("utf-8")).hexdigest()


def check_name(name: str) -> str:
    """A reviewer name as stored: trimmed, 1-100 characters, no control or format characters."""
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise ReviewersFileError(f"reviewer name {name!r}: expected 1 to {NAME_MAX} characters")
    if any(unicodedata.category(c)[0] == "C" for c in name):
        raise ReviewersFileError(f"reviewer name {name!r}: control or invisible characters are not allowed")
    return name


def reviewers_path(folder: str | os.PathLike[str]) -> Path:
    """Where a dataset folder's reviewers file lives."""
    return Path(folder) / REVIEWERS


def server_reviewers_file(review_folder: Path | None) -> Path | None:
    """The reviewers file of a graph server (Studio): `UNVEIL_REVIEWERS_FILE`, else the review folder's own file
    (`UNVEIL_REVIEW_DIR`), else none (single-user mode)."""
    named = env_str(REVIEWERS_FILE_ENV)
    if named:
        return Path(named).expanduser()
    return reviewers_path(review_folder) if review_folder is not None else None


def load_reviewers(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """The reviewers of a file by name ({token_sha256, role, added}); None when there is no file (single-user
    mode). Anything else in its place, or a file that is not the expected JSON, is a `ReviewersFileError`."""
    p = Path(path)
    raw = read_named_file(
        p, MAX_FILE_BYTES, what="reviewers file", error=ReviewersFileError, nofollow=True, missing_ok=True
    )
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReviewersFileError(f"{p}: not valid JSON ({exc})") from exc
    people = data.get("reviewers") if isinstance(data, dict) else None
    if not isinstance(people, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("token_sha256"), str) and v.get("role", "reviewer") in ROLES
        for v in people.values()
    ):
        raise ReviewersFileError(f"{p}: expected {{'reviewers': {{NAME: {{'token_sha256': ..., 'role': ...}}}}}}")
    return people


def _write(path: Path, people: dict[str, dict[str, Any]]) -> None:
    data = json.dumps({"reviewers": people}, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    with atomic_writer(path.parent, path.name) as fh:
        os.fchmod(fh.fileno(), 0o600)  # the digests are no secret, but nobody else needs to read them
        fh.write(data.encode("utf-8"))


def add_reviewer(path: str | os.PathLike[str], name: str, role: str = "reviewer", *, new_token: bool = False) -> str:
    """Add a reviewer (or, with `new_token`, give an existing one a new token, the old one no longer working) and
    return the token: the only time it exists in clear."""
    p = Path(path)
    name = check_name(name)
    if role not in ROLES:
        raise ReviewersFileError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    people = load_reviewers(p) or {}
    if name in people and not new_token:
        raise ReviewersFileError(f"{p}: reviewer {name!r} exists already (--new-token gives them a new token)")
    token = secrets.token_urlsafe(32)
    digest = token_digest(token)
    people[name] = {
        "token_sha256": digest,
        "role": role,
        "added": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    _write(p, people)
    return token


def remove_reviewer(path: str | os.PathLike[str], name: str) -> None:
    """Remove a reviewer: their token stops working; their decisions stay in the history."""
    p = Path(path)
    people = load_reviewers(p) or {}
    if name not in people:
        raise ReviewersFileError(f"{p}: no reviewer {name!r}")
    del people[name]
    _write(p, people)


def authenticate(people: dict[str, dict[str, Any]], token: str | None) -> Reviewer:
    """The reviewer a token belongs to (every digest compared in constant time); a `ReviewerAuthError` when it
    belongs to none."""
    if not token or not token.strip():
        raise ReviewerAuthError("a reviewer token is needed (this folder has a reviewers file)")
    digest = token_digest(token).encode()
    found: Reviewer | None = None
    for name, entry in sorted(people.items()):
        if hmac.compare_digest(digest, str(entry.get("token_sha256", "")).encode()):
            found = Reviewer(name=name, role=entry.get("role", "reviewer"))
    if found is None:
        raise ReviewerAuthError("this reviewer token is not in the reviewers file")
    return found


def require_reviewers_file(min_reviewers: int, people: dict[str, dict[str, Any]] | None, where: str) -> None:
    """Refuse a rule of two or more reviewers in single-user mode: without a reviewers file nothing tells two
    people apart, so one person could count twice."""
    if min_reviewers > 1 and people is None:
        raise ReviewerAuthError(
            f"{where}: {min_reviewers} reviewers per sample need a reviewers file, so that each one is a distinct "
            f"signed-in person; add them with `unveil reviewers add DIR NAME` (without the file the local user is "
            f"the one reviewer and the rule is 1 reviewer)"
        )


# -- assignment with overlap ----------------------------------------------------------------------------------

ASSIGNMENT = "assignment.json"


@dataclass(frozen=True)
class Assignment:
    """Each sample goes to `per_sample` of `reviewers`, chosen by the sample id's hash (rendezvous hashing: the
    reviewers with the highest SHA-256 of `id NUL name`), so the split needs no stored list, covers samples
    written later, is the same on every machine, and moves only the samples of a reviewer added or removed."""

    reviewers: tuple[str, ...]
    per_sample: int

    def of(self, sample_id: str) -> list[str]:
        """The reviewers `sample_id` is assigned to, in rank order."""
        ranked = sorted(
            self.reviewers,
            key=lambda name: hashlib.sha256(f"{sample_id}\x00{name}".encode()).hexdigest(),
            reverse=True,
        )
        return ranked[: self.per_sample]


def save_assignment(folder: str | os.PathLike[str], reviewers: list[str], per_sample: int) -> Assignment:
    """Write the folder's assignment (`DIR/assignment.json`); names must be distinct and, when the folder has a
    reviewers file, in it; `per_sample` from 1 to the number of reviewers."""
    names = [check_name(n) for n in reviewers]
    if len(set(names)) != len(names) or not names:
        raise ReviewersFileError(f"--reviewers {','.join(reviewers)!r}: expected distinct names")
    if not 1 <= per_sample <= len(names):
        raise ReviewersFileError(f"--per-sample {per_sample}: expected 1 to {len(names)} (the reviewers named)")
    people = load_reviewers(reviewers_path(folder))
    unknown = [n for n in names if people is not None and n not in people]
    if unknown:
        raise ReviewersFileError(f"not in {reviewers_path(folder)}: {', '.join(unknown)} (unveil reviewers add)")
    data = json.dumps({"reviewers": names, "per_sample": per_sample}, indent=2, ensure_ascii=False) + "\n"
    with atomic_writer(Path(folder), ASSIGNMENT) as fh:
        fh.write(data.encode("utf-8"))
    return Assignment(tuple(names), per_sample)


def load_assignment(folder: str | os.PathLike[str]) -> Assignment | None:
    """The folder's assignment, or None (every reviewer may judge every sample)."""
    p = Path(folder) / ASSIGNMENT
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReviewersFileError(f"{p}: cannot be read ({exc.strerror}; a link is refused)") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ReviewersFileError(f"{p}: not a regular file")
        raw = fh.read(MAX_FILE_BYTES + 1)
    try:
        data = json.loads(raw[:MAX_FILE_BYTES].decode("utf-8"))
        names, k = data["reviewers"], data["per_sample"]
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names) and isinstance(k, int)):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ReviewersFileError(f"{p}: expected {{'reviewers': [NAME, ...], 'per_sample': N}}") from exc
    return Assignment(tuple(names), max(1, min(k, len(names))))
