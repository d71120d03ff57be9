"""The README's run-file example runs from a fresh clone (issue 45: it named `data/ctd/dataset.jsonl`, which is not
shipped): its dataset is in the repository, its dry run plans every sample, and the same file with the scripted
detector in place of the API model runs every sample to a record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_args import run_cli as main
from tools.jsonl_files import done_records

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "eval" / "scripts" / "detect.json"


def readme_run_file() -> str:
    """The first TOML block of the README (the run-file example)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```toml\n(.*?)```", text, re.S)
    assert found is not None
    return found.group(1)


def test_the_readme_run_file_plans_its_shipped_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the clone
    run_file = tmp_path / "ci.toml"
    run_file.write_text(readme_run_file())
    assert main(["run", str(run_file), "--dry-run"]) == 0, capsys.readouterr().err
    shown = capsys.readouterr().out
    assert "vanilla: 8 samples" in shown and "tag: 8 samples" in shown


def test_the_readme_run_file_runs_every_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    text = readme_run_file().replace('"openai:gpt-4.1"', f'"scripted:{SCRIPT}"')
    out = tmp_path / "eval"
    run_file = tmp_path / "ci.toml"
    run_file.write_text(text.replace("[[jobs]]\n", f'[[jobs]]\nout = "{out}"\ncache = "off"\nno_progress = true\n'))
    assert main(["run", str(run_file)]) in (0, 3), capsys.readouterr().err  # 3: the accuracy gate may be missed
    results = sorted((out / "runs").rglob("*.jsonl"))
    assert len(results) == 2  # vanilla and tag
    for path in results:
        records = done_records(path)
        assert len(records) == 8 and all(r["status"] == "ok" for r in records.values()), path
