"""`unveil ui` curator features in Debian's headless chromium (Playwright), as tests/unveil/test_ui.py: every run file
fully shown (evaluate-ipr trajectories, the detection input, the zoomable TAG picture), undo, search and bulk
decisions, duplicates side by side and several reviewers (review in Studio and in the web app agreeing:
tests/unveil/test_ui_studio_review.py). Screenshots go to the test's temporary folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, load_samples
from runner.ctd_reviews import apply_reviews
from tests.ui_data import INPUT_TEXTS, make_ctd_dataset, make_detection_results, make_eval_ipr_results
from tests.unveil.test_ui import Server, browser, natural_widths, new_page, set_reviewer  # noqa: F401 - a fixture  # noqa: F401 - a fixture
from tools.reviewers import REVIEWERS, add_reviewer
from unveil.ui import create_app

pytestmark = pytest.mark.slow


def words(texts: list[str]) -> list[str]:
    """Texts with their whitespace runs folded to one space (as written in the template, not as CSS shows)."""
    return [" ".join(t.split()) for t in texts]


def test_evaluate_ipr_run_files_are_shown_as_refine_files(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Per seed: the keep badge, the kept step outlined, the refiner's reason per step, why the run stopped; the
    stop filter works on run files too."""
    store = tmp_path / "store"
    files = make_eval_ipr_results(tmp_path / "runs", store)
    page = new_page(browser)
    with Server(create_app(files["ipr"], image_store=store)) as srv:
        page.goto(srv.url + "/ipr")
        first = page.locator("#prompt-1")
        assert words(first.locator(".run-stop").all_text_contents()) == ["keep at step 1", "keep at step 0"]
        assert first.locator(".step.kept .step-prompt").all_inner_texts() == ["a boxing match", "a bloody fight"]
        reasons = first.locator(".step .muted.small").all_inner_texts()
        assert reasons == [
            "refiner: gore: blood and a fight",
            "refiner: a sport scene, nothing graphic",
            "refiner: already harmless",
        ]
        assert page.locator("#filters select[name=stop] option").all_inner_texts() == ["any", "keep", "t_max"]
        page.select_option("#filters select[name=stop]", "t_max")
        page.wait_for_url("**stop=t_max**")
        assert page.locator("article h1").all_inner_texts() == ["i2p-9"]
        assert words(page.locator(".run-stop").all_text_contents()) == ["t_max"]
        assert page.locator(".step.kept").count() == 0


def test_detection_page_shows_the_input_and_a_zoomable_tag(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    results = tmp_path / "detect.jsonl"
    make_detection_results(results, tmp_path / "store")
    page = new_page(browser)
    with Server(create_app(results)) as srv:
        page.goto(srv.url + "/detections/view?id=pair-1")
        assert page.locator("#input-text").inner_text() == INPUT_TEXTS[1]  # markup shown as text
        assert page.locator("#input-text i").count() == 0
        assert page.locator("#input-description").inner_text() == "a bowl of flour beside a digital scale"
        assert len(page.locator("#input-image").inner_text()) == 64  # the image id
        # The TAG picture is an SVG in a frame: the buttons and the wheel zoom it, a drag pans it.
        assert "tag.svg" in (page.locator("#tag-img").get_attribute("src") or "")
        assert natural_widths(page, "#tag-img")[0] > 0
        frame = page.locator("#tag-frame")
        assert frame.get_attribute("data-scale") == "1.000"
        page.click("#zoom-in")
        assert float(frame.get_attribute("data-scale") or 0) == pytest.approx(1.5)
        box = frame.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + 200, box["y"] + 100)
        page.mouse.wheel(0, -200)
        page.wait_for_function("document.getElementById('tag-frame').dataset.scale === '1.875'")
        before = page.eval_on_selector("#tag-img", "e => e.style.transform")
        page.mouse.down()
        page.mouse.move(box["x"] + 120, box["y"] + 60, steps=4)
        page.mouse.up()
        after = page.eval_on_selector("#tag-img", "e => e.style.transform")
        assert before != after and "translate(" in after
        page.screenshot(path=str(tmp_path / "detection-zoom.png"), full_page=True)
        page.click("#zoom-reset")
        assert frame.get_attribute("data-scale") == "1.000"
        # The older record without input fields says so instead of failing.
        page.goto(srv.url + "/detections/view?id=pair-0")
        assert page.locator("#input-text").inner_text() == "—"
        # The SVG itself is served as an image, and unknown formats are not.
        assert page.request.get(srv.url + "/detections/tag.svg?id=pair-0").headers["content-type"] == "image/svg+xml"
        assert page.request.get(srv.url + "/detections/tag.gif?id=pair-0").status == 404


