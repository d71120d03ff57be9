"""The web app's pages of the CI workflow: the raw model calls on a detection's page (escaped, keys redacted) and
two runs side by side (`unveil ui A --compare B`), in-process and in a real headless browser."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unveil.test_ui import Server, browser, new_page  # noqa: F401 - `browser` is the module's chromium fixture
from tests.unveil.test_workflow_cli import detect_args, write_pairs
from tests.unveil.test_workflow_cli import main as cli_main
from unveil.ui import create_app

MARKUP = '<b id="pwned">bold</b>'


def main(argv: list[str]) -> int:
    """The CLI in a thread of its own: the browser's Playwright holds an event loop in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(cli_main, argv).result()


@pytest.fixture
def two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Two detection runs of the same three labelled pairs with the scripted model: the vanilla detector (OVERT
    texts toxic) and TAG; the calls of both are in one response cache, the app's default (`UNVEIL_CACHE`)."""
    cache = tmp_path / "cache.sqlite"
    monkeypatch.setenv("UNVEIL_CACHE", str(cache))
    monkeypatch.setenv("UNVEIL_IMAGE_STORE", str(tmp_path / "store"))
    data = write_pairs(tmp_path / "pairs.jsonl", [f"OVERT {MARKUP}", "a walk", "OVERT again"], labels=[1, 0, 1])
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(detect_args(data, a, cache=str(cache))) == 0
    tag = detect_args(data, b, cache=str(cache))
    tag[tag.index("vanilla")] = "tag"
    assert main([*tag, "--l-max", "2"]) == 0
    return a, b


def test_a_detection_page_shows_its_calls_escaped(two_runs: tuple[Path, Path], monkeypatch: Any) -> None:
    a, _ = two_runs
    client = TestClient(create_app(a), base_url="http://127.0.0.1")
    html = client.get("/detections/view", params={"id": "s0"}).text
    assert 'id="call-1"' in html and "vanilla_detector" in html
    assert MARKUP not in html and "&lt;b id=&#34;pwned&#34;&gt;" in html  # the sample's text, as text
    monkeypatch.setenv("UNVEIL_CACHE", "off")
    html = TestClient(create_app(a), base_url="http://127.0.0.1").get("/detections/view", params={"id": "s0"}).text
    assert 'id="calls-note"' in html and 'id="call-1"' not in html


def _rows(html: str, table: str) -> list[str]:
    """The rows of one table's body of a page (the compare page writes each row's cells after its `<tr class=...>`)."""
    body = html.split(f'id="{table}"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return body.split("<tr")[1:]


def test_compare_page_in_the_process(two_runs: tuple[Path, Path]) -> None:
    """What the browser test below checks on the compare page, through the app in this process: the counts, the
    metrics, every shared sample, and `only` leaving the samples whose verdicts differ."""
    a, b = two_runs
    client = TestClient(create_app(a, compare_with=b), base_url="http://127.0.0.1")
    html = client.get("/compare").text
    assert "3 shared samples" in html.split('id="compare-counts"', 1)[1].split("</p>", 1)[0]
    assert "overall" in html.split('id="compare-metrics"', 1)[1].split("</table>", 1)[0]
    rows = _rows(html, "compare-samples")
    differ = sum(row.startswith(' class="differ"') for row in rows)
    assert len(rows) == 3
    only = _rows(client.get("/compare", params={"only": "1"}).text, "compare-samples")
    assert len(only) == max(differ, 1)  # the samples whose verdicts differ, or the one row saying there is none
    assert all(row.startswith(' class="differ"') for row in only) if differ else "No sample to show" in only[0]


@pytest.mark.slow(
    reason="its subject is the web app's pages in chromium (a server and a browser: about 3 s of make test-fast); "
    "the fast loop checks the same pages in the process (test_compare_page_in_the_process, "
    "test_a_detection_page_shows_its_calls_escaped)"
)
def test_compare_page_in_a_browser(browser: Any, two_runs: tuple[Path, Path]) -> None:  # noqa: F811
    a, b = two_runs
    app = create_app(a, compare_with=b)
    with Server(app) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/compare")
        assert "3 shared samples" in page.locator("#compare-counts").inner_text()
        assert page.locator("#compare-samples tbody tr").count() == 3
        assert "overall" in page.locator("#compare-metrics").inner_text()
        differ = page.locator("#compare-samples tbody tr.differ").count()
        page.check("input[name=only]")
        with page.expect_navigation():
            page.click("#compare-apply")
        assert page.locator("#compare-samples tbody tr").count() == max(differ, 1)
        page.goto(srv.url + "/detections/view?id=s0")
        page.click("#call-1 summary")
        # Shown as text: the sample's markup, as the model got it (inside <data> any tag is escaped, `<\\b ...`).
        assert 'id="pwned">bold' in page.locator("#call-1").inner_text()
        assert page.locator("#pwned").count() == 0  # never as markup


def test_calls_page_of_an_ipr_result(tmp_path: Path, monkeypatch: Any) -> None:
    import json

    from tests.evaluation.test_eval_ipr import SCRIPT, PaintGenerator
    from tools.t2i.registry import register_generator, unregister_generator

    cache, store = tmp_path / "cache.sqlite", tmp_path / "store"
    monkeypatch.setenv("UNVEIL_CACHE", str(cache))
    spec = register_generator("paint-calls", PaintGenerator(store))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "p1", "prompt": "a bloody fight in an alley"}) + "\n")
    out = tmp_path / "ipr.jsonl"
    argv = [
        "refine",
        "--input",
        str(prompts),
        "--output",
        str(out),
        "--generator",
        spec,
        "--refiner",
        f"scripted:{SCRIPT}",
    ]
    try:
        assert main([*argv, "--t-max", "1", "--image-store", str(store), "--no-progress"]) == 0
    finally:
        unregister_generator(spec)
    client = TestClient(create_app(out, image_store=store), base_url="http://127.0.0.1")
    assert 'href="/calls?id=p1"' in client.get("/ipr").text
    html = client.get("/calls", params={"id": "p1"}).text
    assert 'id="call-1"' in html and "refiner" in html and "a bloody fight in an alley" in html
    assert client.get("/calls", params={"id": "nope"}).status_code == 404


