"""Resumable, concurrent JSONL batches shared by every `unveil` batch command.

Input lines are read one by one; a line that is not a JSON object, lacks an id or repeats one becomes a failed
record naming the line and field, and the others go on. Each result is appended to the output as one complete
line with a single `write` and an `fsync`, so a run killed with SIGKILL leaves at most one torn last line; the
next run cuts that torn tail off, skips every id already written and runs only the rest. Nothing is lost or
written twice. `--retry-failed` rewrites the output atomically without the failed records and runs them again.

Promises beyond that (docs/reliability.md lists the tests that hold each):
- every write is complete or fails loudly naming the file: a short write (a full disk) is cut back to the last
  whole record and raised as `BatchWriteError`, so no record is ever fused with the next;
- one process writes an output at a time: a second run on the same file (under any name: a symlink or a hard link
  is the same file) is refused (`OutputBusyError`), and readers that rewrite a file (review decisions) wait for the
  writer's short per-record lock;
- an existing output is reused only when it is a result file of the same command, never the input itself;
- an output knows what made it: the command and the settings that change results are kept beside it
  (`.OUTPUT.settings`, see `OutputIdentity`), and a rerun with other settings is refused before anything runs
  unless it asks to mix them;
- generated ids (`line-N`, `ID#dup-line-N`) never collide with ids the input uses;
- lines are split on `\n` only (a U+2028 inside a JSON string is data), and a line over the size cap is skipped
  without being read whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from tools.errors import UnveilError
from tools.jsonl_files import (  # noqa: F401 - re-exported: the batch runner's readers and writers
    BatchWriteError,
    _lock_path,
    _write_all,
    append_lines,
    done_records,
    parse_json_line,
    repair_tail,
    write_lock,
)
from tools.safe_files import StorageError, open_nofollow

MAX_LINE_BYTES = 4 * 1024 * 1024


@dataclass
class BatchItem:
    """One input sample (or the error that stopped it from being one)."""

    id: str
    record: dict[str, Any] | None
    error: str | None = None


@dataclass
class BatchSummary:
    """What a batch run did. `failed_earlier` counts the skipped samples whose record in the output is a failure
    of an earlier run: they are still failures of the output (`failures` lists them too)."""

    total: int = 0
    skipped: int = 0
    completed: int = 0
    failed: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    failed_earlier: int = 0

    @property
    def failed_in_output(self) -> int:
        """Failed records of this batch's samples in the output: this run's and earlier runs'."""
        return self.failed + self.failed_earlier


@dataclass(frozen=True)
class OutputIdentity:
    """What makes an output: the command (`kind`, e.g. "detect"), the settings that change its records (model
    specs per role, method, graph settings; never concurrency or progress), and the command line, kept for people
    to read. `allow_mixed` lets a run add to an output made with other settings (the sidecar then lists both)."""

    kind: str
    settings: dict[str, Any]
    command: str = ""
    allow_mixed: bool = False


class OutputBusyError(UnveilError, RuntimeError):
    """Another process is writing the same output."""


class OutputMismatchError(UnveilError, ValueError):
    """The chosen output exists but is not a result file of this command (or is the input itself)."""


class OutputSettingsError(OutputMismatchError):
    """The chosen output was made with other settings (or with settings not recorded) than this run's."""


MIX_FLAG = "--allow-mixed-settings"


