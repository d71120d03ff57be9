"""What an output is: a result file of one command, made with settings that are recorded beside it.

An existing output is reused only when it is a result file of the same command (`check_output`), never the input
itself (`refuse_input_as_output`). The command and the settings that change results are kept beside the output
(`.OUTPUT.settings`, a `SettingsRecord`; see `OutputIdentity`), and a rerun with other settings is refused before
anything runs (`check_identity`, `OutputSettingsError` naming each difference) unless it asks to mix them; the
sidecar then lists every mixed setting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from tools.atomic_files import OutputMismatchError, atomic_write_bytes, atomic_write_text, write_all, write_lock
from tools.jsonl_files import MAX_LINE_BYTES, parse_json_line
from tools.safe_files import UnreadableFileError, open_regular, open_side_file, read_regular, refuse_link


@dataclass(frozen=True)
class OutputIdentity:
    """What makes an output: the command (`kind`, e.g. "detect"), the settings that change its records (model
    specs per role, method, graph settings; never concurrency or progress), and the command line, kept for people
    to read. `allow_mixed` lets a run add to an output made with other settings (the sidecar then lists both)."""

    kind: str
    settings: dict[str, Any]
    command: str = ""
    allow_mixed: bool = False


class MixedSettings(TypedDict):
    """One other setting an output mixes in: the command line that added records with it and its settings (None,
    with a `note`, for records made before their settings were recorded)."""

    command: str
    settings: dict[str, Any] | None
    note: NotRequired[str]


class SettingsRecord(TypedDict):
    """The sidecar `.OUTPUT.settings` (JSON, keys in this order): what made an output. A sidecar written by an
    older version may lack `format`, `command` or `mixed`; `read_identity` checks `kind` and `settings` only."""

    format: NotRequired[int]
    kind: str
    settings: dict[str, Any]
    command: NotRequired[str]
    mixed: NotRequired[list[MixedSettings]]


class OutputSettingsError(OutputMismatchError):
    """The chosen output was made with other settings (or with settings not recorded) than this run's."""


MIX_FLAG = "--allow-mixed-settings"
MAX_SIDECAR_BYTES = MAX_LINE_BYTES  # a sidecar is a few lines of settings; a larger one is not ours


def _is_result(rec: object, id_field: str, kind: str | None) -> bool:
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
    refuse_link(out, "output")  # records are never read or written through a link, nor from a FIFO
    if not out.exists() or out.stat().st_size == 0:
        return
    if out.is_dir():
        raise OutputMismatchError(f"output {str(out)!r} is a folder: name a file")
    good, torn, foreign = _scan_output(out, id_field, kind)
    what = f"`unveil {kind}`" if kind else "this command"
    if foreign or (torn and not good):
        raise OutputMismatchError(
            f"output {str(out)!r} exists and is not a result file of {what} ({foreign or len(torn)} lines are not its "
            "records): choose another output, or remove the file if it is yours to lose"
        )
    if torn:
        # Torn lines in the middle (a crash of an older version, a disk that filled): keep them aside, rewrite
        # the output with the whole records only, so a resumed run never keeps a torn line in the middle.
        with write_lock(out):
            _set_aside(out, torn)
            atomic_write_bytes(out, b"".join(good))


def _scan_output(out: Path, id_field: str, kind: str | None) -> tuple[list[bytes], list[tuple[int, int]], int]:
    """The whole result lines of an output, the (offset, length) of its torn middle lines (unparseable, or over
    the line cap: never read whole), and how many lines are something else."""
    good: list[bytes] = []
    torn: list[tuple[int, int]] = []
    foreign = 0
    with os.fdopen(open_regular(out, what="output"), "rb") as fh:
        while True:
            start = fh.tell()
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line, in chunks
                    raw = fh.readline(MAX_LINE_BYTES)
                if not raw:
                    break  # an over-long torn last line: `repair_tail` cuts it
                torn.append((start, fh.tell() - start))
                continue
            if not raw.endswith(b"\n"):
                break  # a torn last line, left by a killed writer: `repair_tail` cuts it
            if not raw.strip():
                continue
            try:
                rec = parse_json_line(raw)
            except ValueError:
                torn.append((start, len(raw)))
                continue
            if _is_result(rec, id_field, kind):
                good.append(raw)
            else:
                foreign += 1
    return good, torn, foreign


def _set_aside(out: Path, torn: list[tuple[int, int]]) -> None:
    """Append the torn lines to `OUTPUT.torn` (copied in chunks), opened as every file beside an output is: never
    through a link planted at that name, regular files only (`open_side_file`)."""
    side_path = out.parent / f"{out.name}.torn"
    fd = open_side_file(side_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        with os.fdopen(open_regular(out, what="output"), "rb") as src:
            for start, length in torn:
                src.seek(start)
                while length > 0:
                    chunk = src.read(min(length, 1 << 20))
                    if not chunk:
                        break
                    write_all(fd, chunk, side_path)
                    length -= len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)


def settings_path(output: str | os.PathLike[str]) -> Path:
    """The sidecar that records what made an output: `.OUTPUT.settings` beside it (JSON; a name no loader of
    `*.json` or `*.jsonl` files picks up as data)."""
    out = Path(output)
    return out.parent / f".{out.name}.settings"


