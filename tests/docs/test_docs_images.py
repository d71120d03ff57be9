"""The docs' pictures: every image a Markdown file shows exists, every picture in docs/ is shown somewhere, each
web-app screenshot is one that `bench/ui_screenshots.py` redraws, and none is heavy to commit."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")
MAX_BYTES = 400_000  # a legible quantised screenshot is a few hundred kB at most (bench/ui_screenshots.py)
SHOWN = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)|<img[^>]*\ssrc=\"([^\"]+)\"")


def shown_images() -> dict[Path, list[str]]:
    """Each local image the Markdown pages show, resolved, with the pages that show it."""
    out: dict[Path, list[str]] = {}
    for page in PAGES:
        for m in SHOWN.finditer(page.read_text(encoding="utf-8")):
            ref = m.group(1) or m.group(2)
            if "://" in ref:
                continue
            out.setdefault((page.parent / ref.split("#")[0]).resolve(), []).append(page.name)
    return out


def test_every_image_the_docs_show_exists() -> None:
    missing = {str(p.relative_to(ROOT)): pages for p, pages in shown_images().items() if not p.is_file()}
    assert not missing, f"images shown but missing: {missing}"


def test_every_picture_in_docs_is_shown_and_redrawn_by_the_script() -> None:
    pictures = [p for p in sorted((ROOT / "docs").rglob("*")) if p.suffix.lower() in IMAGE_SUFFIXES]
    assert pictures
    shown = shown_images()
    assert not [p.name for p in pictures if p.resolve() not in shown], "pictures no page shows"
    script = (ROOT / "bench" / "ui_screenshots.py").read_text(encoding="utf-8")
    assert not [p.name for p in pictures if p.name.startswith("ui-") and f'"{p.name}"' not in script]
    assert not [p.name for p in pictures if p.stat().st_size > MAX_BYTES], f"pictures over {MAX_BYTES} bytes"
