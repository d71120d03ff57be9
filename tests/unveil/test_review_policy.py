"""The review policy is a setting of the dataset folder (issue 45 item 2): `DIR/review_policy.json`, set once by the
first call that asks for a value and read by the web app, `unveil review`, `unveil reviewers assign` and Studio's
review node; a call asking for another policy is refused naming the stored one. In process: the CLI through
`unveil.cli.main`, the web app through Starlette's test client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.ctd_dataset import load_samples
from tests.unveil.test_review_auth import csrf_of, pending_folder, sign_in, web
from tools.review_policy import POLICY, FolderPolicy, ReviewPolicyError, load_policy, settle_policy
from tools.reviewers import REVIEWERS, add_reviewer
from unveil.cli import main


def test_the_web_apps_policy_holds_for_a_cli_call_without_the_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    """The issue's steps: assign with --per-sample 2, the web app at --min-reviewers 2, then `unveil review
    --approve` without --min-reviewers accepted the sample on one approval, and the card reported two rules."""
    root = pending_folder(tmp_path / "ds", "a", "b")
    tokens = {n: add_reviewer(root / REVIEWERS, n) for n in ("alice", "bob")}
    assert main(["reviewers", "assign", str(root), "--reviewers", "alice,bob", "--per-sample", "2"]) == 0
    client = web(root, min_reviewers=2)
    sign_in(client, tokens["bob"])
    client.post("/review/decide", data={"id": "b", "decision": "approve", "csrf": csrf_of(client)})
    assert load_samples(root)["b"]["status"] == "pending_review"  # 1 of 2
    monkeypatch.setenv("UNVEIL_REVIEWER_TOKEN", tokens["alice"])
    capsys.readouterr()
    assert main(["review", str(root), "--approve", "a"]) == 0
    assert "1 waiting for more reviewers" in capsys.readouterr().err
    rec = load_samples(root)["a"]
    assert rec["status"] == "pending_review" and rec["review"]["min_reviewers"] == 2
    # A call asking for another policy is refused, naming the stored one; nothing is applied.
    assert main(["review", str(root), "--approve", "b", "--min-reviewers", "1"]) == 1
    err = capsys.readouterr().err
    assert "2 reviewers per sample, unanimous, each sample assigned to 2" in err and POLICY in err
    assert load_samples(root)["b"]["status"] == "pending_review"
    with pytest.raises(ReviewPolicyError, match="stored: 2"):
        web(root, min_reviewers=3)
    assert main(["reviewers", "assign", str(root), "--reviewers", "alice,bob", "--per-sample", "1"]) == 1
    # The web app without the flag uses the folder's policy, and says it.
    client = web(root)
    sign_in(client, tokens["bob"])  # with a reviewers file, the page is for signed-in reviewers only
    page = client.get("/reviewers").text
    assert "2 reviewers per sample" in page
    # alice's approval of b decides it under the one policy, which the export card reports (from the records).
    assert main(["review", str(root), "--approve", "b"]) == 0
    assert load_samples(root)["b"]["status"] == "accepted"
    assert {r["review"]["min_reviewers"] for r in load_samples(root).values()} == {2}  # one rule for the card


def test_the_policy_is_set_once_and_changed_only_by_its_command(tmp_path: Path, capsys) -> None:
    root = pending_folder(tmp_path / "ds", "a")
    assert load_policy(root) == FolderPolicy()  # nothing stored: the defaults
    assert not (root / POLICY).exists()
    assert settle_policy(root, rule="majority") == FolderPolicy(rule="majority")
    assert json.loads((root / POLICY).read_text()) == {"rule": "majority"}
    assert settle_policy(root, min_reviewers=3) == FolderPolicy(min_reviewers=3, rule="majority")
    with pytest.raises(ReviewPolicyError, match=r"rule 'unanimous' \(stored: 'majority'\)"):
        settle_policy(root, rule="unanimous")
    assert main(["reviewers", "policy", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "3 reviewers per sample, majority"
    assert main(["reviewers", "policy", str(root), "--min-reviewers", "2", "--review-rule", "unanimous"]) == 0
    assert load_policy(root) == FolderPolicy(min_reviewers=2, rule="unanimous")
    # A link in the file's place is refused, not followed.
    (root / POLICY).unlink()
    (root / POLICY).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ReviewPolicyError, match="link"):
        load_policy(root)


def test_studio_on_a_review_folder_uses_the_folders_policy(tmp_path: Path) -> None:
    from graphs.ctd.context import CtdContext
    from graphs.ctd.human_review import folder_policy

    root = pending_folder(tmp_path / "ds", "a")
    settle_policy(root, min_reviewers=2)
    assert folder_policy(root, CtdContext()).min_reviewers == 2  # the context's default asks for nothing
    with pytest.raises(ReviewPolicyError, match="2 reviewers per sample"):
        folder_policy(root, CtdContext(min_reviewers=3))
    assert folder_policy(root, CtdContext(review_rule="majority")).rule == "majority"  # unset: stored now
    assert load_policy(root) == FolderPolicy(min_reviewers=2, rule="majority")
