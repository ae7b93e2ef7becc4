"""Web search, a source of the search tool beside its collections (`WebSearch` RPC).

| Module | Concept |
|---|---|
| `base.py` | `WebResult`, the `WebProvider` protocol, `WebProviderError` |
| `http.py` | one HTTP exchange, classified (429/5xx/timeouts retryable, Retry-After read) |
| `searxng.py`, `brave.py`, `tavily.py` | one module per API: request and reply shapes only |
| `guard.py` | per-try timeout, retries honouring Retry-After, circuit breaker |
| `service.py` | validation, the result cache, providers in order |
| `config.py` | `web_search` settings; keys from the environment only |
"""

from __future__ import annotations

from services.search_tool.web.base import WebProvider, WebResult
from services.search_tool.web.brave import BraveProvider
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from services.search_tool.web.guard import GuardedProvider
from services.search_tool.web.searxng import SearxngProvider
from services.search_tool.web.service import WebSearchOutcome, WebSearchService
from services.search_tool.web.tavily import TavilyProvider

__all__ = [
    "WebResult",
    "WebSearchOutcome",
    "WebSearchService",
    "WebSearchSettings",
    "build_web_search",
]


def build_provider(settings: WebProviderSettings) -> WebProvider:
    """The provider `settings.kind` names (its key read from the environment now)."""
    if settings.kind == "searxng":
        return SearxngProvider(settings.name, settings.base_url, categories=settings.categories)
    if settings.kind == "brave":
        return BraveProvider(settings.name, settings.api_key(), base_url=settings.base_url)
    return TavilyProvider(settings.name, settings.api_key(), base_url=settings.base_url)


def build_web_search(settings: WebSearchSettings) -> WebSearchService:
    """Every configured provider, guarded, in order (none: web search is off)."""
    guarded = [GuardedProvider(build_provider(p), p) for p in settings.providers]
    return WebSearchService(guarded, settings)
