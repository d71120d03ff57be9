"""The association types are spelled in one place (`agents.tag.types.AssociationType`): every list, prompt, schema and
help text derives from it, each type has its prompt description, and no other module or doc spells the list out or
counts it differently. Adding a type is one edit plus its description; this file names whatever disagrees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.tag.types import (
    ASSOCIATION_DESCRIPTIONS,
    ASSOCIATION_GUIDE,
    ASSOCIATION_TYPES,
    association_guide,
)

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "agents" / "tag" / "types.py"
# Where a copy of the list could live: the product packages, tests, tools around them, and the docs.
CODE_DIRS = ("tools", "agents", "graphs", "runner", "evaluation", "training", "unveil", "tests", "bench", "scripts")
DOCS = ("README.md", "CONTRIBUTING.md", "docs")
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
# A place naming more than half of the types is a copy of the list (a test's subset of a few is not).
COPY_AT = len(ASSOCIATION_TYPES) // 2 + 1


def _files(roots: tuple[str, ...], suffixes: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for name in roots:
        path = ROOT / name
        out += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.suffix in suffixes]
    return [p for p in out if p.is_file() and p != HOME]


def quoted_types(text: str) -> set[str]:
    """The types a source file names as string literals."""
    return {t for t in ASSOCIATION_TYPES if t in text and re.search(rf"""["']{t}["']""", text)}


def prose_types(line: str) -> set[str]:
    """The types a line of a doc names as words."""
    return {t for t in ASSOCIATION_TYPES if t in line and re.search(rf"\b{t}\b", line)}  # `in` first: faster


def test_every_type_has_its_description_in_the_types_order() -> None:
    assert tuple(ASSOCIATION_DESCRIPTIONS) == ASSOCIATION_TYPES
    assert all(d.strip() for d in ASSOCIATION_DESCRIPTIONS.values())
    lines = ASSOCIATION_GUIDE.splitlines()[1:]
    assert [line.split(":")[0] for line in lines] == [f"- {t}" for t in ASSOCIATION_TYPES]


def test_a_type_without_a_description_is_named() -> None:
    with pytest.raises(KeyError, match="telepathic"):
        association_guide(["telepathic"])  # type: ignore[list-item]


def test_schemas_prompts_and_settings_take_the_types_from_the_one_type() -> None:
    from agents.ctd.eraser import Erasure
    from agents.ctd.vocabulary import ERASURE_TECHNIQUES
    from agents.tag.expander import EXPAND_PROMPT, Child
    from agents.tag.roots import IMAGE_ROOT_PROMPT, TEXT_ROOT_PROMPT, Attribute
    from graphs.tag.context import TagContext

    for schema, name in ((Child, "association"), (Attribute, "association"), (Erasure, "association_type")):
        assert tuple(schema.model_json_schema()["properties"][name]["enum"]) == ASSOCIATION_TYPES, schema.__name__
    for prompt in (EXPAND_PROMPT, IMAGE_ROOT_PROMPT, TEXT_ROOT_PROMPT):
        assert "{guide}" in prompt  # filled with ASSOCIATION_GUIDE (or the run's allowed subset)
    assert ASSOCIATION_GUIDE in ERASURE_TECHNIQUES
    field = TagContext.__dataclass_fields__["association_types"]
    assert TagContext().association_types == list(ASSOCIATION_TYPES)
    assert tuple(field.metadata["item_choices"]) == ASSOCIATION_TYPES
    assert all(t in field.metadata["description"] for t in ASSOCIATION_TYPES)


def test_no_module_spells_the_list_out() -> None:
    copies = []
    for path in _files(CODE_DIRS, (".py", ".html", ".js")):
        text = path.read_text(encoding="utf-8")
        named = quoted_types(text)
        if len(named) >= COPY_AT:
            copies.append(f"{path.relative_to(ROOT)}: {sorted(named)}")
    assert not copies, f"use agents.tag.types.ASSOCIATION_TYPES instead of a list: {copies}"


def listed_in_prose(text: str) -> set[str]:
    """The types named as words within any two neighbouring lines (a list in a doc, a help text or a string)."""
    lines = text.splitlines()
    windows = [" ".join(lines[i : i + 2]) for i in range(max(1, len(lines) - 1))]
    return max((prose_types(w) for w in windows), key=len, default=set())


def test_no_doc_or_text_spells_the_list_out_or_miscounts_it() -> None:
    count = NUMBERS[len(ASSOCIATION_TYPES)] if len(ASSOCIATION_TYPES) < len(NUMBERS) else str(len(ASSOCIATION_TYPES))
    problems = []
    for path in _files(DOCS, (".md",)) + _files(CODE_DIRS, (".py", ".html", ".js")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        # No two lines name more types than the whole text: only a text naming enough is read window by window.
        named = listed_in_prose(text) if len(prose_types(text)) >= COPY_AT else set()
        if len(named) >= COPY_AT:
            problems.append(f"{where}: lists {sorted(named)}")
        words = " ".join(text.split())
        said_counts = rf"\b({'|'.join(NUMBERS)}|\d+) association types\b"
        for said in re.findall(said_counts, words, re.I) if "association types" in words.lower() else ():
            if said.lower() != count:
                problems.append(f"{where}: says {said!r} association types, there are {len(ASSOCIATION_TYPES)}")
    assert not problems, problems


def test_the_copy_checks_see_a_copy_and_pass_a_subset() -> None:
    copy, subset = ASSOCIATION_TYPES[:COPY_AT], ASSOCIATION_TYPES[: COPY_AT - 1]
    assert len(quoted_types(repr(list(copy)))) == COPY_AT and len(quoted_types(repr(list(subset)))) < COPY_AT
    assert len(listed_in_prose("x\ntypes: " + ",\n".join(copy))) < COPY_AT  # one a line: only two seen at once
    assert len(listed_in_prose("x = 1\ntypes: " + ", ".join(copy[:2]) + ",\n" + ", ".join(copy[2:]))) == COPY_AT
