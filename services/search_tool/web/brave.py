"""Brave Search API: `GET {base_url}/res/v1/web/search?q=…&count=…` with the key in the
`X-Subscription-Token` header. The reply's `web.results[]` carry `url`, `title` and
`description` (the snippet); `count` is at most 20."""

from __future__ import annotations

import httpx

from services.search_tool.web.base import WebResult, parse_results
from services.search_tool.web.http import exchange_json

DEFAULT_BASE_URL = "https://api.search.brave.com"
MAX_COUNT = 20


class BraveProvider:
    """Brave's web search endpoint."""

    def __init__(
        self,
        name: str,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = name
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=transport,
            headers={"x-subscription-token": api_key, "accept": "application/json"},
        )

    @property
    def name(self) -> str:
        return self._name

    async def search(self, query: str, limit: int, *, timeout_s: float) -> list[WebResult]:
        params = {"q": query, "count": str(min(limit, MAX_COUNT))}
        request = self._client.build_request(
            "GET", "/res/v1/web/search", params=params, timeout=timeout_s
        )
        body = await exchange_json(self._client, request, self._name, timeout_s=timeout_s)
        web = body.get("web")
        items = web.get("results") if isinstance(web, dict) else None
        return parse_results(items, self._name, "description", limit)

    async def aclose(self) -> None:
        await self._client.aclose()
