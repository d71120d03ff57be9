"""Whole writes and the locks of shared files: atomic rewrites, complete writes, a file's write lock, an output's
run lock.

- `write_all` writes every byte or raises `BatchWriteError` naming the file (a full disk never leaves a write
  half-reported);
- `atomic_write_bytes`/`atomic_write_text` replace a whole file (temp file, complete write, fsync, rename), so a
  reader sees the old content or the new, and a killed writer leaves the old content and a temp file that the next
  writer removes;
- `write_lock` is the short lock around each append to, and each read-modify-rewrite of, a shared file;
- `exclusive_output` is the lock an output holds for a whole run, so one process writes an output at a time.

Both locks are flocks on lock files beside the file (in its folder, the folder's own links resolved), released by
the kernel when the holder dies, so a killed process never leaves a stale lock. Every file beside an output is
opened with `tools.safe_files.open_side_file` (no link followed, regular files only), and the file itself is checked
before any lock file is made: a link (or a FIFO) at either name is refused, and a refusal creates nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tools.errors import UnveilError
from tools.safe_files import open_side_file, refuse_link, remove_dead_temp_files


class BatchWriteError(UnveilError, OSError):
    """A record could not be written whole (disk full, I/O error); the file was cut back to its last whole line."""


class OutputBusyError(UnveilError, RuntimeError):
    """Another process is writing the same output."""


class OutputMismatchError(UnveilError, ValueError):
    """The chosen output exists but is not a result file of this command (or is the input itself, or a folder)."""


def write_all(fd: int, data: bytes, name: str | os.PathLike[str]) -> None:
    """Write every byte or raise `BatchWriteError` naming the file (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            raise BatchWriteError(exc.errno, f"could not write {str(name)!r}: {exc.strerror}") from exc
        if n <= 0:
            raise BatchWriteError(f"could not write {str(name)!r}: the device accepted no more bytes")
        view = view[n:]


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (`/proc/self/status`); elsewhere set and
    restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode(path: str | os.PathLike[str]) -> int:
    """The permission bits a rewrite of `path` should have: the existing file's, else those of a new file under
    the user's umask (0666 & ~umask), as `open()` would give."""
    try:
        st = os.lstat(path)  # a link at the name is replaced, so its target's mode is not copied either
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return st.st_mode & 0o7777
    return 0o666 & ~current_umask()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a whole file atomically (temp file + complete write + fsync + rename); a failure names the file and
    leaves the old content in place."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temp_files(p.parent)  # left by a writer killed mid-write
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{os.getpid()}.{p.name}.", suffix=".tmp")
    try:
        try:
            os.fchmod(fd, file_mode(p))  # mkstemp makes 0600; the file gets the mode any other new file would
            write_all(fd, data, p)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole text file atomically (see `atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def lock_path(path: str | os.PathLike[str], what: str) -> Path:
    """The lock file `.NAME.WHAT.lock` of a file, beside it (its folder's links resolved, so two spellings of one
    folder share the lock; the file's own name is never resolved: a link there is refused by its users)."""
    p = Path(path)
    return Path(os.path.realpath(p.parent)) / f".{p.name}.{what}.lock"


@contextlib.contextmanager
def write_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """The short lock taken around each append to, and each read-modify-rewrite of, a shared file (a batch's
    output, a dataset's samples.jsonl), so a reviewer's rewrite and a running batch's appends never lose each
    other's records. Blocking; safe across processes and threads (each holder opens its own descriptor)."""
    p = Path(path)
    refuse_link(p)  # before the lock file is made: a refused name leaves nothing behind
    p.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_side_file(lock_path(p, "write"), os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def exclusive_output(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the run lock of an output for a whole run; a second process is refused at once with a clear message
    (an flock: released by the kernel when the holder dies, so a killed run never leaves a stale lock).

    The lock is the file itself, not its name: the lock file beside it and an flock on the output's own inode (a
    hard link is another name for the same inode), so no two names of one file let two runs write it. A symbolic
    link as the output is refused (`UnsafePathError`): records are never written through one."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        raise OutputMismatchError(f"output {str(p)!r} is a folder: name a file")
    refuse_link(p, "output")  # checked first: a link or FIFO at the name gets no lock file and no empty target
    p.parent.mkdir(parents=True, exist_ok=True)
    fh: IO[str] = os.fdopen(open_side_file(lock_path(p, "run"), os.O_RDWR | os.O_CREAT), "a+", encoding="utf-8")
    data_fd = -1
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            # created empty if missing (an empty output is a new one), so a hard link made during the run is held too
            data_fd = open_side_file(p, os.O_RDONLY | os.O_CREAT)
            fcntl.flock(data_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read(200).strip() if data_fd < 0 else ""  # "pid N": a planted big file is not read whole
            raise OutputBusyError(
                f"{str(p)!r} is being written by {holder or 'another process (through another name of the same file)'}"
                ": wait for it to finish or choose another output"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        yield
    finally:
        if data_fd >= 0:
            os.close(data_fd)
        fh.close()