def _flipped(src: Path, dst: Path, sample: str) -> Path:
    """A copy of a results file whose one sample has the other verdict: a second run that differs there."""
    import json

    recs = [json.loads(line) for line in src.read_text().splitlines()]
    for rec in recs:
        if rec["id"] == sample:
            rec["toxic"] = not rec["toxic"]
    dst.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return dst


def test_compare_page_names_the_runs_shows_cache_hits_and_marks_differing_rows(two_runs: tuple[Path, Path]) -> None:
    a, _ = two_runs
    b = _flipped(a, a.with_name("flipped.jsonl"), "s1")
    html = TestClient(create_app(a, compare_with=b), base_url="http://127.0.0.1").get("/compare").text
    runs = html.split('id="compare-runs"', 1)[1].split("</table>", 1)[0]
    assert "vanilla [scripted:" in runs and str(a) in runs and str(b) in runs  # what made each run, and its file
    assert "Cache hits" in runs
    metrics = html.split('id="compare-metrics"', 1)[1].split("</thead>", 1)[0]
    assert "Accuracy A" in metrics and "F2 A" in metrics and "Δ F2" in metrics and "F2.0" not in metrics
    rows = _rows(html, "compare-samples")
    marked = [r for r in rows if r.startswith(' class="differ"')]
    assert len(marked) == 1 and "≠" in marked[0] and "s1" in marked[0]


@pytest.mark.slow(reason="its subject is the compare page as chromium lays it out (a server and a browser)")
def test_compare_page_headers_are_whole_and_differing_rows_stand_out(browser: Any, two_runs: tuple[Path, Path]) -> None:  # noqa: F811
    a, _ = two_runs
    b = _flipped(a, a.with_name("flipped.jsonl"), "s1")
    with Server(create_app(a, compare_with=b)) as srv:
        page = new_page(browser)
        page.set_viewport_size({"width": 900, "height": 800})
        page.goto(srv.url + "/compare")
        cut = page.eval_on_selector_all(
            ".compare th", "els => els.filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent)"
        )
        assert cut == []
        wrapped = page.eval_on_selector_all(  # a header on two lines: its text's line boxes
            ".compare th",
            "els => els.filter(e => { const r = document.createRange(); r.selectNodeContents(e); "
            "return r.getClientRects().length > 1; }).map(e => e.textContent)",
        )
        assert wrapped == []
        assert page.eval_on_selector(".compare", "e => e.scrollWidth <= e.clientWidth")  # nothing runs off the page
        same, differ = (
            page.eval_on_selector(f"#compare-samples tr.{c} td", "e => getComputedStyle(e).backgroundColor")
            for c in ("same", "differ")
        )
        assert same != differ
