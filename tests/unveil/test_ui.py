"""`unveil ui` in a real headless browser (Debian's chromium through Playwright): the CTD review queue by keyboard
and by clicks, two reviewers on one sample, detection and IPR pages, images from the store only, markup shown as
text, cross-site and token protection. Screenshots of each page type go to the test's temporary folder."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.ctd_dataset import DECISIONS, SAMPLES, load_samples
from runner.ctd_reviews import apply_reviews
from tests.ui_data import (
    MARKUP_CAPTION,
    MARKUP_REASON,
    make_ctd_dataset,
    make_detection_results,
    make_eval_ipr_results,
    make_ipr_results,
)
from unveil.ui import create_app

pytestmark = pytest.mark.slow  # every test starts a server (CI runs them all)

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for the module."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        # Setup installs it as root or through password-less sudo; a user who can do neither was told so by setup.
        pytest.skip("Debian's chromium is missing: ./scripts/setup.sh --dev installs it (as root or with sudo)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_page(browser: Any, reviewer: str | None = None) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(20_000)
    return page


def natural_widths(page: Any, selector: str) -> list[int]:
    """naturalWidth of every matching image once it finished loading (0 = broken)."""
    page.wait_for_function(f"Array.from(document.querySelectorAll({json.dumps(selector)})).every(i => i.complete)")
    return page.eval_on_selector_all(selector, "els => els.map(e => e.naturalWidth)")


def set_reviewer(page: Any, name: str) -> None:
    page.fill("#reviewer-name", name)
    with page.expect_navigation():
        page.click(".who button")


def records(root: Path) -> dict[str, dict[str, Any]]:
    return load_samples(root)


def view_ids(root: Path, name: str, expected: Any, timeout: float = 15.0) -> list[str]:
    """The ids of a view file (dataset.jsonl, review_queue.jsonl) once `expected(ids)` holds: the web app
    rewrites the views in the background after a decision."""
    deadline = time.time() + timeout
    while True:
        ids = [json.loads(x)["id"] for x in (root / name).read_text().splitlines()]
        if expected(ids) or time.time() > deadline:
            return ids
        time.sleep(0.1)


def test_review_queue_by_keyboard_and_clicks(browser: Any, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    first, second, third, fourth = data["pending"]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/")
        set_reviewer(page, "alice")
        assert page.locator("#card").get_attribute("data-id") == first
        assert "0 of 4 reviewed" in " ".join(page.locator(".progress-text").inner_text().split())
        # The image loads from the store; the caption with markup is shown as text, and so is a judge's reason.
        assert natural_widths(page, "#sample-img")[0] > 0
        assert page.locator("#sample-text").inner_text() == MARKUP_CAPTION
        assert page.locator("#sample-text b, #sample-text img").count() == 0
        assert (
            page.locator("td.reason", has_text="<script>").count() == 1 and page.locator("article script").count() == 0
        )
        assert page.title() != "pwned"
        # Every judge's vote with its model, for both rounds of a two-round sample.
        page.screenshot(path=str(tmp_path / "review.png"), full_page=True)

        # Arrows move through the queue; 'a' approves the card shown, and the next one appears.
        page.keyboard.press("ArrowRight")
        page.wait_for_url(re.compile(f"id={second}"))
        assert page.locator("table.votes caption").all_inner_texts() == ["Round 1", "Round 2"]
        assert page.locator("table.votes code", has_text="scripted:").count() == 12
        page.keyboard.press("ArrowLeft")
        page.wait_for_url(re.compile(f"id={first}"))
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator("#card").get_attribute("data-id") == second
        # 'n' focuses the note; letters typed there are text, not shortcuts; Esc leaves it, 'r' rejects.
        page.keyboard.press("n")
        page.keyboard.type("too literal, a reviewer sees it")
        page.keyboard.press("Escape")
        with page.expect_navigation():
            page.keyboard.press("r")
        assert page.locator("#card").get_attribute("data-id") == third
        # Clicks work the same way.
        with page.expect_navigation():
            page.click("#approve")
        assert "3 of 4 reviewed" in " ".join(page.locator(".progress-text").inner_text().split())

        recs = records(ds)
        assert recs[first]["status"] == "accepted" and recs[first]["review"]["reviewer"] == "alice"
        assert re.match(r"\d{4}-\d\d-\d\dT", recs[first]["review"]["time"])
        assert (
            recs[second]["status"] == "rejected" and recs[second]["review"]["note"] == "too literal, a reviewer sees it"
        )
        assert recs[third]["status"] == "accepted" and recs[fourth]["status"] == "pending_review"
        # Same semantics as `unveil review --decisions`: the views follow, and the decisions log replays as a file.
        dataset_ids = view_ids(ds, "dataset.jsonl", lambda ids: first in ids and third in ids)
        assert first in dataset_ids and third in dataset_ids and second not in dataset_ids
        assert view_ids(ds, "review_queue.jsonl", lambda ids: ids == [fourth]) == [fourth]
        log = [json.loads(x) for x in (ds / DECISIONS).read_text().splitlines()]
        assert [(d["id"], d["decision"], d["reviewer"]) for d in log] == [
            (first, "approve", "alice"),
            (second, "reject", "alice"),
            (third, "approve", "alice"),
        ]

        # Filters: by status and by how many blind judges found the risk.
        page.goto(srv.url + "/review?status=accepted&category=&blind=")
        listed = page.locator("#sample-list .sid").all_inner_texts()
        assert first in listed and third in listed and second not in listed
        page.goto(srv.url + "/review?status=&category=fraud&blind=")
        assert page.locator("#sample-list .sid").all_inner_texts() == [first, fourth]
        # A note without a decision keeps the sample pending and joins its history.
        page.goto(f"{srv.url}/review?id={fourth}")
        page.fill("#note", "check the scale's brand")
        with page.expect_navigation():
            page.click("#save-note")
        assert "check the scale's brand" in page.locator("#review-history").inner_text()
        assert records(ds)[fourth]["status"] == "pending_review"
        page.goto(srv.url + "/review?status=&category=&blind=3")
        assert page.locator("#sample-list .sid").all_inner_texts() == [third]
        # Export writes the Parquet file of the usable samples.
        page.goto(srv.url + "/review")
        with page.expect_navigation():
            page.click("#export")
        assert (ds / "export" / "data.parquet").is_file()
        # The summary names the export's folder and what it holds, not only the Parquet file (issue 45).
        assert page.locator(".flash").inner_text() == (
            f"Export written to {ds / 'export'}/ (data.parquet, data.jsonl, data.csv and the dataset card README.md)."
        )
        assert f"Written to {ds / 'export'}/" in page.locator(".export").inner_text()


def test_a_second_reviewers_decision_is_not_lost(browser: Any, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][1]
    with Server(create_app(ds)) as srv:
        alice, bob = new_page(browser), new_page(browser)
        for page, name in ((alice, "alice"), (bob, "bob")):
            page.goto(f"{srv.url}/review?id={sample}")
            set_reviewer(page, name)
            assert page.locator("#card").get_attribute("data-id") == sample
        with alice.expect_navigation():
            alice.click("#approve")
        bob.fill("#note", "I think it is too obvious")
        with bob.expect_navigation():
            bob.click("#reject")  # bob's page still shows the sample as pending
        assert "approved by alice" in bob.locator("#conflict").inner_text()
        bob.screenshot(path=str(tmp_path / "review-conflict.png"))
        assert "bob" in bob.locator("#review-history").inner_text()
        rec = records(ds)[sample]
        assert rec["status"] == "accepted" and rec["review"]["reviewer"] == "alice"
        kept = [h for h in rec["review_history"] if h["reviewer"] == "bob"]
        assert kept and kept[0]["decision"] == "reject" and kept[0]["applied"] is False
        assert kept[0]["note"] == "I think it is too obvious"


def test_concurrent_reviewers_and_a_running_generate_lose_nothing(tmp_path: Path) -> None:
    """The folder lock serialises reviewers: of six reviewers deciding one sample at once, one decision applies
    and five are kept as conflicts; a writer holding samples.jsonl open (as `unveil generate` does) keeps appending
    to the same file after a review."""
    from tools.jsonl_files import JsonlAppender

    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][0]
    appender = JsonlAppender(ds / SAMPLES)  # opened before the reviews, like a generate run in progress
    barrier = threading.Barrier(6)

    def review(k: int) -> None:
        barrier.wait()
        apply_reviews(ds, {sample: {"decision": "approve" if k % 2 else "reject", "note": f"r{k}"}}, reviewer=f"r{k}")

    threads = [threading.Thread(target=review, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import asyncio

    # In a thread of its own: the module's Playwright session keeps an event loop running in this one.
    late = threading.Thread(
        target=asyncio.run, args=(appender.append({"id": "drugs-late", "status": "pending_review", "text": "late"}),)
    )
    late.start()
    late.join()
    appender.close()
    recs = load_samples(ds)
    history = recs[sample]["review_history"]
    assert len(history) == 6 and sum(1 for h in history if h.get("applied") is False) == 5
    applied = next(h for h in history if h.get("applied") is not False)
    assert recs[sample]["review"]["reviewer"] == applied["reviewer"]
    assert "drugs-late" in recs


def test_images_only_from_the_store(browser: Any, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    data = make_ctd_dataset(ds)
    import hashlib

    outside_sha = hashlib.sha256(data["outside"].read_bytes()).hexdigest()
    stored = next((ds / "images").rglob("*.png"))
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(f"{srv.url}/review?status=&id=drugs-outside")
        assert "not in the dataset's image store" in page.locator("#image-refused").inner_text()
        assert page.locator("#sample-img").count() == 0
        ok = page.request.get(f"{srv.url}/images/{stored.stem}")
        assert ok.status == 200 and ok.headers["content-type"] == "image/png"
        for bad in (outside_sha, "..%2F..%2Foutside.png", "../outside.png", stored.stem[:-1] + "g", "%2Fetc%2Fpasswd"):
            assert page.request.get(f"{srv.url}/images/{bad}").status == 404, bad
        # A file in the store whose bytes no longer match its name is refused too.
        tampered = stored  # served (and hash-checked) above
        tampered.write_bytes(data["outside"].read_bytes())
        assert page.request.get(f"{srv.url}/images/{tampered.stem}").status == 404


def test_cross_site_posts_are_refused(browser: Any, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    sample = make_ctd_dataset(ds)["pending"][0]
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/review")
        csrf = page.locator("#decide input[name=csrf]").get_attribute("value")
        form = {"id": sample, "decision": "approve"}
        assert page.request.post(srv.url + "/review/decide", form=form, max_redirects=0).status == 403  # no token
        evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
        assert (
            page.request.post(
                srv.url + "/review/decide", form={**form, "csrf": csrf}, headers=evil, max_redirects=0
            ).status
            == 403
        )
        # A page served from another origin posting a form at the app gets nothing done.
        other = Server(create_app(ds))
        with other:
            page.goto(other.url.replace("127.0.0.1", "localhost") + "/review")
            page.set_content(
                f'<form id=f method=post action="{srv.url}/review/decide">'
                f'<input name=id value="{sample}"><input name=decision value=approve></form>'
            )
            page.eval_on_selector("#f", "f => f.submit()")
            page.wait_for_load_state()
        assert records(ds)[sample]["status"] == "pending_review"
        # Loopback binds answer loopback Host names only (DNS rebinding).
        assert page.request.get(srv.url + "/review", headers={"Host": "evil.example"}).status == 400
        ok = page.request.post(srv.url + "/review/decide", form={**form, "csrf": csrf}, max_redirects=0)
        assert ok.status == 303 and records(ds)[sample]["status"] == "accepted"


def test_detection_results_page(browser: Any, tmp_path: Path) -> None:
    results = tmp_path / "detect.jsonl"
    make_detection_results(results, tmp_path / "store")
    with Server(create_app(results)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/")
        assert page.locator("#results tbody tr").count() == 4
        page.select_option("select[name=verdict]", "toxic")
        page.wait_for_url(re.compile("verdict=toxic"))
        assert page.locator("#results tbody tr").count() == 2
        page.goto(srv.url + "/detections?verdict=&bin=high")
        assert sorted(page.locator("#results tbody a").all_inner_texts()) == ["pair-2"]
        page.goto(srv.url + "/detections")
        page.screenshot(path=str(tmp_path / "detections.png"), full_page=True)
        with page.expect_navigation():
            page.click("text=pair-0")
        assert all(w > 0 for w in natural_widths(page, "#sample-img, #tag-img"))
        # the zoom frame takes most of the window's height (it was a 270 px strip)
        assert page.eval_on_selector("#tag-frame", "e => e.getBoundingClientRect().height") >= 600
        assert page.locator("#verdict").inner_text() == "toxic"
        # The toxic path is highlighted in both trees: flour <- white powder ... cocaine, drugs slang <- the good stuff.
        hot = page.locator(".tree li.hot .concept").all_inner_texts()
        assert hot == ["white powder", "flour", "cocaine", "the good stuff", "drugs slang"]
        assert page.locator("#usage tbody tr").count() == 4 and "pair_judge" in page.locator("#usage").inner_text()
        page.screenshot(path=str(tmp_path / "detection.png"), full_page=True)
        page.goto(srv.url + "/detections/view?id=pair-1")
        assert page.locator("#explanation").inner_text() == MARKUP_REASON and page.title() != "pwned"


def test_a_failed_detection_keeps_its_input_and_a_description_only_sample_reads_calmly(
    browser: Any, tmp_path: Path
) -> None:
    # As a user meets it: `unveil detect` on a batch with a description-only pair and a pair whose image is missing.
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"id": "described", "text": "Stay hydrated.", "image_description": "a bottle of water"},
        {"id": "broken", "text": "Look at this.", "image": "missing.png"},
    ]
    pairs.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"vanilla_detector": [{"when": "", "then": {"toxic": False, "reason": "fine"}}]}))
    out = tmp_path / "out.jsonl"
    argv = ["detect", "--method", "vanilla", "--input", str(pairs), "--output", str(out), "--no-progress"]
    argv += ["--model", f"scripted:{script}", "--image-store", str(tmp_path / "store"), "--cache", "off"]
    proc = subprocess.run([sys.executable, "-m", "unveil.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-3000:]  # one sample failed
    recs = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert recs["broken"]["status"] == "failed" and "missing.png" in recs["broken"]["error"]
    assert (recs["broken"]["text"], recs["broken"]["image"]) == ("Look at this.", "missing.png")
    with Server(create_app(out)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/detections/view?id=broken")
        head = page.locator(".card-head").inner_text()
        assert "failed" in head and "MTC" not in head  # no label without a number
        assert page.locator("#input-text").inner_text() == "Look at this."
        assert page.locator("#input-image").inner_text() == "missing.png"
        assert "Not stored" in page.locator("#no-image").inner_text()
        red = page.evaluate(
            "() => { const d = document.createElement('span'); d.style.color = 'var(--bad)'; document.body.append(d);"
            " const c = getComputedStyle(d).color; d.remove(); return c; }"
        )
        assert red.startswith("rgb") and page.eval_on_selector("#no-image", "e => getComputedStyle(e).color") != red
        page.goto(srv.url + "/detections/view?id=described")
        assert page.locator("#no-image").inner_text() == "Description only: this sample has no image."
        assert "calm" in (page.locator("#no-image").get_attribute("class") or "")
        assert page.locator("#input-description").inner_text() == "a bottle of water"
        page.screenshot(path=str(tmp_path / "described.png"), full_page=True)


def test_a_long_sample_id_neither_widens_nor_breaks_the_review_list(browser: Any, tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    make_ctd_dataset(ds)
    samples = ds / SAMPLES
    first = json.loads(samples.read_text(encoding="utf-8").splitlines()[0])
    long_id = "drugs-" + "x" * 180
    with samples.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({**first, "id": long_id}) + "\n")
    with Server(create_app(ds)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/review?id=" + long_id)
        side = page.eval_on_selector(".side", "e => e.getBoundingClientRect().width")
        assert side <= 300  # the column keeps its width
        row = page.locator("#sample-list a", has_text="drugs-xxx").first
        widths = row.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert widths[0] <= widths[1] + 1  # nothing spills out of the row
        assert page.eval_on_selector("#card h1", "e => e.scrollWidth <= e.clientWidth + 1")  # the page wraps it


def test_ipr_results_page(browser: Any, tmp_path: Path) -> None:
    results = tmp_path / "refine.jsonl"
    make_ipr_results(results, tmp_path / "store")
    with Server(create_app(results)) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/")
        widths = natural_widths(page, ".step-img")
        assert len(widths) == 4 and all(w > 0 for w in widths)
        first = page.locator("#prompt-1")
        assert first.locator(".step-prompt").all_inner_texts()[1] == "two boxers sparring in a gym, photorealistic"
        assert first.locator(".step-head .chip").all_inner_texts() == ["refine", "refine", "keep"]
        assert "q16" in first.locator("table.scores").first.inner_text()
        # Flags read yes/no, not Python's True/False (issue 45).
        rows = first.locator("table.scores").first.locator("tr").all_inner_texts()
        flags = {r.split("\t")[0]: r.split("\t")[-1] for r in rows}
        assert (flags["q16_flag"], flags["nudenet_flag"], flags["inappropriate"]) == ("yes", "no", "yes")
        assert "True" not in first.inner_text() and "False" not in first.inner_text()
        assert first.locator(".step.kept").count() == 1
        page.screenshot(path=str(tmp_path / "ipr.png"), full_page=True)


def test_evaluate_ipr_run_files(browser: Any, tmp_path: Path) -> None:
    """`unveil evaluate ipr` records name images by id only: they come from the run's store (--image-store)."""
    store = tmp_path / "store"
    files = make_eval_ipr_results(tmp_path / "runs", store)
    page = new_page(browser)
    with Server(create_app(files["ipr"], image_store=store)) as srv:
        page.goto(srv.url + "/")
        heads = [" ".join(t.split()) for t in page.locator("#prompt-1 h2").all_text_contents()]
        assert heads == ["seed 7 keep at step 1", "seed 8 keep at step 0"]
        assert all(w > 0 for w in natural_widths(page, ".step-img")) and page.locator(".step-img").count() == 4
        assert page.locator("#prompt-1 .step-head .chip").all_inner_texts() == ["refine", "keep", "keep"]
        assert page.locator(".step-prompt").all_inner_texts()[1] == "a boxing match"
    with Server(create_app(files["plain"], image_store=store)) as srv:
        page.goto(srv.url + "/")
        assert page.locator(".step-img").count() == 2 and all(w > 0 for w in natural_widths(page, ".step-img"))
    # Without the run's store the ids are not served.
    with Server(create_app(files["ipr"], image_store=tmp_path / "elsewhere")) as srv:
        page.goto(srv.url + "/")
        assert natural_widths(page, ".step-img") == [0, 0, 0, 0]


