"""A safe subset of Markdown for the review guidelines (`DIR/guidelines.md`): headings, paragraphs, bullet and
numbered lists, **bold**, *italic*, `code` and links to http(s) addresses. Everything else is shown as the text it
is: the whole file is HTML-escaped first and only these forms become markup, so a `<script>`, an `<img
onerror=...>` or a `javascript:` link in the file stays text (the file is the folder owner's, but the page is
every reviewer's)."""

from __future__ import annotations

import html
import re

from markupsafe import Markup

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?!\*)|(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?!\w)")
# The address is matched on the escaped text: `&amp;` stays as it is, and no quote or bracket can end the attribute.
_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^\s()\"'<>]+)\)")


def _inline(escaped: str) -> str:
    """The inline forms of one escaped line (code spans first: their content stays as it is)."""
    spans: list[str] = []

    def keep(m: re.Match[str]) -> str:
        spans.append(f"<code>{m.group(1)}</code>")
        return f"\x00{len(spans) - 1}\x00"

    text = _CODE.sub(keep, escaped)
    text = _LINK.sub(lambda m: f'<a href="{m.group(2)}" rel="noopener noreferrer">{m.group(1)}</a>', text)
    text = _BOLD.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", text)
    text = _ITALIC.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def render_guidelines(text: str) -> Markup:
    """The guidelines as HTML of the safe subset (see the module docstring); every other character escaped."""
    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    kind = ""  # the open list's tag: ul or ol

    def close() -> None:
        nonlocal kind
        if para:
            out.append(f"<p>{'<br>'.join(_inline(x) for x in para)}</p>")
            para.clear()
        if items:
            out.append(f"<{kind}>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + f"</{kind}>")
            items.clear()
            kind = ""

    for raw in html.escape(text.replace("\x00", ""), quote=True).splitlines():
        heading, bullet, numbered = _HEADING.match(raw), _BULLET.match(raw), _NUMBERED.match(raw)
        if not raw.strip():
            close()
        elif heading:
            close()
            level = min(len(heading.group(1)) + 2, 6)  # the card's own headings are h1 and h2
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif bullet or numbered:
            tag = "ul" if bullet else "ol"
            if para or (kind and kind != tag):
                close()
            kind = tag
            items.append(bullet.group(1) if bullet else numbered.group(1) if numbered else "")
        elif items and raw.startswith((" ", "\t")):
            items[-1] += " " + raw.strip()  # a list item's continuation line
        else:
            if items:
                close()
            para.append(raw.strip())
    close()
    return Markup("".join(out))  # built from the escaped text only (see above): safe to mark as markup
