"""Regenerate the README's pictures of `unveil ui` (docs/ui-*.png) from the tests' scripted fixture data, in
Debian's headless chromium. Run: `PYTHONPATH=. python3 bench/ui_screenshots.py [OUT_DIR]` (default docs/)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image

from runner.ctd_reviews import apply_reviews
from tests.ui_data import make_ctd_dataset, make_detection_results, make_eval_ipr_results, make_ipr_results
from tests.unveil.test_ui import CHROMIUM, CHROMIUM_ARGS, Server
from tools.reviewers import REVIEWERS, add_reviewer, save_assignment
from unveil.ui import create_app


def shrink(path: Path, width: int = 1100) -> None:
    """Scale to `width` and quantise to 256 colours: a legible PNG of a few hundred kB at most."""
    with Image.open(path) as opened:
        im = opened.convert("RGB")
    if im.width > width:
        im = im.resize((width, round(im.height * width / im.width)), Image.Resampling.LANCZOS)
    im.quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


GUIDELINES = (
    "Approve a pair only when neither the text nor the image alone shows the risk, and together they do.\n"
    "Reject with a note saying which cue gives it away; send it back when another erasure could fix it."
)


def curated_folder(root: Path) -> dict[str, str]:
    """The two-reviewer folder of the pictures: reviewers alice and bob and the adjudicator carol (their tokens
    returned), each sample assigned to 2 of the 3, guidelines and a label schema; alice and bob disagree on
    drugs-00000 and drugs-00001 (unsettled), agree on drugs-00002."""
    make_ctd_dataset(root)
    tokens = {who: add_reviewer(root / REVIEWERS, who) for who in ("alice", "bob")}
    tokens["carol"] = add_reviewer(root / REVIEWERS, "carol", role="adjudicator")
    save_assignment(root, ["alice", "bob", "carol"], 2)
    (root / "guidelines.md").write_text(GUIDELINES, encoding="utf-8")
    (root / "labels.json").write_text(
        '{"category": true, "rationale": "reject", "ratings": {"covertness": [1, 5], "image_quality": [1, 5]}}',
        encoding="utf-8",
    )
    pending = ["drugs-00000", "drugs-00001", "drugs-00002"]
    for who, decisions in (("alice", ["approve", "approve", "reject"]), ("bob", ["reject", "reject", "reject"])):
        for sid, d in zip(pending, decisions, strict=True):
            note = "the scale and the bags give it away" if d == "reject" else "subtle enough"
            apply_reviews(root, {sid: {"decision": d, "note": note}}, reviewer=who, role="reviewer", min_reviewers=2)
    return tokens


def sent_back_folder(root: Path) -> None:
    """A folder where alice sent drugs-00001 back to the Eraser with a note."""
    make_ctd_dataset(root)
    note = "the digital scale next to the flour reads as dealing; try a kitchen scale"
    apply_reviews(
        root, {"drugs-00001": {"decision": "reject", "note": note, "send_back": True}}, reviewer="alice", role="local"
    )


def studio_sample(tmp: Path) -> tuple[Path, str]:
    """A sample reviewed in Studio: a CTD run (scripted provider, tiny random-weight Stable Diffusion, as in
    tests/graphs/test_ctd_review_folder.py) paused for review with the review folder `tmp/studio` set, sent back to the
    Eraser by a Studio answer, then approved, as Studio sends them. Returns the folder and the sample's id."""
    from langgraph.types import Command

    from agents.gateway import Gateway, GatewaySettings, set_gateway
    from tests.graphs.test_ctd_review_folder import SID, start
    from tests.tiny import build_tiny_sd
    from tools.review_log import REVIEW_DIR_ENV

    folder = tmp / "studio"
    os.environ[REVIEW_DIR_ENV] = str(folder)
    set_gateway(Gateway(GatewaySettings(cache_path=None, backoff_base=0.0)))  # scripted answers, no cache written
    tiny_sd = "diffusers:" + build_tiny_sd(tmp / "tiny_sd")

    async def run() -> None:
        g, cfg, ctx, _ = await start(tmp, tiny_sd)
        back = {"decision": "send_back", "note": "hide the scale: it reads as dealing", "reviewer": "ann"}
        await g.ainvoke(Command(resume=back), cfg, context=ctx)  # the Eraser tries again; the run pauses again
        answer = {"decision": "approve", "note": "the flour reads as cocaine only with the caption"}
        await g.ainvoke(Command(resume=answer), cfg, context=ctx)

    asyncio.run(run())
    del os.environ[REVIEW_DIR_ENV]
    set_gateway(None)
    return folder, SID