def test_non_loopback_bind_needs_the_token(tmp_path: Path) -> None:
    """The real command on 0.0.0.0: requests without the printed token are refused."""
    ds = tmp_path / "ds"
    make_ctd_dataset(ds, n_pending=1)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "unveil.cli", "ui", str(ds), "--host", "0.0.0.0", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.time() + 60
        while "token=" not in line and time.time() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "unveil ui exited"
        token = line.strip().split("token=")[1]
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/review", timeout=2)
            except urllib.error.HTTPError as exc:
                assert exc.code == 401
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("server did not answer")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/images/" + "0" * 64, timeout=5)
        assert err.value.code == 401
        req = urllib.request.Request(base + "/review", headers={"Authorization": f"Bearer {token}"})
        body = urllib.request.urlopen(req, timeout=5).read().decode()
        assert "reviewed" in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/review?token=wrong", timeout=5)
        assert err.value.code == 401
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny random-weight Stable Diffusion folder, as a generator spec."""
    from tests.tiny import build_tiny_sd

    return "diffusers:" + build_tiny_sd(tmp_path_factory.mktemp("tiny_sd") / "sd")


def in_thread(fn: Any, *args: Any) -> Any:
    """Call `fn` in a fresh thread (the module's Playwright session keeps an event loop running in this one)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)))
    t.start()
    t.join()
    assert out, f"{fn} raised"
    return out[0]


def test_review_a_queue_written_by_unveil_generate(browser: Any, tmp_path: Path, tiny_sd: str) -> None:
    """The real `unveil generate` (scripted judges, tiny SD) queues two samples; the page reviews them and
    `unveil review` sees the outcome."""
    from tests.graphs.test_ctd import accepting_script, cli_args, write_script
    from unveil.cli import main

    ds = tmp_path / "ds"
    assert in_thread(main, cli_args(ds, write_script(tmp_path, accepting_script()), tiny_sd)) == 0
    queued = sorted(load_samples(ds))
    assert [load_samples(ds)[i]["status"] for i in queued] == ["pending_review", "pending_review"]
    with Server(create_app(ds, reviewer="carol")) as srv:
        page = new_page(browser)
        page.goto(srv.url + "/")
        assert natural_widths(page, "#sample-img")[0] == 32  # the generated 32x32 image, from the folder's store
        assert page.locator("table.votes tbody tr").count() == 6
        rejected = page.locator("#card").get_attribute("data-id")
        with page.expect_navigation():
            page.keyboard.press("r")
        approved = page.locator("#card").get_attribute("data-id")
        with page.expect_navigation():
            page.keyboard.press("a")
        assert page.locator("#card-empty").count() == 1
        assert "2 of 2 reviewed" in " ".join(page.locator(".progress-text").inner_text().split())
    recs = load_samples(ds)
    assert sorted([rejected, approved]) == queued
    assert recs[rejected]["status"] == "rejected" and recs[approved]["status"] == "accepted"
    assert {recs[i]["review"]["reviewer"] for i in queued} == {"carol"}
    assert [json.loads(x)["id"] for x in (ds / "dataset.jsonl").read_text().splitlines()] == [approved]
    # Replaying the web decisions through the command line changes nothing (same semantics, same format).
    before = (ds / SAMPLES).read_bytes()
    assert in_thread(main, ["review", str(ds), "--decisions", str(ds / DECISIONS)]) == 0
    assert (ds / SAMPLES).read_bytes() == before
