"""The one environment reader (`tools.env`): one boolean vocabulary, numbers with bounds, and errors that name the
variable; and no product module outside it and the CLI reads `os.environ`."""

from __future__ import annotations

import pytest

from tools.env import SettingError, env_bool, env_float, env_int, env_list, env_str, parse_bool
from tools.errors import UnveilError


@pytest.mark.parametrize("text, expected", [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
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
