"""The scorer registry: every scorer's `ScorerEntry` (`tools.scorers.entry`), each from its own module, by name.

A new scorer is its module (the model, its cached `get_<name>`, and its `SCORER` entry at the end) and one line in
`ENTRIES` below; the scoring entry point, the IPR context's choices, the CTD classifiers' choices, `unveil list
scorers` and the conformance suite (tests/tools/test_scorers_conformance.py) read `SCORERS`.
"""

from __future__ import annotations

from dataclasses import fields

from tools.scorers import blip_score, clip_score, mhsc, nudenet, q16
from tools.scorers.entry import ScorerEntry, ScorerEntryError

SCORERS: dict[str, ScorerEntry] = {}


def register_scorer(entry: ScorerEntry) -> ScorerEntry:
    """Add a scorer to the registry; an entry missing a piece, or whose name or columns another has, is refused by
    name (`ScorerEntryError`). Returns the entry."""
    missing = [f.name for f in fields(entry) if f.name in ("name", "help", "columns") and not getattr(entry, f.name)]
    if missing:
        raise ScorerEntryError(f"scorer entry {entry.name!r}: missing {', '.join(missing)}")
    if entry.name in SCORERS:
        raise ScorerEntryError(f"scorer {entry.name!r} is registered already")
    taken = {c for other in SCORERS.values() for c in other.columns} & set(entry.columns)
    if taken:
        raise ScorerEntryError(f"scorer {entry.name!r}: column(s) {', '.join(sorted(taken))} belong to another scorer")
    SCORERS[entry.name] = entry
    return entry


def unregister_scorer(name: str) -> None:
    """Forget a scorer (tests that register one of their own)."""
    SCORERS.pop(name, None)


# One entry per scorer, in the order score rows list their columns.
ENTRIES: tuple[ScorerEntry, ...] = (q16.SCORER, nudenet.SCORER, clip_score.SCORER, blip_score.SCORER, mhsc.SCORER)
for _entry in ENTRIES:
    register_scorer(_entry)


def image_classifiers() -> tuple[str, ...]:
    """The scorers that give a verdict on an image alone (CTD's single-modality check can use them)."""
    return tuple(name for name, entry in SCORERS.items() if entry.verdict is not None)