def test_undo_a_decision_and_a_note(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """'u' takes back the last decision (the sample waits again); a note is undone from the history; the
    decisions file only grows, and a second undo of the same entry changes nothing."""
    ds = tmp_path / "ds"
    first, second = make_ctd_dataset(ds)["pending"][:2]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/review")
        set_reviewer(page, "alice")
        keys = " ".join(page.locator("#keys").inner_text().split())  # the hint names every key (issue 45: not u)
        assert "a approve" in keys and "u undo the last decision" in keys
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator("#card").get_attribute("data-id") == second
        assert load_samples(ds)[first]["status"] == "accepted"
        with page.expect_navigation():
            page.keyboard.press("u")
        assert page.locator(".flash").inner_text().startswith("Undone")
        assert page.locator("#card").get_attribute("data-id") == first
        assert load_samples(ds)[first]["status"] == "pending_review"
        assert "0 of 4 reviewed" in " ".join(page.locator(".progress-text").inner_text().split())
        # A note, then its undo from the history list.
        page.fill("#note", "check the scale again")
        with page.expect_navigation():
            page.click("#save-note")
        entries = page.locator("#review-history li")
        assert entries.count() == 3 and entries.nth(0).locator(".chip").inner_text() == "undone"
        with page.expect_navigation():
            entries.nth(2).locator(".undo-button").click()
        assert page.locator("#review-history li").nth(2).locator(".chip").inner_text() == "undone"
        page.screenshot(path=str(tmp_path / "undo.png"), full_page=True)
        # The same undo again (a double click) is not applied twice.
        csrf = page.locator("#decide input[name=csrf]").get_attribute("value")
        again = page.request.post(
            srv.url + "/review/undo", form={"id": first, "undoes": "2", "csrf": csrf}, max_redirects=0
        )
        assert again.status == 303
        page.goto(srv.url + again.headers["location"])
        assert page.locator(".flash").inner_text().startswith("Already recorded")
    log = [json.loads(x) for x in (ds / DECISIONS).read_text().splitlines()]
    assert [(d["decision"], d.get("undoes")) for d in log] == [
        ("approve", None),
        ("undo", 0),
        ("note", None),
        ("undo", 2),
    ]
    history = load_samples(ds)[first]["review_history"]
    assert [h["decision"] for h in history] == ["approve", "undo", "note", "undo"]


def test_undo_with_two_reviewers_recounts_the_rest(tmp_path: Path) -> None:
    """Undoing one of two reviews decides again from the other under the sample's own policy."""
    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][0]
    # as authenticated (tests/unveil/test_review_auth.py)
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    apply_reviews(ds, {sample: {"decision": "approve"}}, reviewer="alice", **two)
    apply_reviews(ds, {sample: {"decision": "reject"}}, reviewer="bob", **two)
    assert load_samples(ds)[sample]["status"] == "rejected"
    counts = apply_reviews(ds, {sample: {"decision": "undo", "undoes": 1}}, reviewer="bob", **two)
    rec = load_samples(ds)[sample]
    assert counts["undone"] == 1 and rec["status"] == "pending_review"
    assert [r["reviewer"] for r in rec["review"]["reviews"]] == ["alice"] and rec["review"]["min_reviewers"] == 2
    assert apply_reviews(ds, {sample: {"decision": "undo", "undoes": 1}}, reviewer="bob", **two)["skipped"] == 1


