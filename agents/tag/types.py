"""Shared vocabulary of the TAG roles: the association types (spelled once, as `AssociationType`) and the bounds on
answer sizes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, Field

from agents.categories import CategoryName, project_category

# How the root concepts are extracted (docs/tag.md): here, beside the other TAG vocabularies, so the CLI's
# help names the choices without loading the model stack.
RootsMode = Literal["separate", "joint"]
ROOTS_MODES: tuple[str, ...] = get_args(RootsMode)

# The association types of the TAG paper (§8, §10.1): the one place they are spelled. Every list, prompt and help
# text derives from this type (`ASSOCIATION_TYPES`, `ASSOCIATION_GUIDE`), so adding a type is this line plus its
# description in `ASSOCIATION_DESCRIPTIONS`; tests/graphs/test_tag_vocabulary.py checks that the two agree and that no
# other module or doc spells the list out.
AssociationType = Literal[
    "categorical", "functional", "spatial", "temporal", "causal", "emotional", "similarity", "contrast", "cultural"
]
ASSOCIATION_TYPES: tuple[AssociationType, ...] = get_args(AssociationType)

# What each type means, as the prompts (expander, root extractor, CTD's Eraser) tell the model; in the type's order.
ASSOCIATION_DESCRIPTIONS: dict[AssociationType, str] = {
    "categorical": 'class or "is-a" membership (a crowbar is a tool, and in a risky scene a burglary tool).',
    "functional": "use or purpose, including hazardous misuse (fertilizer -> explosive component).",
    "spatial": "where something is usually found or what it sits near (matches -> kitchen drawer).",
    "temporal": "what comes before or after (drinking -> driving).",
    "causal": "cause and effect (faulty wiring -> short circuit).",
    "emotional": "feelings or states a concept evokes (isolation -> depression).",
    "similarity": "shared form, colour, texture or other attributes (flour -> white powder drugs).",
    "contrast": "opposites or complements (security -> vulnerability).",
    "cultural": "symbols, slang, idioms, coded language (lab reagent -> illicit precursor).",
}


def association_guide(types: Iterable[AssociationType] = ASSOCIATION_TYPES) -> str:
    """The prompts' list of association types, one line a type with its description (`ASSOCIATION_DESCRIPTIONS`);
    a type without a description is a `KeyError` naming it."""
    lines = [f"- {name}: {ASSOCIATION_DESCRIPTIONS[name]}" for name in types]
    return "\n".join(["Association types (each edge is exactly one of these):", *lines])


ASSOCIATION_GUIDE = association_guide()

# Hard caps that also bound the JSON grammar of constrained decoders (maxItems / maxLength).
MAX_ROOTS = 4
MAX_CHILDREN = 8
MAX_CONCEPT_CHARS = 120
MAX_REASON_CHARS = 300


def clip_to(limit: int) -> Callable[[object], object]:
    """A validator that trims a string and cuts it to `limit` characters instead of failing validation.

    Small models overrun length limits often; cutting keeps the answer usable, and leaving maxLength out of the
    JSON schema keeps constrained-decoding grammars small.
    """
    return lambda v: v.strip()[:limit] if isinstance(v, str) else v


# Written out (not built by a function) so that type checkers read them as the str types they are.
Concept = Annotated[str, BeforeValidator(clip_to(MAX_CONCEPT_CHARS))]
Reason = Annotated[str, BeforeValidator(clip_to(MAX_REASON_CHARS))]
Label = Annotated[str, BeforeValidator(clip_to(80))]
ShortText = Annotated[str, BeforeValidator(clip_to(200))]
LongText = Annotated[str, BeforeValidator(clip_to(1200))]
# An empty (or blank) category or reason of a finding is a validation error, so the gateway asks for a repair.
RequiredLabel = Annotated[str, BeforeValidator(clip_to(80)), Field(min_length=1)]

# A finding's risk category: one name of the project's vocabulary (`agents.categories.CategoryName`, spelled there
# only), an enum in the JSON schema, so a constrained decoder (the embedded model) can only write a category, never a
# word like "toxic". Another model's other spelling ("Illegal drugs", "self-harm") is read onto the vocabulary,
# anything else as `other`.


def _to_vocabulary(value: object) -> object:
    return project_category(value) if isinstance(value, str) else value


Category = Annotated[CategoryName, BeforeValidator(_to_vocabulary)]
OptionalCategory = Annotated[CategoryName | Literal[""], BeforeValidator(_to_vocabulary)]
RequiredReason = Annotated[str, BeforeValidator(clip_to(MAX_REASON_CHARS)), Field(min_length=1)]


def _as_probability(value: object) -> object:
    """Read percentages (60 -> 0.6) and clamp to [0, 1]; children are renormalised per parent anyway, so only
    the relative size matters, and one out-of-range number should not cost a repair round."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if 1.0 < v <= 100.0:
            v /= 100.0
        return min(1.0, max(0.0, v))
    return value


Probability = Annotated[float, Field(ge=0.0, le=1.0), BeforeValidator(_as_probability)]  # validator runs first
