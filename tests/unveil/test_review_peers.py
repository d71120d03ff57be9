"""The review items of issue 45 round two ("beyond the peers": Argilla and Label Studio are the peers to match),
run as a reviewer runs them, through the web app's test client: the judges' category as a suggestion recorded
only when changed, skip, comments, the own queue before the samples assigned to others, and each reviewer's
progress and time per sample on the agreement page. The browser drives them in tests/unveil/test_ui_curation.py.
Decisions keep their semantics: a skip and a comment are never judgements."""

from __future__ import annotations

import json
from pathlib import Path

from runner.ctd_dataset import load_samples
from tests.ui_data import make_ctd_dataset
from tests.unveil.test_review_auth import csrf_of, log_lines, web


def test_the_judges_category_is_a_suggestion_recorded_only_when_changed(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    first, second = make_ctd_dataset(root)["pending"][:2]  # first: generated as fraud, the judges said drugs
    (root / "labels.json").write_text(json.dumps({"category": True}))
    client = web(root)
    page = client.get("/review", params={"id": first}).text
    assert '<option value="drugs" selected>drugs</option>' in page
    assert '<input type="hidden" name="label_category_default" value="drugs">' in page
    form = {"decision": "approve", "label_category": "drugs", "label_category_default": "drugs"}
    client.post("/review/decide", data={**form, "id": first, "csrf": csrf_of(client)})
    rec = load_samples(root)[first]
    assert rec["status"] == "accepted" and rec["category"] == "fraud" and "category_generated" not in rec
    assert "category" not in log_lines(root)[-1] and "category" not in rec["review"]["reviews"][0]
    client.post("/review/decide", data={**form, "id": second, "label_category": "crimes", "csrf": csrf_of(client)})
    rec = load_samples(root)[second]
    assert rec["category"] == "crimes" and rec["category_generated"] == "drugs"
    assert log_lines(root)[-1]["category"] == "crimes"
