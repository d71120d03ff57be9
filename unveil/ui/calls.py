"""The "Model calls" section of a sample's page: each call's messages, raw answer and counts (`agents.call_log`).

The calls are read from the response cache the app's runs used (`$UNVEIL_CACHE`, else the default cache file);
the page renders them through Jinja2's escaping, and every text was redacted when it was read.
"""

from __future__ import annotations

from typing import Any


def calls_view(usage: object) -> dict[str, Any]:
    """{"calls": the sample's calls in order, "note": why none can be shown ("" when they are)}."""
    from agents.cache import ResponseCache, default_cache_path
    from agents.call_log import sample_calls

    if not isinstance(usage, dict) or not usage.get("calls"):
        return {
            "calls": [],
            "note": "This record lists no model calls (made with the response cache off, or by an older version).",
        }
    path = default_cache_path()
    if path is None or not path.is_file():
        return {"calls": [], "note": f"No response cache at {path}: set UNVEIL_CACHE to the run's cache file."}
    cache = ResponseCache(path)
    try:
        return {"calls": sample_calls(usage, cache), "note": ""}
    finally:
        cache.close()
