"""Regenerate the README's pictures of `unveil ui` (docs/ui-*.png) from the tests' scripted fixture data, in
Debian's headless chromium. Run: `PYTHONPATH=. python3 scripts/ui_screenshots.py [OUT_DIR]` (default docs/)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from PIL import Image

from tests.test_ui import CHROMIUM, CHROMIUM_ARGS, Server
from tests.ui_data import make_ctd_dataset, make_detection_results, make_ipr_results
from unveil.ui import create_app


def shrink(path: Path, width: int = 1100) -> None:
    """Scale to `width` and quantise to 256 colours: a legible PNG of a few hundred kB at most."""
    with Image.open(path) as opened:
        im = opened.convert("RGB")
    if im.width > width:
        im = im.resize((width, round(im.height * width / im.width)), Image.Resampling.LANCZOS)
    im.quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(out: Path) -> None:
    """Write ui-review.png, ui-detection.png and ui-ipr.png to `out`."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="unveil-ui-shots-"))
    make_ctd_dataset(tmp / "ds")
    make_detection_results(tmp / "detect.jsonl", tmp / "store")
    make_ipr_results(tmp / "refine.jsonl", tmp / "store")
    shots = [
        ("ds", "/review?id=drugs-00001", "ui-review.png"),
        ("detect.jsonl", "/detections/view?id=pair-0", "ui-detection.png"),
        ("refine.jsonl", "/ipr", "ui-ipr.png"),
    ]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for source, url, name in shots:
            with Server(create_app(tmp / source, reviewer="alice")) as srv:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(srv.url + url)
                page.wait_for_function("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
                page.screenshot(path=str(out / name), full_page=name != "ui-ipr.png")
                page.close()
                shrink(out / name)
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs"))