def iter_lines(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Iterator[tuple[int, bytes | None]]:
    """`(line number, raw bytes)` of a file split on `\n` only; a line longer than `max_bytes` (default
    `MAX_LINE_BYTES`) is skipped in chunks of that size (never held whole) and given as `None`. Blank lines are
    left out."""
    max_bytes = MAX_LINE_BYTES if max_bytes is None else max_bytes
    with open(path, "rb") as fh:
        lineno = 0
        while True:
            raw = fh.readline(max_bytes + 1)
            if not raw:
                return
            lineno += 1
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line
                    raw = fh.readline(max_bytes)
                yield lineno, None
                continue
            if raw.strip():
                yield lineno, raw


def read_jsonl_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(line number, object)` of a JSONL file whose every line must be an object; the first bad line raises
    `ValueError` naming the file and line (for small files a person wrote, such as review decisions)."""
    name = Path(path).name
    for lineno, raw in iter_lines(path):
        if raw is None:
            raise ValueError(f"{name} line {lineno}: line is over {MAX_LINE_BYTES} bytes")
        try:
            value = parse_json_line(raw)
        except ValueError as exc:
            raise ValueError(f"{name} line {lineno}: {exc}") from exc
        if not isinstance(value, dict):
            raise ValueError(f"{name} line {lineno}: expected an object, got {type(value).__name__}")
        yield lineno, value


def duplicate_id(rid: str, where: str, taken: set[str]) -> str:
    """The id of a repeated id's item, `ID#dup-WHERE` (WHERE: `line-N` in a JSONL file, `item-N` in a JSON list),
    made distinct from every id in `taken` (the ids the input uses and those generated so far) and added to it."""
    return _unique(f"{rid}#dup-{where}", taken)


def unique_id(candidate: str, taken: set[str]) -> str:
    """`candidate`, or `candidate~N` when `taken` holds it (see `duplicate_id`); added to `taken`."""
    return _unique(candidate, taken)


def _unique(candidate: str, taken: set[str]) -> str:
    # Generated ids must never equal an id of the input (or another generated one): a collision would make the
    # resume logic skip a real sample or write a second record under one id.
    out, n = candidate, 1
    while out in taken:
        n += 1
        out = f"{candidate}~{n}"
    taken.add(out)
    return out


def read_jsonl(path: str | os.PathLike[str], *, id_field: str = "id") -> Iterator[BatchItem]:
    """Samples of a JSONL file; bad lines and duplicate ids become error items named by line.

    Two passes: the first collects the ids the input uses, so the ids generated for bad lines (`line-N`) and
    repeated ids (`ID#dup-line-N`) can be made distinct from them; both are stable for an unchanged input, so a
    resumed run recognises them."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input {str(path)!r}: file not found")
    parsed: list[tuple[int, Any, str | None]] = []  # (line, value, error)
    user_ids: set[str] = set()
    for lineno, raw in iter_lines(p):
        if raw is None:
            parsed.append((lineno, None, f"line is over {MAX_LINE_BYTES} bytes (not read)"))
            continue
        try:
            value = parse_json_line(raw)
        except ValueError as exc:
            parsed.append((lineno, None, str(exc)))
            continue
        if not isinstance(value, dict):
            parsed.append((lineno, None, f"expected a JSON object, got {type(value).__name__}"))
            continue
        rid = value.get(id_field)
        if rid is not None and not isinstance(rid, bool) and isinstance(rid, (str, int)):
            user_ids.add(str(rid))
        parsed.append((lineno, value, None))
    taken = set(user_ids)
    seen: set[str] = set()
    for lineno, record, error in parsed:
        where = f"{p.name} line {lineno}"
        if error is not None or record is None:
            yield BatchItem(_unique(f"line-{lineno}", taken), None, f"{where}: {error}")
            continue
        rid = record.get(id_field)
        if rid is None:
            yield BatchItem(_unique(f"line-{lineno}", taken), record)
            continue
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            reason = f"{where}: field {id_field!r} must be a string or integer"
            yield BatchItem(_unique(f"line-{lineno}", taken), None, reason)
            continue
        rid = str(rid)
        if rid in seen:
            yield BatchItem(duplicate_id(rid, f"line-{lineno}", taken), None, f"{where}: duplicate {id_field} {rid!r}")
            continue
        seen.add(rid)
        yield BatchItem(rid, record)


