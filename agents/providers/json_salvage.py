"""JSON from model answers that are not clean JSON: the one salvage helper of the gateway and every provider.

`salvage_json` finds a JSON object in free text (a fenced block, else the outermost braces); `close_truncated_json`
completes a grammar-constrained answer that was cut at the token limit. Both tolerate raw control characters
inside strings, which small models emit and which are harmless here.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def salvage_json(text: str) -> Any:
    """Best-effort JSON from free text: a fenced block, else the outermost {...}; None if none parses."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for cand in candidates:
        try:
            return json.loads(cand, strict=False)  # tolerate raw control characters inside strings
        except json.JSONDecodeError:
            continue
    return None


def close_truncated_json(text: str) -> Any:
    """Complete a JSON object cut at the token limit (close the open string, arrays and objects); None if the
    result still does not parse. Grammar-constrained output is valid up to the cut, so closing it is enough."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    tail = text.rstrip()
    if escaped:
        tail = tail[:-1]
    closed = tail + ('"' if in_string else "")
    closed = closed.rstrip().rstrip(",").rstrip(":")
    # A dangling key without value ("key") cannot be closed meaningfully: drop it.
    for candidate in (closed, closed.rsplit(",", 1)[0]):
        try:
            return json.loads(candidate + "".join(reversed(stack)), strict=False)
        except json.JSONDecodeError:
            continue
    return None
