"""Writing inside a folder without following a link out of it.

Dataset folders (`unveil generate --output DIR`), run folders and the image store are shared places: their files
may come from someone else (a copied dataset, a shared machine), and a symbolic link planted in one would make a
writer overwrite or append to a file outside it (the export turning a victim file into Parquet bytes, a decision
appended to someone's file). Every writer of those folders goes through this module:

- the folder the user named (the root) is trusted as it is, links included; every folder below it is opened one
  component at a time with `O_NOFOLLOW`, relative to its parent's descriptor, so no path is looked up twice and a
  folder swapped for a link between a check and the write is refused as well;
- the file itself is opened with `O_NOFOLLOW`: a link in its place is refused, wherever it points;
- whole files are written to a new temporary file (`O_EXCL`: never an existing file or link) in the same folder,
  synced and renamed over the old name, so a reader sees the old file or the new one, and a link standing at the
  name is replaced, never written through.

A refusal is an `UnsafePathError` (a `ValueError`) that names the path and the folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Literal, overload

from tools.errors import MissingFileError, UnveilError

_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


class StorageError(UnveilError, OSError):
    """A store or folder a whole run writes to cannot be written (a full disk, no permission): no later sample
    can succeed, so a batch stops with this one error instead of failing every sample with it."""


# A folder that takes no more bytes (full, over quota, read-only, failing).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


class UnsafePathError(UnveilError, ValueError):
    """A write would follow a link (or leave its folder); the message names the path and the folder."""


# Files people write by hand or Unveil writes for itself (settings, price tables, scripts, templates, sidecars,
# benchmark lists): a larger one is a mistake, or a device such as /dev/zero linked in its place.
MAX_SMALL_FILE_BYTES = 64 * 1024 * 1024
# Data files read whole (a benchmark's JSON list, a prompt table, training prompts): large, but not without end.
MAX_DATA_FILE_BYTES = 1024 * 1024 * 1024


class UnreadableFileError(UnveilError, ValueError):
    """A file to read is not a regular file (a FIFO, a device, a folder) or is over its size cap; the message names
    the file."""


def open_regular(path: str | os.PathLike[str], *, what: str = "file", nofollow: bool = False) -> int:
    """A read descriptor of `path`, only if it is a regular file (`_open_regular_fd`). With `nofollow`, a link at
    the name is refused too. A missing file is a `MissingFileError` naming it (still a `FileNotFoundError`)."""
    flags = os.O_RDONLY | (os.O_NOFOLLOW if nofollow else 0)
    try:
        return _open_regular_fd(
            path, flags, 0o666, refuse=lambda why: UnreadableFileError(f"{what} {str(path)!r} {why}")
        )
    except FileNotFoundError as exc:
        raise MissingFileError(f"{what} {str(path)!r}: file not found") from exc
    except UnreadableFileError:
        raise
    except OSError as exc:
        if nofollow and exc.errno in _LINK_ERRORS:
            raise UnreadableFileError(f"{what} {str(path)!r} is a link: refusing to read through it") from exc
        raise UnreadableFileError(f"{what} {str(path)!r} cannot be opened ({exc.strerror})") from exc


def _open_regular_fd(path: str | os.PathLike[str], flags: int, mode: int, *, refuse: Callable[[str], Exception]) -> int:
    """The one opener of a file that must be regular: opened non-blocking (a FIFO cannot hang the open) and
    checked on the open descriptor (no swap between a check and the open), then made blocking again. Anything
    else is `refuse("is not a regular file")`; an `OSError` of the open itself is the caller's to explain."""
    fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse("is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def require_regular(path: str | os.PathLike[str], *, what: str = "file") -> None:
    """Refuse a file a library will open by path (weights, NumPy arrays) unless it is a regular file: a FIFO would
    hang the library's open and a device never ends (`UnreadableFileError`, naming it)."""
    os.close(open_regular(path, what=what))


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file", nofollow: bool = False) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (`open_regular`); a larger one is refused after reading
    `max_bytes + 1` bytes at most, so a file that grows while read (or lies about its size) costs no more."""
    with os.fdopen(open_regular(path, what=what, nofollow=nofollow), "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableFileError(f"{what} {str(path)!r} is over the {max_bytes:,}-byte limit")
    return data


@overload
def read_named_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    what: str,
    error: Callable[[str], Exception],
    nofollow: bool = ...,
    missing_ok: Literal[False] = ...,
) -> bytes: ...
@overload
def read_named_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    what: str,
    error: Callable[[str], Exception],
    nofollow: bool = ...,
    missing_ok: bool,
) -> bytes | None: ...
def read_named_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    what: str,
    error: Callable[[str], Exception],
    nofollow: bool = False,
    missing_ok: bool = False,
) -> bytes | None:
    """The bytes of a small file a user or a folder names (a reviewers file, a label schema, a toxic-pair set), read
    as `read_regular` reads (a regular file only, capped at `max_bytes`, with `nofollow` no link at the name). Every
    refusal is `error(message)`, the caller's own error class, with a message naming `what` and the path; a missing
    file is None with `missing_ok`."""
    try:
        return read_regular(path, max_bytes, what=what, nofollow=nofollow)
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise error(f"{what} {str(path)!r}: file not found") from exc
    except UnreadableFileError as exc:
        raise error(str(exc)) from exc


def _relative_parts(rel: str | os.PathLike[str]) -> list[str]:
    parts = list(Path(rel).parts)
    if Path(rel).is_absolute() or any(p in ("..", ".") for p in parts):
        raise UnsafePathError(f"{str(rel)!r}: expected a path relative to its folder, without '..'")
    return parts


@contextlib.contextmanager
def folder_fd(
    root: str | os.PathLike[str], rel_dir: str | os.PathLike[str] = "", *, create: bool = True
) -> Iterator[int]:
    """A descriptor of the folder `root/rel_dir`, reached without following any link below `root`.

    With `create`, missing folders are made. A link (or a file) standing where a folder is expected is refused.
    """
    root_p = Path(root)
    if create:
        root_p.mkdir(parents=True, exist_ok=True)
    fd = os.open(root_p, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walked = root_p
        for part in _relative_parts(rel_dir):
            walked = walked / part
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nfd = _open_component(walked, root_p, part, flags, fd)
            except OSError as exc:
                raise _refusal(walked, root_p, exc) from exc
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def _open_component(path: Path, root: Path, part: str, flags: int, dir_fd: int, mode: int = 0o666) -> int:
    try:
        return os.open(part, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise _refusal(path, root, exc) from exc


def _refusal(path: Path, root: Path, exc: OSError) -> OSError | UnsafePathError:
    if exc.errno in _LINK_ERRORS:
        return UnsafePathError(
            f"{str(path)!r} is a link or not a regular folder/file: refusing to write through "
            f"it (writes stay inside {str(root)!r})"
        )
    return exc


def open_in(root: str | os.PathLike[str], rel: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    """`os.open` of `root/rel` with `O_NOFOLLOW`, its folders reached as `folder_fd` does (made when missing)."""
    parts = _relative_parts(rel)
    if not parts:
        raise UnsafePathError(f"{str(root)!r}: no file name given")
    with folder_fd(root, Path(*parts[:-1]) if len(parts) > 1 else "", create=True) as dfd:
        return _open_component(Path(root) / rel, Path(root), parts[-1], flags | os.O_NOFOLLOW, dfd, mode)


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags | O_NOFOLLOW)` with a clear `UnsafePathError` when `path` is a link (its folder is the
    caller's, trusted as named)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        raise _refusal(Path(path), Path(path).parent, exc) from exc


def refuse_link(path: str | os.PathLike[str], what: str = "file") -> None:
    """Refuse (`UnsafePathError`, naming it) a name that is a link, or that exists and is not a regular file: for
    the checks a writer makes before it creates anything (lock files, an empty output), so a refused name leaves
    nothing behind, outside the folder or in it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{what} {str(path)!r} is a link: refusing to write through it")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{what} {str(path)!r} is not a regular file: refusing to write to it")


