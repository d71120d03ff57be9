"""What a warm-up takes from the cluster's shared compile folder (`UNVEIL_COMPILE_SHARED`), and what it refuses.

An artefact file there is compiled code for every machine that loads it, and torch writes each of its entries to
a path made from the entry's key (`torch.compiler.load_cache_artifacts`: the autotune entries at
`cache_dir()/KEY`, the FX graph and AOTAutograd entries in folders named by it). So a file planted there is
checked before torch sees a byte of it:

- the folder: refused (a warning; the warm-up compiles instead) if users other than its owner and group may write
  to it, since anyone who can drop a file there runs code on every machine of the cluster;
- each file: read only if it is a regular file at that name (never through a link: `/dev/zero` behind a link grew
  a warm-up to its 6 GB memory cap), opened without blocking (a FIFO hung the load) and no larger than
  `MAX_ARTEFACT_BYTES`;
- each entry: its key must be a plain relative path that stays inside the cache folder torch joins it to (an
  absolute key overwrote a `.bashrc` stand-in; a `..` climbs out); a file with one such entry is refused whole.

A refusal is an `UnsafeArtefactError` naming the file or folder; the caller logs it and compiles what it held.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from tools.errors import UnveilError
from tools.safe_files import UnreadableFileError, read_regular

# The largest artefact file read: a process's artefacts measured 70-287 MB on H100s (docs/scale.md); far larger is
# not an artefact (a device or a link to one, a file grown without end).
MAX_ARTEFACT_BYTES = 2 * 1024 * 1024 * 1024


class UnsafeArtefactError(UnveilError, ValueError):
    """A shared compile folder, artefact file or artefact entry that is not loaded; the message names it."""


def check_shared_folder(folder: Path) -> None:
    """Refuse a shared compile folder that users outside its owner and group may write to (the sticky bit of a
    `/tmp`-like folder does not help: anyone may still add a file)."""
    mode = os.stat(folder).st_mode
    if mode & stat.S_IWOTH:
        raise UnsafeArtefactError(
            f"shared compile folder {str(folder)!r} is writable by every user (mode {stat.S_IMODE(mode):o}): its "
            "files are loaded as compiled code, so it is not used; make it writable by the cluster's users only "
            "(chmod o-w)"
        )


def read_artefact(path: Path) -> bytes:
    """The bytes of one artefact file: a regular file, not a link, at most `MAX_ARTEFACT_BYTES`."""
    try:
        return read_regular(path, MAX_ARTEFACT_BYTES, what="compiled artefact file", nofollow=True)
    except UnreadableFileError as exc:
        raise UnsafeArtefactError(str(exc)) from exc


def safe_key(key: str) -> bool:
    """Whether an entry's key, joined to a cache folder, names a path inside it: relative, no `..`, no NUL, and
    not empty."""
    if not key or "\x00" in key or key.startswith(("/", "~")) or os.path.isabs(key):
        return False
    return ".." not in PurePosixPath(key).parts and ".." not in key.split("\\")


def check_artefact_entries(data: bytes, path: Path) -> int:
    """Refuse an artefact file that torch cannot parse or that holds an entry whose key leaves the cache folder;
    how many entries it holds. Parsed by torch's own reader, which only splits the bytes (no unpickling)."""
    try:
        from torch.compiler._cache import CacheArtifactManager
    except ImportError as exc:  # a torch without the reader: nothing can be checked, so nothing is loaded
        raise UnsafeArtefactError(f"{str(path)!r}: this torch cannot check artefact files ({exc})") from exc
    artefacts = CacheArtifactManager.deserialize(data)
    if artefacts is None:
        raise UnsafeArtefactError(f"{str(path)!r}: not an artefact file of this torch (it could not be parsed)")
    count = 0
    for kind, entries in artefacts.items():
        for entry in entries:
            if not safe_key(entry.key):
                shown = entry.key[:200].encode("unicode_escape").decode("ascii")
                raise UnsafeArtefactError(
                    f"{str(path)!r}: its {kind} entry {shown!r} would be written outside the compile cache folder"
                )
            count += 1
    return count