def _is_result(rec: Any, id_field: str, kind: str | None) -> bool:
    # Every record the runner writes has an id and a status ("ok"/"failed", or a worker's own such as a CTD
    # scene's "accepted"); input samples have no status. Records of older versions carry no kind.
    status = rec.get("status") if isinstance(rec, dict) else None
    return (
        isinstance(rec, dict)
        and id_field in rec
        and isinstance(status, str)
        and bool(status)
        and (kind is None or rec.get("kind", kind) == kind)
    )


def check_output(
    output: str | os.PathLike[str],
    *,
    id_field: str = "id",
    kind: str | None = None,
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> None:
    """Refuse an output that would lose data: one of the inputs itself, or an existing file that is not a result
    file of this command (`kind`). Lines torn by a crash or a full disk in the middle of an earlier result file are
    moved to `OUTPUT.torn` (kept, not lost) and the file is rewritten without them."""
    out = Path(output)
    refuse_input_as_output(out, inputs)
    if not out.exists() or out.stat().st_size == 0:
        return
    if out.is_dir():
        raise OutputMismatchError(f"output {str(out)!r} is a folder: name a file")
    good: list[bytes] = []
    torn: list[bytes] = []
    foreign = 0
    with out.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # a torn last line, left by a killed writer: `repair_tail` cuts it
            if not raw.strip():
                continue
            try:
                rec = parse_json_line(raw)
            except ValueError:
                torn.append(raw)
                continue
            if _is_result(rec, id_field, kind):
                good.append(raw)
            else:
                foreign += 1
    what = f"`unveil {kind}`" if kind else "this command"
    if foreign or (torn and not good):
        raise OutputMismatchError(
            f"output {str(out)!r} exists and is not a result file of {what} ({foreign or len(torn)} lines are not its "
            "records): choose another output, or remove the file if it is yours to lose"
        )
    if torn:
        # Torn lines in the middle (a crash of an older version, a disk that filled): keep them aside, rewrite
        # the output with the whole records only, so a resumed run never keeps a torn line in the middle.
        side_path = out.parent / f"{out.name}.torn"
        with side_path.open("ab") as side:
            _write_all(side.fileno(), b"".join(torn), side_path)
            os.fsync(side.fileno())
        with write_lock(out):
            atomic_write_bytes(out, b"".join(good))


def settings_path(output: str | os.PathLike[str]) -> Path:
    """The sidecar that records what made an output: `.OUTPUT.settings` beside it (JSON; a name no loader of
    `*.json` or `*.jsonl` files picks up as data)."""
    out = Path(output)
    return out.parent / f".{out.name}.settings"


def _normal(value: Any) -> Any:
    # Settings compare as JSON: a tuple and a list of the same specs are the same setting.
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def settings_difference(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per change between two settings dicts, `name: OLD in the output, NEW now`; settings inside a dict
    (the models) are named by their path, and names with the same change share a line."""
    changes: dict[tuple[str, str], list[str]] = {}
    for key, a, b in _changes(_normal(old), _normal(new), ""):
        changes.setdefault((a, b), []).append(key)
    return [f"{', '.join(keys)}: {a} in the output, {b} now" for (a, b), keys in changes.items()]


def _changes(old: dict[str, Any], new: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, str]]:
    missing = object()
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, missing), new.get(key, missing)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):  # e.g. the models: name the roles that changed
            yield from _changes(a, b, f"{prefix}{key}.")
            continue
        yield (f"{prefix}{key}", "(not set)" if a is missing else _shown(a), "(not set)" if b is missing else _shown(b))


def read_identity(output: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The recorded identity of an output (`{"kind", "settings", "command", "mixed"}`), or None when it has none
    (an output of an older version, or a sidecar that cannot be read)."""
    side = settings_path(output)
    try:
        value = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("kind"), str)
        or not isinstance(value.get("settings"), dict)
    ):
        return None
    return value


def _has_records(out: Path) -> bool:
    try:
        return out.stat().st_size > 0
    except FileNotFoundError:
        return False


