"""`unveil roles` lists what the roles themselves declare (`agents.roles`): every module of `agents/` that asks the
gateway for an answer declares it (`ROLE_ANSWERS` for a structured one, with the schema it passes; `TEXT_ANSWERS` for
free text) under a name that holds the call role it uses, so a new role cannot be missing from the list."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from pydantic import BaseModel

from agents.roles import FREE_TEXT, STRUCTURED, declaring_modules, role_schema_classes, role_schemas, text_roles

ROOT = Path(__file__).resolve().parents[2]
STRUCTURED_CALLS = {"structured", "structured_seeing"}


def _role_words(value: ast.expr) -> list[str]:
    """The literal parts a `role=` argument starts with (`"pair_judge"`, `f"expander.{m}"` -> `expander.`)."""
    words = []
    for node in ast.walk(value):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words.append(node.value)
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            words.append(str(node.values[0].value))
            break  # the f-string's later constants are not a role's start
    return words


def gateway_calls(text: str) -> list[tuple[str, list[str], str]]:
    """(kind, role words, schema name) of each gateway call with a `role=` in a module's source: kind is
    `structured` or `text`, the schema name "" where the schema is not a plain name."""
    calls = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "role" not in keywords or node.func.attr not in {*STRUCTURED_CALLS, "text"}:
            continue
        schema = keywords.get("schema")
        calls.append(
            (
                "structured" if node.func.attr in STRUCTURED_CALLS else "text",
                _role_words(keywords["role"]),
                schema.id if isinstance(schema, ast.Name) else "",
            )
        )
    return calls


def undeclared(module: str, text: str, declared: dict[str, dict[str, object]]) -> list[str]:
    """What a module's gateway calls ask for that its declarations (`{STRUCTURED: ..., FREE_TEXT: ...}`) miss."""
    problems = []
    structured, free = declared.get(STRUCTURED, {}), declared.get(FREE_TEXT, {})
    for kind, words, schema in gateway_calls(text):
        names = structured if kind == "structured" else {**structured, **free}
        if not names:
            problems.append(f"{module}: a {kind} call but no {STRUCTURED if kind == 'structured' else FREE_TEXT}")
            continue
        problems += [f"{module}: role {w!r} is in no declared name" for w in words if not any(w in n for n in names)]
        schemas = {getattr(s, "__name__", "") for s in structured.values()}
        if kind == "structured" and schema and schema[0].isupper() and schema not in schemas:
            problems.append(f"{module}: schema {schema} is not declared")
    return problems


def _declared(module: str) -> dict[str, dict[str, object]]:
    loaded = importlib.import_module(module)
    return {name: dict(getattr(loaded, name, {})) for name in (STRUCTURED, FREE_TEXT)}


def test_every_module_that_asks_the_gateway_declares_its_answers() -> None:
    problems = []
    for path in sorted((ROOT / "agents").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module == "agents.gateway" or not gateway_calls(text):  # the gateway's own calls pass a role through
            continue
        assert module in declaring_modules(), f"{module} calls the gateway but declares no answers"
        problems += undeclared(module, text, _declared(module))
    assert not problems, problems


def test_the_check_names_a_module_that_declares_nothing_or_misses_a_role() -> None:
    text = (
        "async def f(gateway, spec, messages):\n"
        '    await gateway.structured(role="oracle", spec=spec, schema=Prophecy, messages=messages)\n'
        '    await gateway.text(role=f"muse.{spec}", spec=spec, messages=messages)\n'
    )
    assert undeclared("agents.x", text, {}) == [
        "agents.x: a structured call but no ROLE_ANSWERS",
        "agents.x: a text call but no TEXT_ANSWERS",
    ]

    class Other(BaseModel):
        pass

    assert undeclared("agents.x", text, {STRUCTURED: {"sibyl": Other}}) == [
        "agents.x: role 'oracle' is in no declared name",
        "agents.x: schema Prophecy is not declared",
        "agents.x: role 'muse.' is in no declared name",
    ]


def test_the_listing_is_the_roles_declarations() -> None:
    classes = role_schema_classes()
    assert all(isinstance(s, type) and issubclass(s, BaseModel) for s in classes.values())
    from agents.tag.judges import PairJudgement

    assert classes["pair_judge"] is PairJudgement
    assert set(role_schemas()) == set(classes) and "refiner.<step>" in text_roles() and "guard.<name>" in text_roles()
    assert "agents.providers.registry" not in declaring_modules()
