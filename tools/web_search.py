"""Web search for the Architect: Tavily through `tavily-python`, available only when `TAVILY_API_KEY` is set.

Without a key the tool is absent: `get_web_search()` returns None and logs one notice per process, so a run
says once that it goes without search instead of failing or repeating the warning per scene. Results are
trimmed to title, URL and a bounded snippet; they are untrusted text and go to models only as delimited data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tools.env import env_str
from tools.extras import require_extra

log = logging.getLogger("unveil.web_search")

MAX_SNIPPET_CHARS = 600
_NOTICE_GIVEN = False
_CLIENTS: dict[str, WebSearch] = {}


@dataclass
class WebSearch:
    """A Tavily search client with bounded results."""

    api_key: str
    max_results: int = 3

    async def search(self, query: str, *, max_results: int | None = None) -> list[dict[str, Any]]:
        """Top results for `query` as {title, url, content} dicts (content cut to a bounded snippet)."""
        from tavily import AsyncTavilyClient

        client = AsyncTavilyClient(api_key=self.api_key)
        answer = await client.search(query, max_results=max_results or self.max_results, search_depth="basic")
        return [
            {
                "title": str(r.get("title", ""))[:200],
                "url": str(r.get("url", "")),
                "content": str(r.get("content", ""))[:MAX_SNIPPET_CHARS],
            }
            for r in (answer or {}).get("results", [])
        ]


def get_web_search(api_key: str | None = None) -> WebSearch | None:
    """The search tool, or None (with a one-time notice) when no Tavily key is configured; with a key and without
    the 'search' extra, `tools.extras.MissingExtraError`."""
    global _NOTICE_GIVEN
    key = api_key or env_str("TAVILY_API_KEY", "")
    if not key:
        if not _NOTICE_GIVEN:
            _NOTICE_GIVEN = True
            log.warning("web search is off: TAVILY_API_KEY is not set, so the Architect works without search results")
        return None
    # With a key the user asked for search: a missing client library is an error, not a silent run without it.
    require_extra("search", "web search (TAVILY_API_KEY is set)")
    if key not in _CLIENTS:
        _CLIENTS[key] = WebSearch(api_key=key)
    return _CLIENTS[key]
