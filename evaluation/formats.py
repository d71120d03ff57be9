"""The entry of one benchmark format in the registry `evaluation.datasets.FORMATS`, and the checks an entry passes.

A format is one record: its name (what `--format` and `--dataset FMT:FILE` take), a help line (`--format`'s help
and `unveil list formats`), the container its files use (`json`: one JSON document, `jsonl`: one record a line), a
sniff rule (does a parsed file look like this format?) and a loader (file -> `BatchItem`s). The sniffer, the
loaders and the CLI all read the registry, so a format is added in one place; an entry that lacks a piece is refused
when it is built, naming the format and the piece (`FormatEntryError`). Recipe: CONTRIBUTING.md, "A benchmark
format."; conformance suite: tests/bench/test_benchmark_formats.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from runner.batch_input import BatchItem
from tools.errors import UnveilError

# (file, dataset folder, include benign samples) -> one item per sample or unusable record
Loader = Callable[[Path, Path, bool], list[BatchItem]]
# A JSON document is a dict, a list or a scalar; a sniff rule looks at it without trusting its shape.
JsonValue = dict[str, object] | list[object] | str | int | float | bool | None
# The parsed document (json) or the file's first record (jsonl; {} when it has none) -> "this is my format"
Sniff = Callable[[JsonValue], bool]
Container = Literal["json", "jsonl"]
CONTAINERS: tuple[str, ...] = get_args(Container)


class FormatEntryError(UnveilError, ValueError):
    """A benchmark format's registry entry lacks a piece or repeats a name; the message names both."""


def first_record(document: JsonValue) -> dict[str, object]:
    """The first record of a JSON list ({} for anything else): what most sniff rules look at."""
    first = document[0] if isinstance(document, list) and document else None
    return first if isinstance(first, dict) else {}


def fallback(_document: JsonValue) -> bool:
    """The sniff rule of a container's default format: taken when no other format of the container matches."""
    return True


@dataclass(frozen=True)
class BenchmarkFormat:
    """One benchmark format: everything the sniffer, the loaders and the CLI know about it."""

    name: str
    help: str
    container: Container
    sniff: Sniff
    load: Loader

    def __post_init__(self) -> None:
        where = f"benchmark format {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise FormatEntryError(f"{where}: the name must be an identifier (it is typed as --format NAME)")
        if not isinstance(self.help, str) or not self.help.strip() or "\n" in self.help:
            raise FormatEntryError(f"{where}: no help line (one line for --format's help)")
        if self.container not in CONTAINERS:
            raise FormatEntryError(f"{where}: container {self.container!r} is not one of {', '.join(CONTAINERS)}")
        if not callable(self.sniff):
            raise FormatEntryError(f"{where}: no sniff rule (a function of the parsed file; `fallback` for a default)")
        if not callable(self.load):
            raise FormatEntryError(f"{where}: no loader (file, folder, include_benign -> BatchItems)")


def build_registry(entries: Iterable[BenchmarkFormat]) -> dict[str, BenchmarkFormat]:
    """The registry of `entries` by name, in their order; refuses a repeated name and a container without exactly one
    `fallback` entry (the sniffer's default for files of that kind)."""
    out: dict[str, BenchmarkFormat] = {}
    for entry in entries:
        if not isinstance(entry, BenchmarkFormat):
            raise FormatEntryError(f"benchmark format {entry!r}: not a BenchmarkFormat")
        if entry.name in out or entry.name == "auto":
            raise FormatEntryError(f"benchmark format {entry.name!r}: the name is taken")
        out[entry.name] = entry
    for container in CONTAINERS:
        defaults = [e.name for e in out.values() if e.container == container and e.sniff is fallback]
        if len(defaults) != 1:
            found = f"{len(defaults)} fallback entries {defaults}"
            raise FormatEntryError(f"{container} benchmark formats: {found}, need exactly 1")
    return out


def sniff(registry: dict[str, BenchmarkFormat], container: Container, document: JsonValue) -> str:
    """The name of the format whose rule matches `document`: the specific rules of `container` in registry order,
    then its fallback."""
    candidates = [e for e in registry.values() if e.container == container]
    for entry in candidates:
        if entry.sniff is not fallback and entry.sniff(document):
            return entry.name
    return next(e.name for e in candidates if e.sniff is fallback)


def format_help(registry: dict[str, BenchmarkFormat]) -> str:
    """`--format`'s help: every format's name and help line, then `auto`."""
    names = "; ".join(f"{e.name}: {e.help}" for e in registry.values())
    return f"layout per --dataset (one value applies to all): {names}; auto: guessed from the file (the default)"
