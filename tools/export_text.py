"""Untrusted text written into files people open in other programs: a spreadsheet's cells and a Markdown card.

A dataset's samples, categories and model specs come from model answers and from files anyone may edit, and an
export puts them where other programs interpret them: a CSV cell that starts with `=`, `+`, `-` or `@` (or a tab
or carriage return before one) is a formula to a spreadsheet (`=HYPERLINK(...)`, `=cmd|...`), and a model spec
with a line break, a backtick or a `|` turns a dataset card's list or table into Markdown of its own. These
functions make such text inert where it is written.
"""

from __future__ import annotations

import re

# The first characters that make a spreadsheet read a cell as a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_SPACES = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


def csv_cell(value: object) -> object:
    """A CSV cell that no spreadsheet reads as a formula: a text starting with a formula character gets a leading
    `'` (shown by the spreadsheet as text, not computed); numbers and other values are left as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def markdown_inline(text: str) -> str:
    """Text for one line of Markdown (a list item, a table cell): line breaks and controls as one space, `|`
    escaped, backticks as `'`, so it can neither end its line, its cell or a code span, nor start markup of its
    own on another line."""
    return _SPACES.sub(" ", text).strip().replace("`", "'").replace("|", "\\|")