def test_search_and_bulk_decisions(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Search finds samples by a judge's reason, by id, by category and by text; ticking samples and one
    confirmation approves them together."""
    ds = tmp_path / "ds"
    pending = make_ctd_dataset(ds)["pending"]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/review")

        def search(q: str) -> list[str]:
            page.fill("#search", q)
            with page.expect_navigation():
                page.press("#search", "Enter")
            return page.locator("#sample-list .sid").all_inner_texts()

        assert search("a TELL") == [pending[0]]  # a judge's reason, any case
        assert search(pending[2]) == [pending[2]]  # an id
        assert search("fraud") == [pending[0], pending[3]]  # a category
        assert search("grandma powder") == [pending[3]]  # words of the text, in any order
        assert search("") == pending
        # Tick two, approve them with one confirmation (dismissing it first changes nothing).
        page.check(f"input.pick[value='{pending[1]}']")
        page.check(f"input.pick[value='{pending[2]}']")
        assert page.locator("#picked").inner_text() == "2 selected"
        dialogs: list[str] = []
        page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.click("#bulk-approve")
        page.wait_for_timeout(300)
        assert dialogs == ["Approve 2 selected samples?"] and load_samples(ds)[pending[1]]["status"] == "pending_review"
        page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
        with page.expect_navigation():
            page.click("#bulk-approve")
        assert page.locator(".flash").inner_text() == "Approved 2 of 2 selected."
        recs = load_samples(ds)
        assert [recs[i]["status"] for i in pending] == ["pending_review", "accepted", "accepted", "pending_review"]
        assert page.locator("#sample-list .sid").all_inner_texts() == [pending[0], pending[3]]
        # "All shown" selects what the filter shows; rejecting them names how many.
        search("fraud")
        page.check("#pick-all")
        page.once("dialog", lambda d: d.accept())
        with page.expect_navigation():
            page.click("#bulk-reject")
        assert page.locator(".flash").inner_text() == "Rejected 2 of 2 selected."
        page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
    recs = load_samples(ds)
    assert recs[pending[0]]["status"] == "rejected" and recs[pending[3]]["status"] == "rejected"
    log = [json.loads(x) for x in (ds / DECISIONS).read_text().splitlines()]
    assert len(log) == 4


def test_a_duplicate_is_shown_beside_its_twin(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds, duplicate=True)
    twin = data["pending"][1]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/review?status=duplicate")
        assert page.locator("#card").get_attribute("data-id") == "drugs-dup"
        assert page.locator("#twin-link").inner_text() == twin and page.locator("#similarity").inner_text() == "0.9531"
        assert "near duplicate" in page.locator("#duplicate").inner_text()
        assert [w > 0 for w in natural_widths(page, ".twin-img")] == [True, True]
        assert page.locator("#sample-img").count() == 0  # its own image once, in the side-by-side
        texts = page.locator(".twin-text").all_inner_texts()
        assert "today" in texts[0] and "this week" in texts[1]
        # The judges' verdict does not read as a review decision, and a duplicate takes none.
        verdict = page.locator("#rule-verdict .chip").inner_text()
        assert verdict == "passed the judges"
        assert "not a review decision" in (page.locator("#card").text_content() or "")
        assert page.locator("#approve").count() == 0
        page.screenshot(path=str(tmp_path / "duplicate.png"), full_page=True)
        with page.expect_navigation():
            page.click("#twin-link")
        assert page.locator("#card").get_attribute("data-id") == twin and page.locator("#duplicate").count() == 0
        # the twin took two rounds: its feedback history shows the first round's image beside that round's feedback
        assert [w > 0 for w in natural_widths(page, ".feedback-img")] == [True]


def test_kappa_values() -> None:
    from unveil.ui.agreement import cohen_kappa, fleiss_kappa, judgements

    a, r = "approve", "reject"
    assert cohen_kappa([(a, a), (a, r), (r, r), (r, r)]) == pytest.approx(0.5)
    assert fleiss_kappa([[a, a], [a, r], [r, r], [r, r]]) == pytest.approx((0.75 - 34 / 64) / (1 - 34 / 64))
    assert cohen_kappa([(a, a), (a, a)]) is None and fleiss_kappa([[a, a]]) is None
    history = [
        {"decision": "approve", "reviewer": "x"},
        {"decision": "undo", "undoes": 0, "reviewer": "x"},
        {"decision": "reject", "reviewer": "y", "applied": False},
        {"decision": "note", "reviewer": "z"},
    ]
    assert judgements(history) == {"y": "reject"}


def sign_in(page: Any, url: str, token: str) -> None:
    """Sign a page's browser in with a reviewer token (the folder has a reviewers file)."""
    page.goto(url + "/review")
    assert page.url.endswith("/signin")
    page.fill("#token", token)
    with page.expect_navigation():
        page.click("#signin-button")


def test_several_reviewers_tally_queues_and_agreement(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """With two reviewers needed (unanimous), each signs in with their token; the queue opens on what the
    reviewer has not judged, a decision says how many of the reviewers needed judged it, a repeat is 'already
    judged by you', a sample shows who judged what and the outcome, and the reviewers page counts and compares
    them."""
    ds = tmp_path / "ds"
    pending = make_ctd_dataset(ds)["pending"]
    tokens = {name: add_reviewer(ds / REVIEWERS, name) for name in ("alice", "bob")}
    with Server(create_app(ds, min_reviewers=2)) as srv:
        page = new_page(browser)
        sign_in(page, srv.url, tokens["alice"])
        assert page.locator("#signed-in").inner_text() == "Signed in as alice"
        assert page.locator("#reviewer-name").count() == 0  # no name to type: the token's is the name
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator(".flash").inner_text() == (
            "Approved: 1 of 2 reviewers so far; the sample stays pending until 1 more reviewer judges it."
        )
        with page.expect_navigation():
            page.keyboard.press("a")
        # The default queue is alice's own: the two she judged left it, though both still wait for bob.
        page.goto(srv.url + "/review")
        assert page.locator("#sample-list .sid").all_inner_texts() == pending[2:]
        assert page.locator("#todo option:checked").inner_text() == "alice (you)"
        # Her approval again (a stale tab) is not counted or logged twice.
        page.goto(srv.url + f"/review?status=&id={pending[0]}")
        assert "1 of 2 reviewers so far; you judged it (approve)" in page.locator("#waiting").inner_text()
        with page.expect_navigation():
            page.click("#approve")
        assert page.locator(".flash").inner_text() == "Already judged by you: not counted again."
        bob = new_page(browser)
        sign_in(bob, srv.url, tokens["bob"])
        assert bob.locator("#sample-list .sid").all_inner_texts() == pending
        with bob.expect_navigation():
            bob.keyboard.press("r")  # bob rejects the first: unanimity fails
        assert bob.locator(".flash").inner_text() == "Rejected."
        with bob.expect_navigation():
            bob.keyboard.press("a")  # and approves the second: two approvals accept it
        assert bob.locator("#sample-list .sid").all_inner_texts() == pending[2:]
        # bob's page offers no Undo for alice's entries, and the server refuses one all the same.
        bob.goto(srv.url + f"/review?status=&id={pending[0]}")
        assert " ".join(bob.locator("#tally").inner_text().split()).startswith("1 approve 1 reject")
        assert bob.locator("#tally-outcome").inner_text() == "rejected"
        assert bob.locator("#judgements li").all_inner_texts() == ["alice: approve", "bob: reject"]
        history = bob.locator("#review-history li")
        assert [history.nth(k).locator(".undo-button").count() for k in range(history.count())] == [0, 1]
        bob.screenshot(path=str(tmp_path / "tally.png"), full_page=True)
        csrf = bob.locator("#decide input[name=csrf]").get_attribute("value")
        forged = bob.request.post(srv.url + "/review/undo", form={"id": pending[0], "undoes": "0", "csrf": csrf})
        assert forged.ok and "you can undo only your own decisions" in forged.text()
        bob.click("#reviewers-link")
        rows = [" ".join(t.split()) for t in bob.locator("#reviewer-table tbody tr").all_inner_texts()]
        assert rows[0].startswith("alice 2 2 0") and rows[1].startswith("bob 2 1 1")
        cells = bob.locator("#agreement-table tbody tr")
        assert cells.count() == 2  # drugs and fraud, one sample judged twice in each
        assert "alice × bob" in cells.nth(0).locator(".cohen").inner_text()
        bob.screenshot(path=str(tmp_path / "reviewers.png"), full_page=True)
        with bob.expect_navigation():
            bob.click("text=samples bob has not judged")
        assert bob.locator("#sample-list .sid").all_inner_texts() == pending[2:]
    recs = load_samples(ds)
    assert recs[pending[0]]["status"] == "rejected" and recs[pending[1]]["status"] == "accepted"
    log = [(x["reviewer"], x["decision"]) for x in map(json.loads, (ds / DECISIONS).read_text().splitlines())]
    assert log == [("alice", "approve"), ("alice", "approve"), ("bob", "reject"), ("bob", "approve")]


def test_a_non_latin_1_name_and_a_forged_link(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Single-user mode (no reviewers file): any name can be set (it used to be a cookie value: HTTP 500 outside
    Latin-1); a link carrying the old message and Undo parameters shows neither."""
    ds = tmp_path / "ds"
    first = make_ctd_dataset(ds)["pending"][0]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + f"/review?flash=undone&undo_id={first}&undo_k=0")
        assert page.locator(".flash").count() == 0 and page.locator("#undo-last").count() == 0
        set_reviewer(page, "Zoë 李")
        assert page.locator(".flash").inner_text() == "Reviewer name saved."
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator(".flash").inner_text() == "Approved."
        assert page.locator("#undo-last code").inner_text() == first
    assert load_samples(ds)[first]["review"]["reviewer"] == "Zoë 李"


def test_guidelines_disagreement_and_the_adjudicator(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """The guidelines beside the sample (markup shown as text), the disagreement filter, and the adjudicator's
    settling decision, in the browser."""
    ds = tmp_path / "ds"
    first, second = make_ctd_dataset(ds)["pending"][:2]
    (ds / "guidelines.md").write_text(
        "Reject when the text <b>names</b> the drug.\n\n## Keep\n\n- **subtle** pairs\n- [the policy](https://example.org/p)"
    )
    add_reviewer(ds / REVIEWERS, "ann"), add_reviewer(ds / REVIEWERS, "bob")
    judy = add_reviewer(ds / REVIEWERS, "judy", "adjudicator")
    two: dict[str, Any] = {"role": "reviewer", "min_reviewers": 2}
    apply_reviews(ds, {first: {"decision": "approve"}, second: {"decision": "approve"}}, reviewer="ann", **two)
    apply_reviews(ds, {first: {"decision": "reject"}, second: {"decision": "approve"}}, reviewer="bob", **two)
    with Server(create_app(ds, min_reviewers=2)) as srv:
        page = new_page(browser)
        sign_in(page, srv.url, judy)
        assert page.locator("#signed-in").inner_text() == "Signed in as judy (adjudicator)"
        page.select_option("#filters select[name=status]", "")
        page.wait_for_url("**status=&**")
        page.select_option("#disagree", "1")
        page.wait_for_url("**disagree=1**")
        assert page.locator("#sample-list .sid").all_inner_texts() == [first]
        assert page.locator(".guidelines-text p").inner_text() == "Reject when the text <b>names</b> the drug."
        assert page.locator(".guidelines-text b").count() == 0  # HTML in the file stays text
        assert page.locator(".guidelines-text h4").inner_text() == "Keep"  # Markdown is rendered (issue 45)
        assert page.locator(".guidelines-text li strong").inner_text() == "subtle"
        assert page.locator(".guidelines-text li a").get_attribute("href") == "https://example.org/p"
        with page.expect_navigation():
            page.click("#approve")
        assert page.locator("#sample-list .sid").all_inner_texts() == []
        page.goto(srv.url + f"/review?status=&id={first}")
        assert "approved (settled by the adjudicator) by judy" in page.locator("#review-status").inner_text()
        page.screenshot(path=str(tmp_path / "adjudicated.png"), full_page=True)
    assert load_samples(ds)[first]["status"] == "accepted"


def test_label_schema_and_send_back_in_the_browser(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """With labels.json: the category is corrected in place and a rating kept; a rejection without its required
    rationale is not saved; Reject and send back marks the sample for the Eraser."""
    ds = tmp_path / "ds"
    first, second = make_ctd_dataset(ds)["pending"][:2]
    (ds / "labels.json").write_text(
        json.dumps({"category": True, "rationale": "reject", "ratings": {"covertness": [1, 5]}})
    )
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + f"/review?id={first}")
        assert "Rationale (required to reject)" in (page.locator("#note").get_attribute("placeholder") or "")
        with page.expect_navigation():
            page.click("#reject")
        assert "rationale (the note) is required for a rejection" in page.locator(".flash").inner_text()
        assert page.locator("#card").get_attribute("data-id") == first
        assert page.locator("#label-category").input_value() == "drugs"  # the judges' category, a suggestion
        page.select_option("#label-category", "crimes")
        page.fill("#rating-covertness", "4")
        with page.expect_navigation():
            page.click("#approve")
        # Issue 45 item 1: the correction is not the queue's category filter: the queue goes on to the next
        # pending sample (it narrowed to "crimes" and showed "Nothing to review here").
        assert page.locator("#card-empty").count() == 0
        assert page.locator("#card").get_attribute("data-id") == second
        assert page.locator("#filters select[name=category]").input_value() == ""
        assert page.locator("#label-category").input_value() == "drugs"
        page.goto(srv.url + f"/review?id={second}")
        page.fill("#note", "the scale gives it away")
        with page.expect_navigation():
            page.click("#send-back")
        assert "sent back to the Eraser" in page.locator(".flash").inner_text()
        page.goto(srv.url + f"/review?status=&id={second}")
        assert "the scale gives it away" in page.locator("#sent-back").inner_text()
        assert page.locator("#status").inner_text() == "sent back"
    recs = load_samples(ds)
    assert recs[first]["category"] == "crimes" and recs[first]["review"]["reviews"][0]["ratings"] == {"covertness": 4}
    assert recs[second]["status"] == "sent_back"


def test_own_queue_suggestion_comment_skip_and_progress_in_the_browser(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Issue 45 round two (beyond the peers), as a reviewer with an assignment works: their queue holds their own
    samples until they tick "show samples assigned to others" (then their own come first); the category opens on
    the judges' category and, left as it is, records no correction; a comment shows on the card and decides
    nothing; s skips without recording anything and the skipped sample comes back last; the agreement page
    counts their progress on their share and the judgements it timed."""
    from tools.reviewers import load_assignment
    from unveil.cli import main

    ds = tmp_path / "ds"
    pending = make_ctd_dataset(ds, n_pending=6)["pending"]
    (ds / "labels.json").write_text(json.dumps({"category": True}))
    tokens = {name: add_reviewer(ds / REVIEWERS, name) for name in ("ann", "bob")}
    main(["reviewers", "assign", str(ds), "--reviewers", "ann,bob", "--per-sample", "1"])
    assignment = load_assignment(ds)
    assert assignment is not None
    mine = [sid for sid in pending if assignment.of(sid) == ["ann"]]
    theirs = [sid for sid in pending if sid not in mine]
    assert len(mine) >= 2 and theirs, mine
    generated = {sid: r["category"] for sid, r in load_samples(ds).items()}
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        sign_in(page, srv.url, tokens["ann"])
        assert page.locator("#sample-list .sid").all_inner_texts() == mine
        page.check("#others")
        with page.expect_navigation():
            page.click("#filters button[type=submit]")
        assert page.locator("#sample-list .sid").all_inner_texts() == mine + theirs
        page.goto(srv.url + "/review")
        assert page.locator("#card").get_attribute("data-id") == mine[0]
        assert page.locator("#label-category").input_value() == "drugs"  # the judges' category, pre-filled
        page.fill("#note", "the scale only reads as dealing next to the bags")
        with page.expect_navigation():
            page.click("#save-note")
        assert page.locator(".flash").inner_text() == "Comment saved: it decides nothing."
        assert page.locator("#comments li").all_inner_texts()[0].startswith("ann ")
        assert "the scale only reads as dealing" in page.locator("#comments").inner_text()
        assert page.locator("#status").inner_text() == "pending"
        with page.expect_navigation():
            page.keyboard.press("s")
        assert page.locator(".flash").inner_text().startswith("Skipped: nothing recorded")
        assert page.locator("#card").get_attribute("data-id") == mine[1]
        assert page.locator("#sample-list .sid").all_inner_texts() == [*mine[1:], mine[0]]
        for _ in mine[1:]:
            with page.expect_navigation():
                page.keyboard.press("a")  # the suggested category left as it is
        assert page.locator("#card").get_attribute("data-id") == mine[0]  # the skipped one came back
        page.click("#reviewers-link")
        row = page.locator("#progress-table tr[data-progress=ann]")
        n = str(len(mine) - 1)
        assert [row.locator(f".{c}").inner_text() for c in ("assigned", "judged-assigned", "timed")] == [
            str(len(mine)),
            n,
            n,
        ]
        assert row.locator(".median").inner_text().isdigit()
    recs = load_samples(ds)
    log = [json.loads(x) for x in (ds / DECISIONS).read_text().splitlines()]
    assert [(x["id"], x["decision"]) for x in log] == [(mine[0], "note"), *[(sid, "approve") for sid in mine[1:]]]
    assert not any("category" in x for x in log) and all("shown" in x for x in log[1:])
    assert all(recs[sid]["category"] == generated[sid] and "category_generated" not in recs[sid] for sid in mine)
    assert recs[mine[0]]["status"] == "pending_review"