def open_side_file(path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    """The one way to open a file beside an output (its locks, its `.torn` lines, a dataset's decisions): never
    through a link (`O_NOFOLLOW`), regular files only (`_open_regular_fd`: a FIFO planted at the name cannot hang
    the open)."""

    def refuse(why: str) -> UnsafePathError:
        return UnsafePathError(f"{str(path)!r} {why}: refusing to write to it")

    try:
        return _open_regular_fd(path, flags | os.O_NOFOLLOW, mode, refuse=refuse)
    except UnsafePathError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
            raise refuse("is not a regular file") from exc
        raise _refusal(Path(path), Path(path).parent, exc) from exc


def pid_alive(pid: int) -> bool:
    """Whether process `pid` is running on this machine (a temporary file or scratch folder of a dead process
    may be removed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _dead_temp(name: str) -> bool:
    if not name.endswith(".tmp") or not name.startswith("."):
        return False
    pid = name[1:].split(".", 1)[0]
    return pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid))


def remove_dead_temp_files(folder: Path | int) -> None:
    """Delete `.PID.*.tmp` files in `folder` (a path, or a folder descriptor) whose writing process no longer runs
    (it was killed mid-write)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if _dead_temp(name):
            with contextlib.suppress(OSError):
                if isinstance(folder, int):
                    os.unlink(name, dir_fd=folder)
                else:
                    os.unlink(Path(folder) / name)


@contextlib.contextmanager
def atomic_writer(
    root: str | os.PathLike[str], rel: str | os.PathLike[str], *, one_machine: bool = True
) -> Iterator[BinaryIO]:
    """A binary file to fill; on a clean exit it is synced and renamed to `root/rel` (a new file: whatever stood
    at the name, a link included, is replaced, not written through). On an error nothing changes at the name;
    a full disk (`FULL_ERRNOS`) is a `StorageError` naming the file. `one_machine=False` for a folder several
    machines write (a cluster's shared folder): the temp files of writers killed mid-write are then left in place,
    since one whose process does not run here may be another machine's write in progress."""
    parts = _relative_parts(rel)
    if not parts:
        raise UnsafePathError(f"{str(root)!r}: no file name given")
    name = parts[-1]
    with folder_fd(root, Path(*parts[:-1]) if len(parts) > 1 else "", create=True) as dfd:
        if one_machine:
            remove_dead_temp_files(dfd)
        # The writer's pid leads the name, so a later writer can remove it if this one is killed.
        tmp = f".{os.getpid()}.{name}.{secrets.token_hex(4)}.tmp"
        fd = _open_component(
            Path(root) / rel, Path(root), tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, dfd
        )
        try:
            with contextlib.suppress(OSError):  # a rewrite keeps the file's mode; a new file has 0666 & ~umask
                old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISREG(old.st_mode):
                    os.fchmod(fd, stat.S_IMODE(old.st_mode))
            with os.fdopen(fd, "wb") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(exc, OSError) and not isinstance(exc, UnveilError) and exc.errno in FULL_ERRNOS:
                # A full disk: one error naming the file (a bare "[Errno 28] No space left on device" named none).
                raise StorageError(exc.errno, exc.strerror or str(exc), str(Path(root) / rel)) from exc
            raise


def atomic_write(
    root: str | os.PathLike[str], rel: str | os.PathLike[str], data: bytes, *, one_machine: bool = True
) -> Path:
    """Write `data` as the whole new content of `root/rel` (see `atomic_writer`); returns the path."""
    with atomic_writer(root, rel, one_machine=one_machine) as fh:
        fh.write(data)
    return Path(root) / rel


def refuse_links(folder: str | os.PathLike[str], names: tuple[str, ...]) -> None:
    """Refuse, naming it, any of `names` in `folder` that is a link: for files a library opens by path (SQLite's
    database and its `-wal`, `-shm` and `-journal` files), which cannot be opened here with `O_NOFOLLOW`."""
    for name in names:
        path = Path(folder) / name
        if path.is_symlink():
            raise UnsafePathError(
                f"{str(path)!r} is a link: refusing to write through it (writes stay inside {str(folder)!r})"
            )
