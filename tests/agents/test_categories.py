"""One category vocabulary (agents/categories.py) across CTD, the guard mappings and the benchmark loaders."""

from __future__ import annotations

import ast

import pytest
from pydantic import TypeAdapter

from agents.categories import CATEGORIES, OTHER, VOCABULARY, normalize_category, project_category
from agents.ctd import vocabulary
from agents.guard import base as guard_base
from agents.guard.llama_guard import LLAMA_GUARD_4_CATEGORIES, LLAMA_GUARD_4_TO_PROJECT
from agents.guard.llavaguard import LLAVAGUARD_CATEGORIES, LLAVAGUARD_TO_PROJECT
from evaluation.samples import sample_category
from tests.project.test_one_home import homes, sources

# SIUO's nine categories exactly as its release spells them.
SIUO = {
    "self-harm": "self_harm",
    "illegal activities & crime": "crimes",
    "privacy violation": "privacy",
    "morality": "morality",
    "dangerous behavior": OTHER,
    "discrimination & stereotyping": "hate",
    "information misinterpretation": OTHER,
    "religion beliefs": "hate",
    "controversial topics, politics": "political",
}


@pytest.mark.parametrize(("name", "expected"), SIUO.items())
def test_siuo_categories_map_onto_the_vocabulary(name: str, expected: str) -> None:
    assert sample_category(name) == expected


@pytest.mark.parametrize(
    ("category", "sub", "expected"),
    [
        ("illegal_activity", "drug_related_hazards", "drugs"),  # the subcategory is more specific
        ("illegal_activity", "property_crime", "crimes"),
        ("self_harm", "suicide", "self_harm"),
        ("sexual_content", "sexual_content", "morality"),
        ("specialized_advice", "medical_advice", OTHER),
        ("privacy", "facial_data_exposure", "privacy"),
        ("violence", "obscene_gestures", "violence"),  # a vocabulary name stays what it is
        ("crimes", "drug smuggling", "crimes"),  # CTD's own rows keep their category
        ("Illegal Activity", "Cybercrime", "crimes"),  # VLSBench
        ("physical harm", None, "violence"),  # MSSBench
        ("", None, ""),
    ],
)
def test_benchmark_categories_and_subcategories(category: str, sub: str | None, expected: str) -> None:
    assert sample_category(category, sub) == expected


def test_every_mapping_lands_in_the_one_vocabulary() -> None:
    assert vocabulary.CATEGORIES is CATEGORIES and guard_base.PROJECT_CATEGORIES == VOCABULARY
    assert set(LLAMA_GUARD_4_TO_PROJECT) == set(LLAMA_GUARD_4_CATEGORIES)
    assert set(LLAVAGUARD_TO_PROJECT) == set(LLAVAGUARD_CATEGORIES)
    for value in [*LLAMA_GUARD_4_TO_PROJECT.values(), *LLAVAGUARD_TO_PROJECT.values()]:
        assert value in VOCABULARY
    # The guards' own names read the same way through the shared reader, where the words are clear.
    for code in ("S1", "S2", "S7", "S8", "S10", "S11", "S13"):
        assert project_category(LLAMA_GUARD_4_CATEGORIES[code]) == LLAMA_GUARD_4_TO_PROJECT[code], code
    for code in ("O1", "O2", "O5", "O7"):
        assert project_category(LLAVAGUARD_CATEGORIES[code]) == LLAVAGUARD_TO_PROJECT[code], code


def test_words_match_at_word_starts_only() -> None:
    assert normalize_category("Illegal drugs") == "drugs" and normalize_category("meth lab") == "drugs"
    assert project_category("a method of something") == OTHER  # neither "meth" nor "ethic" inside a word
    assert normalize_category("Self-harm") == "self_harm" and normalize_category("weird thing") == "weird thing"
    assert project_category("weird thing") == OTHER and project_category(None) == ""


def test_the_vocabulary_has_one_home() -> None:
    assert homes(r"^CATEGORIES\b[^\n]*=") == ["agents/categories.py"]
    assert homes(r"^_CATEGORY_WORDS\b") == ["agents/categories.py"]


def listed_categories(text: str) -> set[str]:
    """The categories the largest list, tuple, set or `Literal[...]` of string literals in a source names (a mapping's
    values, such as a guard's code -> category table, are not a copy of the list: mypy checks them against the
    `Literal`)."""
    best: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        elements = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else []
        named = {e.value for e in elements if isinstance(e, ast.Constant) and e.value in CATEGORIES}
        best = max(best, named, key=len)
    return best


def test_the_categories_are_spelled_once_and_everything_derives_from_them() -> None:
    from agents import categories
    from agents.tag import types

    # One `Literal` (`CtdCategory`), `other` added once: the tuples, the word table and the findings' schema follow.
    assert VOCABULARY == (*CATEGORIES, OTHER) and len(set(VOCABULARY)) == len(VOCABULARY)
    # Every category is read from free text (the table keeps its own order: the first matching stem wins).
    assert sorted(categories._CATEGORY_WORDS) == sorted(CATEGORIES)
    assert types.CategoryName is categories.CategoryName
    assert tuple(TypeAdapter(types.Category).json_schema()["enum"]) == VOCABULARY
    assert tuple(TypeAdapter(types.OptionalCategory).json_schema()["anyOf"][0]["enum"]) == VOCABULARY
    # No other product module quotes the list (more than half of it) instead of deriving it.
    copies = {
        path: sorted(named)
        for path, text in sources().items()
        if path != "agents/categories.py" and len(named := listed_categories(text)) > len(CATEGORIES) // 2
    }
    assert not copies, f"use agents.categories.CATEGORIES / VOCABULARY instead of a list: {copies}"


def test_the_copy_check_sees_a_copy_of_the_categories() -> None:
    assert listed_categories(f"X = {list(CATEGORIES[:6])!r}") == set(CATEGORIES[:6])
    assert listed_categories(f"X = Literal[{', '.join(map(repr, CATEGORIES))}]") == set(CATEGORIES)
    assert listed_categories(repr(dict(zip("abcdefghij", CATEGORIES, strict=True)))) == set()  # a mapping's values


def test_loaders_write_the_vocabulary_and_keep_the_benchmarks_spelling() -> None:
    from evaluation.datasets import load_detection
    from tests.evaluation.test_eval_benchmarks import FIX

    memes = {
        it.id: it.record
        for it in load_detection(FIX / "hateful_memes" / "dev_seen.jsonl", "hateful_memes")
        if it.record
    }
    assert {r["category"] for r in memes.values() if r["label"] == 1} == {"hate"}
    assert {r["category"] for r in memes.values() if r["label"] == 0} == {""}
    siuo = [it.record for it in load_detection(FIX / "siuo" / "siuo_gen.json", "siuo") if it.record]
    assert all(r["category"] in VOCABULARY for r in siuo)
    assert {r["source_category"] for r in siuo} <= set(SIUO)
