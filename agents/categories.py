"""The project's one risk-category vocabulary, and the reading of every other spelling onto it.

The vocabulary is the Covert Toxic Dataset's ten categories (the TAG paper's taxonomy, Figure 4), as slugs, plus
`other` for a risk none of them names. CTD generates samples in the ten; guard codes (`agents/guard/*`) and the
benchmarks' own category names (`evaluation/benchmarks.py`, `evaluation/datasets.py`) are mapped onto the vocabulary,
so a per-category table means the same thing whichever dataset or detector produced the row. The benchmark's own
spelling is kept beside the mapped name (`source_category`), so nothing is lost.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

# The Covert Toxic Dataset's ten categories, as slugs: the one place they are spelled (the CLI accepts the spaced and
# hyphenated spellings too). `CATEGORIES`, `VOCABULARY`, the findings' schema enum (`agents.tag.types.Category`) and
# the word table below derive from it; tests/agents/test_categories.py checks that they agree.
CtdCategory = Literal[
    "drugs",
    "crimes",
    "violence",
    "hate",
    "self_harm",
    "fraud",
    "morality",
    "privacy",
    "ip_violation",
    "political",
]
# The vocabulary: the ten, and `other` for a risk none of them names.
CategoryName = Literal[CtdCategory, "other"]
CATEGORIES: tuple[CtdCategory, ...] = get_args(CtdCategory)
OTHER: Literal["other"] = "other"
VOCABULARY: tuple[CategoryName, ...] = get_args(CategoryName)
_BY_NAME: dict[str, CategoryName] = {name: name for name in VOCABULARY}  # str -> its Literal, for the type checker

# Word stems that identify a category inside a free-form label ("Illegal drugs", "Self harm", SIUO's "illegal
# activities & crime", HoliSafe's "drug_related_hazards", a guard's "Suicide & Self-Harm"). Each is a regular
# expression matched at the start of a word of the label (lower-cased, `_` and `-` read as spaces), in this order, so
# "illegal drugs" is drugs and "violent crimes" violence ("non-violent crimes" crimes); whole words where a stem would
# catch others ("meth" is not "method").
_CATEGORY_WORDS: dict[CtdCategory, tuple[str, ...]] = {
    "drugs": (
        "drug",
        "narcotic",
        "substance",
        "cocaine",
        "heroin",
        "opioid",
        r"meth\b",
        "methamphetamine",
        "cannabis",
        "marijuana",
    ),
    "self_harm": (r"self ?harm", r"self ?injur", "suicid"),
    "ip_violation": (r"ip violation", "intellectual", "copyright", "piracy", "trademark", "counterfeit"),
    "privacy": ("privacy", "surveillance", "doxx", r"personal data", "stalk", r"facial data", r"identity data"),
    "fraud": ("fraud", "scam", "phishing", "forgery"),
    "hate": (
        "hate",
        "discriminat",
        "racis",
        "slur",
        "extremis",
        "harass",
        "stereotyp",
        "religio",
        "offensive",
        r"gender\b",
        r"race\b",
    ),
    "violence": (
        r"(?<!non )violen",
        "weapon",
        "assault",
        "murder",
        "terror",
        "explosive",
        r"physical harm",
        r"physical altercation",
        r"animal (abuse|cruelty)",
    ),
    "crimes": ("crime", "criminal", "theft", "burglar", "smuggl", "illegal", r"property damage"),
    "political": ("politic", "election", "propaganda"),
    "morality": ("moral", "immoral", "ethic", "unethic", "sexual", "obscen", "erotic", "nudity", "porn"),
}
_PATTERNS = {slug: re.compile(r"\b(?:" + "|".join(words) + ")") for slug, words in _CATEGORY_WORDS.items()}


def _words(label: str | None) -> str:
    return " ".join((label or "").strip().lower().replace("_", " ").replace("-", " ").split())


def _slug(label: str | None) -> str:
    return _words(label).replace(" ", "_")


def normalize_category(label: str | None) -> str:
    """The category slug a free-form label names, or the cleaned label itself (lower case, single spaces) when
    none matches, so two unmatched labels still compare equal when they are the same words."""
    if _slug(label) in VOCABULARY:
        return _slug(label)
    text = _words(label)
    for slug, pattern in _PATTERNS.items():
        if pattern.search(text):
            return slug
    return text


def vocabulary_name(label: str | None) -> CategoryName:
    """The vocabulary name of any label: its category, `other` for a risk the vocabulary does not name (SIUO's
    "information misinterpretation", Llama Guard's "Specialized Advice") or for no label."""
    return _BY_NAME.get(normalize_category(label), OTHER)


def project_category(label: str | None) -> CategoryName | Literal[""]:
    """A vocabulary name for any label (`vocabulary_name`), "" for no label."""
    return vocabulary_name(label) if _words(label) else ""


def is_category_name(label: str | None) -> bool:
    """Whether a label is a vocabulary name in one of its spellings (`self_harm`, `self-harm`, `Self harm`)."""
    return _slug(label) in VOCABULARY