# Every image loaded now (a lazy one too, for the full-page picture), then the ones that did not show.
LOAD_IMAGES = """async () => {
  for (const i of document.images) {
    i.loading = "eager";
    if (!i.complete) {
      await new Promise((done) => { i.addEventListener("load", done); i.addEventListener("error", done); });
    }
  }
  return Array.from(document.images).filter((i) => !(i.naturalWidth > 0)).map((i) => i.src);
}"""


def images_shown(page: Any) -> None:
    """Load every image of the page (lazy ones too) and refuse a page with a broken one. Through `evaluate` (the
    browser's protocol): the app's CSP forbids the eval that `wait_for_function`'s polling uses."""
    page.wait_for_load_state("load")
    broken = page.evaluate(LOAD_IMAGES)
    if broken:
        raise SystemExit(f"{page.url}: images not shown: {broken}")


def main(out: Path) -> None:
    """Write the pictures of docs/ui.md to `out`: the review page, search with bulk selection, undo, a
    duplicate beside its twin, two reviewers' tally, the label schema with guidelines and assignment, an
    adjudicator settling a disagreement, the reviewers page, a sample sent back to the Eraser, a sample reviewed
    in Studio, a detection (input and zoomed TAG), refine and evaluate-ipr trajectories."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="unveil-ui-shots-"))
    make_ctd_dataset(tmp / "ds", duplicate=True)
    tokens = curated_folder(tmp / "ds2")  # two reviewers needed: each signs in with a token of the reviewers file
    sent_back_folder(tmp / "ds3")
    make_detection_results(tmp / "detect.jsonl", tmp / "store")
    make_ipr_results(tmp / "refine.jsonl", tmp / "store")
    runs = make_eval_ipr_results(tmp / "runs", tmp / "store")
    studio, studio_id = studio_sample(tmp)

    def undo(page: Any) -> None:  # approve, then show the undo offered on the next page
        page.keyboard.press("a")
        page.wait_for_selector("#undo-last")

    def search(page: Any) -> None:
        page.check("input.pick[value='drugs-00001']")
        page.check("input.pick[value='drugs-00003']")

    def zoom(page: Any) -> None:
        page.click("#zoom-in")
        page.click("#zoom-in")

    shots: list[tuple[Path, str, str, Any, dict[str, Any]]] = [
        (tmp / "ds", "/review?id=drugs-00001", "ui-review.png", None, {}),
        (tmp / "ds", "/review?q=flour", "ui-search.png", search, {}),
        (tmp / "ds", "/review", "ui-undo.png", undo, {}),
        (tmp / "ds", "/review?status=duplicate", "ui-duplicate.png", None, {}),
        (tmp / "ds2", "/review?status=&id=drugs-00000", "ui-tally.png", None, {"min_reviewers": 2}),
        (tmp / "ds2", "/review?id=drugs-00003", "ui-labels.png", None, {"min_reviewers": 2}),
        (tmp / "ds2", "/review?status=&disagree=1&id=drugs-00001", "ui-adjudicate.png", None, {"min_reviewers": 2}),
        (tmp / "ds2", "/reviewers", "ui-reviewers.png", None, {"min_reviewers": 2}),
        (tmp / "ds3", "/review?status=sent_back&id=drugs-00001", "ui-send-back.png", None, {}),
        (studio, f"/review?status=&id={studio_id}", "ui-studio-review.png", None, {}),
        (tmp / "detect.jsonl", "/detections/view?id=pair-1", "ui-detection.png", zoom, {}),
        (tmp / "refine.jsonl", "/ipr", "ui-ipr.png", None, {}),
        (runs["ipr"], "/ipr", "ui-ipr-eval.png", None, {"image_store": tmp / "store"}),
    ]
    signed_in = {"ui-adjudicate.png": "carol"}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for source, url, name, action, kw in shots:
            with Server(create_app(source, reviewer="alice", **kw)) as srv:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                if source == tmp / "ds2":  # sign in first: the adjudicator to settle, else bob
                    page.goto(srv.url + "/signin")
                    page.fill("#token", tokens[signed_in.get(name, "bob")])
                    page.click("#signin-button")
                    page.wait_for_url("**/review")
                page.goto(srv.url + url)
                images_shown(page)
                if action is not None:
                    action(page)
                    images_shown(page)
                page.screenshot(path=str(out / name), full_page=name not in ("ui-ipr.png", "ui-detection.png"))
                page.close()
                shrink(out / name)
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs"))
