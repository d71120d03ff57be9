"""Send back (issue 34 item 10): a rejection with a note sends an accepted pair back to the Eraser; the next
`unveil generate` on the folder continues that scene's thread from the reviewer's note (no earlier call
repeated), and the revised pair waits for review again, its review history and the note kept. Scripted models and
the tiny random-weight Stable Diffusion pipeline, as in tests/graphs/test_ctd.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.ctd_dataset import load_samples
from tests.graphs.test_ctd import (
    base_script,
    cli_args,
    erasure,
    fresh_gateway,
    merge,
    panel_rules,
    tiny_sd,
    write_script,
)
from unveil.cli import main

__all__ = ["fresh_gateway", "tiny_sd"]  # fixtures shared with test_ctd.py

NOTE = "the scale gives it away: NOTE-7Q"


@pytest.mark.slow  # three generate runs through the tiny pipeline
def test_a_sample_sent_back_gets_another_eraser_attempt(tmp_path: Path, tiny_sd: str, capsys) -> None:
    out = tmp_path / "ds"
    # The Eraser answers B once the reviewer's note is in its history, else A; the panel accepts both.
    eraser = [{"when": "NOTE-7Q", "then": erasure("B")}, {"when": "", "then": erasure("A")}]
    spec = write_script(tmp_path, merge(base_script(eraser), merge(panel_rules("A"), panel_rules("B"))))
    assert main(cli_args(out, spec, tiny_sd, n=1)) == 0
    sid = "drugs-00000"
    first = load_samples(out)[sid]
    assert first["status"] == "pending_review" and first["text"].startswith("CAPTION-A:") and first["rounds"] == 1
    assert main(["review", str(out), "--reject", sid, "--send-back"]) == 1  # a note is required
    assert "with a note" in capsys.readouterr().err
    assert main(["review", str(out), "--reject", sid, "--send-back", "--note", NOTE]) == 0
    marked = load_samples(out)[sid]
    assert marked["status"] == "sent_back" and marked["send_back"]["note"] == NOTE
    capsys.readouterr()
    assert main(cli_args(out, spec, tiny_sd, n=1)) == 0
    # The summary says what the run did: no new scene, the sent-back one revised (it once said "0 scenes done").
    assert "0 scenes done, 1 sent-back scene revised, 0 failed, 1 already in" in capsys.readouterr().err
    revised = load_samples(out)[sid]
    assert revised["status"] == "pending_review" and revised["text"].startswith("CAPTION-B:")
    assert revised["rounds"] == 2 and revised["feedback_history"][-1]["problem"] == "reviewer_rejected"
    assert revised["feedback_history"][-1]["feedback"] == NOTE
    assert [h["decision"] for h in revised["review_history"]] == ["reject"] and revised["sent_back"][0]["note"] == NOTE
    # The Architect and the first attempt's judges were not asked again: 1 Architect call in the thread.
    assert revised["usage"]["by_role"]["architect"]["calls"] == 1
    # A third run finds nothing to send back.
    assert main(cli_args(out, spec, tiny_sd, n=1)) == 0
    assert load_samples(out)[sid]["rounds"] == 2
