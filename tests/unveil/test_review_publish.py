"""`unveil review DIR --publish REPO` (issue 45, round two: beyond the peers): the export pushed with `datasets`'
own `push_to_hub`, run as a user runs it (the CLI), against a local stand-in for the Hub (never the network): the
stand-in keeps what `push_to_hub` was given in a local folder, which `datasets` loads back. The token comes from
`HF_TOKEN` and never shows, not even in the message of a failed push."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_reviews import apply_reviews
from tests.ui_data import make_ctd_dataset
from unveil.cli import main

TOKEN = "hf_secretTOKENvalue1234567890"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A local stand-in for the Hub: `Dataset.push_to_hub` writes the split into `tmp_path/hub/OWNER/NAME`."""
    import datasets

    pushed: dict[str, Any] = {"calls": []}

    def fake_push(self: Any, repo_id: str, **kwargs: Any) -> None:
        pushed["calls"].append({"repo": repo_id, **kwargs})
        folder = tmp_path / "hub" / repo_id
        folder.mkdir(parents=True, exist_ok=True)
        self.to_parquet(str(folder / f"{kwargs.get('split') or 'train'}.parquet"))

    monkeypatch.setattr(datasets.Dataset, "push_to_hub", fake_push)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may reach the network, whatever the stand-in misses
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    pushed["root"] = tmp_path / "hub"
    return pushed


def test_publish_pushes_the_export_with_push_to_hub(tmp_path: Path, hub: dict[str, Any], capsys) -> None:
    import datasets

    root = tmp_path / "ds"
    pending = make_ctd_dataset(root)["pending"]
    apply_reviews(root, {pending[0]: [{"decision": "note", "note": "check the label"}, {"decision": "approve"}]})
    assert main(["review", str(root), "--publish", "me/ctd-covert", "--private"]) == 0
    out = capsys.readouterr()
    assert "published to https://huggingface.co/datasets/me/ctd-covert" in out.err
    assert TOKEN not in out.out + out.err
    [call] = hub["calls"]
    assert call["repo"] == "me/ctd-covert" and call["token"] == TOKEN and call["private"] is True
    assert call["split"] == "train"
    pushed = datasets.load_dataset("parquet", data_files=str(hub["root"] / "me/ctd-covert/train.parquet"))["train"]
    exported = datasets.Dataset.from_parquet(str(root / "export" / "data.parquet"), keep_in_memory=True)
    assert pushed["id"] == exported["id"] and pending[0] in pushed["id"]
    assert pushed.features["image"] == exported.features["image"] and pushed[0]["image"].size[0] > 0
    row = pushed[pushed["id"].index(pending[0])]
    assert [a["decision"] for a in json.loads(row["annotations"])] == ["note", "approve"]
    assert main(["review", str(root), "--publish", "me/ctd-covert"]) == 0
    assert hub["calls"][-1]["private"] is None  # not --private: a new repository gets the account's default


def test_a_failed_push_names_the_repository_never_the_token(
    tmp_path: Path, hub: dict[str, Any], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    def refused(self: Any, repo_id: str, **kwargs: Any) -> None:
        raise PermissionError(f"401 Unauthorized for {repo_id} (Authorization: Bearer {kwargs.get('token')})")

    monkeypatch.setattr(datasets.Dataset, "push_to_hub", refused)
    root = tmp_path / "ds"
    make_ctd_dataset(root)
    assert main(["review", str(root), "--publish", "me/ctd"]) != 0
    out = capsys.readouterr()
    assert "--publish me/ctd: the push failed: PermissionError: 401 Unauthorized" in out.err
    assert TOKEN not in out.out + out.err and "Bearer ***" in out.err
    assert main(["review", str(root), "--publish", "no-owner"]) != 0
    assert "expected a Hub dataset repository as OWNER/NAME" in capsys.readouterr().err
