"""The tool schemas Unveil's own chat models bind (`agents.providers.local_base`)."""

from __future__ import annotations

from langchain_core.utils.function_calling import convert_to_openai_tool

from agents.providers.local_base import openai_tool
from agents.tag.expander import Expansion, expansion_schema
from agents.tag.judges import PairJudgement


def test_a_schema_binds_as_langchain_converts_it_and_each_call_gets_its_own_copy() -> None:
    """The converted schema is langchain's own, and a model that changes the dict it got (the servers' grammar
    builders loosen bounds) leaves the next call's untouched."""
    for schema in (Expansion, PairJudgement, expansion_schema(40, 40)):
        first = openai_tool(schema)
        assert first == convert_to_openai_tool(schema)
        first["function"]["parameters"]["properties"].clear()  # type: ignore[index]
        assert openai_tool(schema) == convert_to_openai_tool(schema)


def test_a_sized_schema_is_not_served_the_default_schemas_conversion() -> None:
    """`expansion_schema` makes a class of the same name with larger caps: it gets its own JSON schema."""
    assert openai_tool(expansion_schema(40, 40)) != openai_tool(Expansion)
