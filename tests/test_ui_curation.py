"""`unveil ui` curator features in Debian's headless chromium (Playwright), as tests/test_ui.py: every run file
fully shown (evaluate-ipr trajectories, the detection input, the zoomable TAG picture), undo, search and bulk
decisions, duplicates side by side, several reviewers, and review in Studio and in the web app agreeing.
Screenshots go to the test's temporary folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_ui import Server, browser, natural_widths, new_page  # noqa: F401 - browser is a fixture
from tests.ui_data import INPUT_TEXTS, make_detection_results, make_eval_ipr_results
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
        assert reasons == ["refiner: gore: blood and a fight", "refiner: a sport scene, nothing graphic",
                           "refiner: already harmless"]
        assert page.locator("#filters select[name=stop] option").all_inner_texts() == ["any", "keep", "t_max"]
        page.select_option("#filters select[name=stop]", "t_max")
        page.wait_for_url("**stop=t_max**")
        assert page.locator("article h1").all_inner_texts() == ["i2p-9"]
        assert words(page.locator(".run-stop").all_text_contents()) == ["t_max"] and page.locator(".step.kept").count() == 0


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
