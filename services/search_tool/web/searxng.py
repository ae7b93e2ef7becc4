"""SearxNG, self-hosted metasearch: `GET {base_url}/search?q=…&format=json`, no key.

The instance must list `json` under `search.formats` in its `settings.yml` (otherwise it answers
403, reported as such). The reply's `results[]` carry `url`, `title` and `content` (the snippet);
SearxNG returns a page of about twenty whatever is asked, so the first `limit` are kept.
"""

from __future__ import annotations

import httpx

from services.search_tool.web.base import WebResult, parse_results
from services.search_tool.web.http import exchange_json


class SearxngProvider:
    """A SearxNG instance's JSON search API."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        categories: str = "general",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = name
        self._categories = categories
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), transport=transport)

    @property
    def name(self) -> str:
        return self._name

    async def search(self, query: str, limit: int, *, timeout_s: float) -> list[WebResult]:
        params = {"q": query, "format": "json", "categories": self._categories, "pageno": "1"}
        request = self._client.build_request(
            "GET",
            "/search",
            params=params,
            headers={"accept": "application/json"},
            timeout=timeout_s,
        )
        body = await exchange_json(self._client, request, self._name, timeout_s=timeout_s)
        return parse_results(body.get("results"), self._name, "content", limit)

    async def aclose(self) -> None:
        await self._client.aclose()