def check_identity(output: str | os.PathLike[str], identity: OutputIdentity) -> dict[str, Any] | None:
    """Refuse a run whose command or settings differ from the ones that made `output` (`OutputSettingsError`, naming
    each difference and the two ways on), unless `identity.allow_mixed`; an output of another command is always
    refused. Writes nothing; returns the sidecar content `record_identity` should write (None: nothing to write)."""
    out = Path(output)
    mine = {"kind": identity.kind, "settings": _normal(identity.settings), "command": identity.command}
    if not _has_records(out):
        return {"format": 1, **mine, "mixed": []}  # a new output (a stale sidecar of a removed file is replaced)
    where = repr(str(out))
    ways = (
        f"choose a new --output (or --out) for these settings, or pass {MIX_FLAG} to add this run's records to "
        "it anyway"
    )
    known = read_identity(out)
    if known is None:
        if not identity.allow_mixed:
            raise OutputSettingsError(
                f"output {where} has no record of the settings that made it (written by an older Unveil, or "
                f"{settings_path(out).name} is missing or unreadable), so this run cannot tell whether its settings "
                f"match: {ways}"
            )
        return {
            "format": 1,
            **mine,
            "mixed": [{"command": "", "settings": None, "note": "records made before their settings were recorded"}],
        }
    if known["kind"] != identity.kind:
        raise OutputMismatchError(
            f"output {where} is a result file of `unveil {known['kind']}`, not of `unveil {identity.kind}`: choose "
            "another output"
        )
    diff = settings_difference(known["settings"], identity.settings)
    if not diff:
        return None
    listed = known.get("mixed")
    mixed: list[Any] = listed if isinstance(listed, list) else []
    if not identity.allow_mixed:
        also = f" (it already mixes {len(mixed)} other setting(s))" if mixed else ""
        made = f" by `{known['command']}`" if known.get("command") else ""
        raise OutputSettingsError(
            f"output {where} was made{made} with other settings{also}: "
            + "; ".join(diff)
            + f". Nothing was run: {ways}"
        )
    if any(isinstance(m, dict) and m.get("settings") == mine["settings"] for m in mixed):
        return None
    return {**known, "mixed": [*mixed, {"command": identity.command, "settings": mine["settings"]}]}