def _normal(value: object) -> Any:
    # Settings compare as JSON: a tuple and a list of the same specs are the same setting.
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _shown(value: object) -> str:
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


def read_identity(output: str | os.PathLike[str]) -> SettingsRecord | None:
    """The recorded identity of an output (its `SettingsRecord`), or None when it has none (an output of an older
    version, or a sidecar that cannot be read)."""
    side = settings_path(output)
    try:
        # A regular file of at most MAX_SIDECAR_BYTES, never through a link: linked to /dev/zero it would be read for
        # ever, and a FIFO would hang the run while it holds the output's lock.
        value = json.loads(read_regular(side, MAX_SIDECAR_BYTES, what="settings file", nofollow=True).decode("utf-8"))
    except (OSError, UnreadableFileError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("kind"), str)
        or not isinstance(value.get("settings"), dict)
    ):
        return None
    return cast(SettingsRecord, value)  # checked above: a dict with a str kind and a dict of settings


def _has_records(out: Path) -> bool:
    try:
        return out.stat().st_size > 0
    except FileNotFoundError:
        return False


def check_identity(output: str | os.PathLike[str], identity: OutputIdentity) -> SettingsRecord | None:
    """Refuse a run whose command or settings differ from the ones that made `output` (`OutputSettingsError`, naming
    each difference and the two ways on), unless `identity.allow_mixed`; an output of another command is always
    refused. Writes nothing; returns the sidecar content `record_identity` should write (None: nothing to write)."""
    out = Path(output)
    settings = _normal(identity.settings)
    if not _has_records(out):
        # a new output (a stale sidecar of a removed file is replaced)
        return _new_record(identity, settings, [])
    known = read_identity(out)
    if known is None:
        return _unrecorded_output(out, identity, settings)
    if known["kind"] != identity.kind:
        raise OutputMismatchError(
            f"output {_quoted(out)} is a result file of `unveil {known['kind']}`, not of `unveil {identity.kind}`: "
            "choose another output"
        )
    return _mix_settings(out, known, identity, settings)


def _quoted(out: Path) -> str:
    """How messages name an output: its path, quoted."""
    return repr(str(out))


def _ways_on() -> str:
    return (
        f"choose a new --output (or --out) for these settings, or pass {MIX_FLAG} to add this run's records to "
        "it anyway"
    )


def _new_record(identity: OutputIdentity, settings: dict[str, Any], mixed: list[MixedSettings]) -> SettingsRecord:
    return {"format": 1, "kind": identity.kind, "settings": settings, "command": identity.command, "mixed": mixed}


def _unrecorded_output(out: Path, identity: OutputIdentity, settings: dict[str, Any]) -> SettingsRecord:
    """An output with records but no readable sidecar: refused, or (mixing allowed) recorded with a note that
    its earlier records' settings are not known."""
    if not identity.allow_mixed:
        raise OutputSettingsError(
            f"output {_quoted(out)} has no record of the settings that made it (written by an older Unveil, or "
            f"{settings_path(out).name} is missing or unreadable), so this run cannot tell whether its settings "
            f"match: {_ways_on()}"
        )
    unknown: MixedSettings = {
        "command": "",
        "settings": None,
        "note": "records made before their settings were recorded",
    }
    return _new_record(identity, settings, [unknown])


def _mix_settings(
    out: Path, known: SettingsRecord, identity: OutputIdentity, settings: dict[str, Any]
) -> SettingsRecord | None:
    """An output of this command: nothing to write when the settings match (or are already listed as mixed);
    refused when they differ and mixing is not allowed; else the sidecar with this run's settings added."""
    diff = settings_difference(known["settings"], identity.settings)
    if not diff:
        return None
    listed = known.get("mixed")
    mixed: list[Any] = listed if isinstance(listed, list) else []
    if not identity.allow_mixed:
        also = f" (it already mixes {len(mixed)} other setting(s))" if mixed else ""
        made = f" by `{known['command']}`" if known.get("command") else ""
        raise OutputSettingsError(
            f"output {_quoted(out)} was made{made} with other settings{also}: "
            + "; ".join(diff)
            + f". Nothing was run: {_ways_on()}"
        )
    if any(isinstance(m, dict) and m.get("settings") == settings for m in mixed):
        return None
    return {**known, "mixed": [*mixed, {"command": identity.command, "settings": settings}]}


def record_identity(output: str | os.PathLike[str], content: SettingsRecord) -> None:
    """Write an output's identity sidecar (atomically)."""
    atomic_write_text(settings_path(output), json.dumps(content, indent=1, ensure_ascii=False, default=str) + "\n")


def refuse_input_as_output(output: str | os.PathLike[str], inputs: tuple[str | os.PathLike[str], ...]) -> None:
    """`OutputMismatchError` when the output is one of the inputs (under any name), before anything is written."""
    out = Path(output)
    for src in inputs:
        if src and Path(src).exists() and out.exists() and os.path.samefile(src, out):
            raise OutputMismatchError(f"output {str(out)!r} is the input file: choose another output")
