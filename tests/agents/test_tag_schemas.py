"""The TAG roles' output schemas: findings must carry a category and a reason; list caps follow the settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.tag.expander import MAX_PARENTS, Expansion, expansion_schema
from agents.tag.judges import ConfirmedPair, PairJudgement, RootVerdict, judgement_schema, screen_schema
from agents.tag.types import MAX_CHILDREN


@pytest.mark.parametrize(
    "pair",
    [
        {"pair_id": "v1.0|t1.0", "category": "", "reason": "a drug sale"},
        {"pair_id": "v1.0|t1.0", "category": "drugs", "reason": "   "},
        {"pair_id": "v1.0|t1.0", "category": "drugs"},
    ],
)
def test_a_confirmed_pair_without_category_or_reason_is_invalid(pair: dict) -> None:
    with pytest.raises(ValidationError):
        ConfirmedPair.model_validate(pair)
    assert ConfirmedPair.model_validate({**pair, "category": "drugs", "reason": "a drug sale"}).reason == "a drug sale"


def test_a_toxic_root_verdict_needs_category_and_reason() -> None:
    with pytest.raises(ValidationError, match="category and reason"):
        RootVerdict.model_validate({"toxic": True, "visual_id": "v0.0", "textual_id": "t0.0", "category": "drugs"})
    assert RootVerdict.model_validate({"toxic": False}).category == ""


def test_list_caps_grow_with_the_settings() -> None:
    assert expansion_schema(3, 6) is Expansion  # today's defaults keep the default schema
    n_children, n_parents = MAX_CHILDREN + 4, MAX_PARENTS + 8
    big = expansion_schema(n_children, n_parents)
    children = [{"concept": f"c{i}", "association": "similarity", "probability": 0.1} for i in range(n_children)]
    answer = {"expansions": [{"parent_id": f"v1.{j}", "children": children} for j in range(n_parents)]}
    assert len(big.model_validate(answer).expansions) == n_parents
    with pytest.raises(ValidationError):
        Expansion.model_validate(answer)
    schema = big.model_json_schema()
    assert schema["properties"]["expansions"]["maxItems"] == n_parents

    confirmed = {"toxic_pairs": [{"pair_id": f"v1.{i}|t1.0", "category": "drugs", "reason": "r"} for i in range(40)]}
    assert len(judgement_schema(40).model_validate(confirmed).toxic_pairs) == 40
    with pytest.raises(ValidationError):
        PairJudgement.model_validate(confirmed)
    assert screen_schema(30).model_json_schema()["properties"]["suspicious_pair_ids"]["maxItems"] == 30
