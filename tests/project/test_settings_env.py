"""The one environment reader (`tools.env`): one boolean vocabulary, numbers with bounds, and errors that name the
variable; and no product module outside it, the CLI included, reads `os.environ` (ruff's TID251 says the same)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tools.env import SettingError, env_bool, env_float, env_int, env_list, env_str, parse_bool
from tools.errors import UnveilError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
    ],
)
def test_booleans_have_one_vocabulary(monkeypatch, text: str, expected: bool) -> None:
    monkeypatch.setenv("UNVEIL_SOME_FLAG", text)
    assert env_bool("UNVEIL_SOME_FLAG") is expected
    assert parse_bool("flag", text) is expected


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_values_give_the_default(monkeypatch, default: bool) -> None:
    monkeypatch.delenv("UNVEIL_SOME_FLAG", raising=False)
    assert env_bool("UNVEIL_SOME_FLAG", default) is default
    monkeypatch.setenv("UNVEIL_SOME_FLAG", "  ")
    assert env_bool("UNVEIL_SOME_FLAG", default) is default
    assert env_int("UNVEIL_SOME_FLAG", 7) == 7
    assert env_str("UNVEIL_SOME_FLAG", "x") == "x"
    assert env_list("UNVEIL_SOME_FLAG") == []


def test_a_bad_boolean_names_the_variable_and_the_accepted_words(monkeypatch) -> None:
    monkeypatch.setenv("UNVEIL_SOME_FLAG", "maybe")
    with pytest.raises(SettingError) as err:
        env_bool("UNVEIL_SOME_FLAG")
    message = str(err.value)
    assert "UNVEIL_SOME_FLAG='maybe'" in message
    assert "1/true/yes/on" in message and "0/false/no/off" in message
    assert isinstance(err.value, UnveilError) and isinstance(err.value, ValueError)


def test_numbers_are_read_and_bounded(monkeypatch) -> None:
    monkeypatch.setenv("UNVEIL_SOME_NUMBER", " 3 ")
    assert env_int("UNVEIL_SOME_NUMBER", 1, minimum=1) == 3
    assert env_float("UNVEIL_SOME_NUMBER", None, minimum=0, strict=True) == 3.0
    with pytest.raises(SettingError, match=r"UNVEIL_SOME_NUMBER=3: must be at least 4"):
        env_int("UNVEIL_SOME_NUMBER", 1, minimum=4)
    with pytest.raises(SettingError, match=r"must be greater than 3"):
        env_float("UNVEIL_SOME_NUMBER", None, minimum=3, strict=True)


@pytest.mark.parametrize("text, says", [("three", "expected an integer"), ("2.5", "expected an integer")])
def test_a_bad_integer_names_the_variable(monkeypatch, text: str, says: str) -> None:
    monkeypatch.setenv("UNVEIL_SOME_NUMBER", text)
    with pytest.raises(SettingError, match=f"UNVEIL_SOME_NUMBER='{text}': {says}"):
        env_int("UNVEIL_SOME_NUMBER", 1)


def test_lists_and_text_are_stripped(monkeypatch) -> None:
    monkeypatch.setenv("UNVEIL_SOME_LIST", " a, ,b ,")
    assert env_list("UNVEIL_SOME_LIST") == ["a", "b"]
    assert env_str("UNVEIL_SOME_LIST") == "a, ,b ,"


ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("tools", "agents", "graphs", "runner", "evaluation", "training", "unveil")
READER = Path("tools/env.py")
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(path: Path) -> list[int]:
    """The line of every `os.environ` / `os.getenv` (or `from os import environ`) in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[int] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in ENV_NAMES for a in node.names):
            found.append(node.lineno)
    return sorted(found)


def test_the_scan_sees_an_environment_read(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom os import getenv\nx = os.environ.get('A')\ny = os.getenv('B')\n")
    assert environment_reads(sample) == [2, 3, 4]


def test_no_product_module_but_the_reader_reads_the_environment() -> None:
    reads = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT) != READER
        for line in environment_reads(path)
    ]
    assert reads == [], "read the environment through tools.env instead:\n" + "\n".join(reads)


def test_a_context_boolean_from_the_environment_uses_the_one_vocabulary(monkeypatch) -> None:
    from graphs.context import ContextError
    from graphs.tag import TagContext

    monkeypatch.setenv("UNVEIL_SCREEN_PAIRS", "off")
    assert TagContext().screen_pairs is False
    monkeypatch.setenv("UNVEIL_SCREEN_PAIRS", "YES")
    assert TagContext().screen_pairs is True
    # Any other word used to mean False without a word; now it is refused, naming the variable.
    monkeypatch.setenv("UNVEIL_SCREEN_PAIRS", "maybe")
    with pytest.raises(ContextError, match="UNVEIL_SCREEN_PAIRS='maybe'.*1/true/yes/on"):
        TagContext()


def test_a_bad_hub_offline_switch_names_the_variable(monkeypatch) -> None:
    from tools.hub import hub_offline

    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "ON")
    assert hub_offline() is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "sometimes")
    with pytest.raises(SettingError, match="HF_HUB_OFFLINE='sometimes'"):
        hub_offline()


def test_a_model_spec_switch_uses_the_one_vocabulary() -> None:
    from agents.providers.hf_vlm import HFModelError, parse_hf_spec

    assert parse_hf_spec("hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=a&merge").merge is True
    assert parse_hf_spec("hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=a&merge=OFF").merge is False
    # Any other word used to mean "do not merge" without a word.
    with pytest.raises(HFModelError, match="merge='sometimes'"):
        parse_hf_spec("hf:Qwen/Qwen2.5-VL-3B-Instruct?adapter=a&merge=sometimes")
