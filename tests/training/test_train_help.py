"""`unveil train`'s flags take their help from each settings field's `description` metadata: every field of the
training settings has one, and it is what `--help` prints."""

from __future__ import annotations

import argparse
import ast
from dataclasses import fields
from pathlib import Path

import pytest

from training.config import GRPOSettings, SFTSettings
from training.esd import ESDSettings
from training.reward import RewardSettings
from unveil.commands import train

SETTINGS = (SFTSettings, GRPOSettings, RewardSettings, ESDSettings)


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_every_training_setting_has_help(cls: type) -> None:
    missing = [f.name for f in fields(cls) if f.name != "reward" and not f.metadata.get("description", "").strip()]
    assert missing == []


def _help(command: str) -> str:
    parser = argparse.ArgumentParser(prog="unveil")
    train.register(parser.add_subparsers())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    tsub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(tsub.choices[command].format_help().split())


@pytest.mark.parametrize(
    "command, cls, prefix",
    [
        ("sft", SFTSettings, ""),
        ("grpo", GRPOSettings, ""),
        ("grpo", RewardSettings, "reward_"),
        ("esd", ESDSettings, ""),
    ],
)
def test_the_flags_show_the_fields_help(monkeypatch, command: str, cls: type, prefix: str) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # no wrapping inside a hyphenated word
    text = _help(command)
    for f in fields(cls):
        if f.name == "reward":
            continue
        flag = "--" + (prefix + f.name).replace("_", "-")
        assert flag in text
        assert " ".join(f.metadata["description"].split()) in text, f.name


def test_help_is_not_recovered_from_source_comments() -> None:
    tree = ast.parse(Path(train.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "ast" not in imported and "inspect" not in imported


def test_list_defaults_are_not_shared_between_instances() -> None:
    one, two = SFTSettings(), SFTSettings()
    one.target_modules.append("k_proj")
    assert two.target_modules == ["q_proj", "v_proj"]