def record_identity(output: str | os.PathLike[str], content: dict[str, Any]) -> None:
    """Write an output's identity sidecar (atomically)."""
    atomic_write_text(settings_path(output), json.dumps(content, indent=1, ensure_ascii=False, default=str) + "\n")


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
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~current_umask()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a whole file atomically (temp file + complete write + fsync + rename); a failure names the file and
    leaves the old content in place."""
    from tools.image_store import remove_dead_temp_files

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temp_files(p.parent)  # left by a writer killed mid-write
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{os.getpid()}.{p.name}.", suffix=".tmp")
    try:
        try:
            os.fchmod(fd, file_mode(p))  # mkstemp makes 0600; the file gets the mode any other new file would
            _write_all(fd, data, p)
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


@contextlib.contextmanager
def exclusive_output(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the run lock of an output for a whole run; a second process is refused at once with a clear message
    (an flock: released by the kernel when the holder dies, so a killed run never leaves a stale lock).

    The lock is the file itself, not its name: the lock file beside the resolved path (a symlink resolves to its
    target) and an flock on the output's own inode (a hard link is another name for the same inode), so no two
    names of one file let two runs write it."""
    p = Path(path)
    if p.is_dir():
        raise OutputMismatchError(f"output {str(p)!r} is a folder: name a file")
    p.parent.mkdir(parents=True, exist_ok=True)
    fh: IO[str] = os.fdopen(open_nofollow(_lock_path(p, "run"), os.O_RDWR | os.O_CREAT), "a+", encoding="utf-8")
    data_fd = -1
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            # created empty if missing (an empty output is a new one), so a hard link made during the run is held too
            data_fd = os.open(p, os.O_RDONLY | os.O_CREAT, 0o666)
            fcntl.flock(data_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() if data_fd < 0 else ""
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


def drop_failed(path: Path, *, id_field: str = "id") -> int:
    """Rewrite the output without failed records (atomically); returns how many were dropped."""
    if not path.exists():
        return 0
    with write_lock(path):
        kept, dropped = [], 0
        for rec in done_records(path, id_field=id_field).values():
            if rec.get("status") == "failed":
                dropped += 1
            else:
                kept.append(json.dumps(rec, ensure_ascii=True) + "\n")
        if dropped:  # no rewrite when nothing failed: a rewrite races with anyone appending to the file
            atomic_write_text(path, "".join(kept))
    return dropped


class JsonlAppender:
    """Appends whole records, one complete write + `fsync` each, under an asyncio lock and the file's write lock.

    A write that fails part-way (a full disk) is cut back to the last whole line and raised, so a record is never
    fused with the next. If another process replaced the file meanwhile (a reviewer's atomic rewrite), the
    appender reopens it first, so its records land in the file that is there, not in the unlinked old one."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(path)
        self._fd = self._open()
        self._lock = asyncio.Lock()
        self._broken: BaseException | None = None  # after a failed write, nothing more is written

    def _open(self) -> int:
        return open_nofollow(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def _write_line(self, line: bytes) -> None:
        with write_lock(self.path):
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(self._fd)
            if current is None or (current.st_ino, current.st_dev) != (mine.st_ino, mine.st_dev):
                os.close(self._fd)
                self._fd = self._open()
            start = os.fstat(self._fd).st_size
            try:
                _write_all(self._fd, line, self.path)
                os.fsync(self._fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)  # drop the partial record: the file ends on a whole line
                raise

    async def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line."""
        try:
            line = (json.dumps(record, ensure_ascii=False, default=str, allow_nan=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (undecodable input bytes): escape them rather than lose the record
            line = (json.dumps(record, ensure_ascii=True, default=str, allow_nan=False) + "\n").encode("ascii")
        except ValueError:  # NaN or Infinity: not JSON; write them as null rather than emit an unreadable line
            line = (json.dumps(finite_values(record), ensure_ascii=True, default=str) + "\n").encode("ascii")
        async with self._lock:
            if self._broken is not None:
                raise self._broken
            try:
                self._write_line(line)
            except BaseException as exc:
                self._broken = exc
                raise

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


def finite_values(value: Any) -> Any:
    """`value` with every NaN/Infinity float replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: finite_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_values(v) for v in value]
    return value


Worker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


def describe_error(exc: BaseException) -> str:
    """A one-line reason for a failed sample, with any credential in it redacted (the record is kept on disk)."""
    from tools.redact import redact_secrets

    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact_secrets(f"{type(exc).__name__}: {msg}")[:1000] if msg else type(exc).__name__


async def run_batch(
    items: list[BatchItem],
    worker: Worker,
    output: str | os.PathLike[str],
    *,
    concurrency: int = 4,
    id_field: str = "id",
    retry_failed: bool = False,
    desc: str = "samples",
    progress: bool = True,
    stop: Callable[[], str | None] | None = None,
    kind: str | None = None,
    inputs: tuple[str | os.PathLike[str], ...] = (),
    identity: OutputIdentity | None = None,
) -> BatchSummary:
    """Run `worker(id, record)` over the items not yet in `output`, appending each result or failure.

    `stop`, if given, is asked before each sample; a non-empty answer (e.g. a spending cap reached) stops new
    samples from starting and is reported in the summary's failures as not run. `kind` names the command: an
    existing output must be a result file of the same kind (records carry it), and `inputs` may not be the output.
    `identity` (what makes the output) is checked against the one recorded beside an existing output and written
    beside a new one (`check_identity`); every refusal comes before anything is written or run.
    The output is locked for the run: a second process on it gets `OutputBusyError`.
    """
    out = Path(output)
    refuse_input_as_output(out, inputs)
    with exclusive_output(out):
        return await _run_locked(
            items,
            worker,
            out,
            concurrency=concurrency,
            id_field=id_field,
            retry_failed=retry_failed,
            desc=desc,
            progress=progress,
            stop=stop,
            kind=kind,
            inputs=inputs,
            identity=identity,
        )


def refuse_input_as_output(output: str | os.PathLike[str], inputs: tuple[str | os.PathLike[str], ...]) -> None:
    """`OutputMismatchError` when the output is one of the inputs (under any name), before anything is written."""
    out = Path(output)
    for src in inputs:
        if src and Path(src).exists() and out.exists() and os.path.samefile(src, out):
            raise OutputMismatchError(f"output {str(out)!r} is the input file: choose another output")


async def _run_locked(
    items: list[BatchItem],
    worker: Worker,
    out: Path,
    *,
    concurrency: int,
    id_field: str,
    retry_failed: bool,
    desc: str,
    progress: bool,
    stop: Callable[[], str | None] | None,
    kind: str | None,
    inputs: tuple[str | os.PathLike[str], ...],
    identity: OutputIdentity | None,
) -> BatchSummary:
    pending = check_identity(out, identity) if identity is not None else None
    check_output(out, id_field=id_field, kind=kind or (identity.kind if identity else None), inputs=inputs)
    if pending is not None:
        record_identity(out, pending)
    if retry_failed:
        drop_failed(out, id_field=id_field)
    repair_tail(out)
    done = done_records(out, id_field=id_field)
    todo = [it for it in items if it.id not in done]
    summary = BatchSummary(total=len(items), skipped=len(items) - len(todo))
    for it in items:
        rec = done.get(it.id)
        if rec is not None and rec.get("status") == "failed":
            # still a failure of this output: the exit code and the summary must say so on every rerun
            summary.failed_earlier += 1
            summary.failures.append({id_field: it.id, "error": f"(an earlier run) {rec.get('error', '')}"})
    appender = JsonlAppender(out)
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(total=len(todo), desc=desc, disable=not progress, file=sys.stderr, dynamic_ncols=True)
    stopped: list[str] = []

    async def one(item: BatchItem) -> None:
        async with sem:
            reason = stop() if stop else None
            if reason:
                stopped.append(item.id)
                return
            tag = {"kind": kind} if kind else {}
            if item.error is not None:
                rec = {id_field: item.id, "status": "failed", **tag, "error": item.error}
            else:
                try:
                    result = await worker(item.id, item.record or {})
                    rec = {id_field: item.id, "status": "ok", **tag, **result}
                except (asyncio.CancelledError, StorageError):
                    raise  # a run's store that cannot be written fails every later sample too: stop, naming it
                except Exception as exc:  # noqa: BLE001 - one bad sample must not stop the batch
                    rec = {id_field: item.id, "status": "failed", **tag, "error": describe_error(exc)}
                    raw = getattr(exc, "raw", None)
                    if raw:
                        from tools.redact import redact_secrets

                        rec["raw_answer"] = redact_secrets(str(raw)[:4000])
            await appender.append(rec)
            if rec["status"] == "failed":
                summary.failed += 1
                summary.failures.append({id_field: item.id, "error": rec["error"]})
            else:
                summary.completed += 1
            bar.update(1)

    tasks = [asyncio.ensure_future(one(it)) for it in todo]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # A record that cannot be written (disk full) ends the run loudly; samples still running are cancelled so
        # nothing is paid for that could not be kept. Everything written before stays, whole.
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        bar.close()
        appender.close()
    if stopped:
        why = stop() if stop else ""
        summary.failures.append({id_field: "*", "error": f"stopped before {len(stopped)} samples: {why}"})
    return summary
