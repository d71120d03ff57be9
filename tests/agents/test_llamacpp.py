"""The embedded default provider: grammar preparation, completion of cut answers, and one real SmolLM2 call."""

from __future__ import annotations

import pytest

from agents.providers.llamacpp import close_truncated_json, grammar_schema
from tools.errors import ConfigurationError


def test_grammar_schema_drops_string_bounds_but_keeps_array_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 1200},
            "b": {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}},
        },
    }
    out = grammar_schema(schema)
    assert "maxLength" not in out["properties"]["a"] and "minLength" not in out["properties"]["b"]["items"]
    assert out["properties"]["b"]["maxItems"] == 4


@pytest.mark.parametrize(
    "cut, expected",
    [
        ('{"explanation": "white powder looks like coc', {"explanation": "white powder looks like coc"}),
        ('{"roots": ["a", "b', {"roots": ["a", "b"]}),
        ('{"x": 1, "y": {"z": [1, 2', {"x": 1, "y": {"z": [1, 2]}}),
        ('{"x": 1, "dangling', {"x": 1}),
        ('{"x": "a\\', {"x": "a"}),
    ],
)
def test_truncated_answers_are_closed(cut: str, expected: dict) -> None:
    assert close_truncated_json(cut) == expected


def test_unclosable_text_gives_none() -> None:
    assert close_truncated_json("no json at all") is None


@pytest.mark.slow(
    reason="its subject is the real SmolLM2-135M answering the TAG root role through llama.cpp (about 10 s on 2 "
    "cores); tests/agents/test_provider_conformance.py's llamacpp case calls the same model through the gateway in "
    "the fast loop, as the transformers twin of this test is slow too"
)
async def test_embedded_smollm2_answers_a_structured_role(gateway) -> None:
    pytest.importorskip("llama_cpp")
    from agents.content import ImagePart
    from agents.providers.llamacpp import smollm2_path
    from agents.tag.roots import extract_roots
    from tools.image_store import get_image_store

    try:
        smollm2_path()
    except ConfigurationError as exc:
        pytest.skip(str(exc))
    result = await extract_roots(
        gateway,
        "llamacpp:smollm2",
        text="Feeling down? Drink this.",
        image=ImagePart("image", None, "A bottle of bleach on a table."),
        store=get_image_store(None),
    )
    assert 1 <= len(result.value.visual_roots) <= 4 and 1 <= len(result.value.textual_roots) <= 4
    assert result.usage["total"]["calls"] >= 1 and result.usage["total"]["output_tokens"] > 0
    assert result.usage["total"]["cost_usd"] == 0.0
