"""Tavily: `POST {base_url}/search` with a JSON body `{query, max_results, search_depth}` and the
key as `Authorization: Bearer …`. The reply's `results[]` carry `url`, `title` and `content`
(the snippet); `max_results` is at most 20."""

from __future__ import annotations

import httpx

from services.search_tool.web.base import WebResult, parse_results
from services.search_tool.web.http import exchange_json

DEFAULT_BASE_URL = "https://api.tavily.com"
MAX_RESULTS = 20


class TavilyProvider:
    """Tavily's search endpoint (`search_depth` basic)."""

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
            headers={"authorization": f"Bearer {api_key}", "accept": "application/json"},
        )

    @property
    def name(self) -> str:
        return self._name

    async def search(self, query: str, limit: int, *, timeout_s: float) -> list[WebResult]:
        payload = {"query": query, "max_results": min(limit, MAX_RESULTS), "search_depth": "basic"}
        request = self._client.build_request("POST", "/search", json=payload, timeout=timeout_s)
        body = await exchange_json(self._client, request, self._name, timeout_s=timeout_s)
        return parse_results(body.get("results"), self._name, "content", limit)

    async def aclose(self) -> None:
        await self._client.aclose()
