"""`WebSearch`: validate, answer from the cache, else ask the providers in order.

A provider whose breaker is open is skipped; one whose tries all fail gives way to the next.
When none answers the search fails UNAVAILABLE (`WEB_SEARCH_FAILED`) naming each provider's
failure, with the longest Retry-After any of them sent (or the time until a breaker lets a
probe through) as its RetryInfo. Nothing here touches a collection.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from services.search_tool.web.base import WebProviderError, WebResult
from services.search_tool.web.config import WebSearchSettings
from services.search_tool.web.guard import BreakerOpen, GuardedProvider

MAX_LIMIT = 20
DISABLED_REASON = "WEB_SEARCH_DISABLED"
FAILED_REASON = "WEB_SEARCH_FAILED"


@dataclass(frozen=True)
class WebSearchOutcome:
    results: tuple[WebResult, ...]
    provider: str
    """The configured name of the provider that answered."""
    cached: bool
    took_ms: float


class WebSearchService:
    """The configured providers, in order, behind one cache."""

    def __init__(
        self,
        providers: Sequence[GuardedProvider],
        settings: WebSearchSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._providers = list(providers)
        self._settings = settings
        self._clock = clock
        self._cache: OrderedDict[tuple[str, int], tuple[float, WebSearchOutcome]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return bool(self._providers)

    async def search(
        self, query: str, limit: int = 0, *, deadline_s: float | None = None
    ) -> WebSearchOutcome:
        """At most `limit` (0: the default) results for `query`; `deadline_s`: seconds left."""
        if not self._providers:
            raise FailedPrecondition(
                "web search is not configured on this search tool (search_tool.web_search."
                "providers is empty)",
                reason=DISABLED_REASON,
            )
        query, limit = self._validate(query, limit)
        started = self._clock()
        key = (query.casefold(), limit)
        cached = self._cached(key, started)
        if cached is not None:
            return cached
        deadline = None if deadline_s is None else started + deadline_s
        results, provider = await self._ask_providers(query, limit, deadline)
        took_ms = (self._clock() - started) * 1000
        outcome = WebSearchOutcome(tuple(results), provider, cached=False, took_ms=took_ms)
        self._remember(key, outcome)
        return outcome

    def _validate(self, query: str, limit: int) -> tuple[str, int]:
        query = " ".join(query.split())
        if not query:
            raise InvalidArgument.for_field("query", "must not be empty")
        if len(query) > self._settings.max_query_chars:
            raise InvalidArgument.for_field(
                "query", f"must be at most {self._settings.max_query_chars} characters"
            )
        if limit < 0 or limit > MAX_LIMIT:
            raise InvalidArgument.for_field("limit", f"must be 1..{MAX_LIMIT} (0: the default)")
        return query, limit or self._settings.default_limit

    async def _ask_providers(
        self, query: str, limit: int, deadline: float | None
    ) -> tuple[list[WebResult], str]:
        failures: list[str] = []
        retry_after: list[float] = []
        for provider in self._providers:
            try:
                return await provider.search(query, limit, deadline=deadline), provider.name
            except BreakerOpen as error:
                failures.append(str(error))
                retry_after.append(error.retry_after_s)
            except WebProviderError as error:
                failures.append(error.message)
                if error.retry_after_s is not None:
                    retry_after.append(error.retry_after_s)
        raise Unavailable(
            "web search failed: " + "; ".join(failures),
            retry_after_s=max(retry_after) if retry_after else None,
            reason=FAILED_REASON,
        )

    def _cached(self, key: tuple[str, int], now: float) -> WebSearchOutcome | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        stored_at, outcome = entry
        if now - stored_at > self._settings.cache_ttl_s:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        took_ms = (self._clock() - now) * 1000
        return WebSearchOutcome(outcome.results, outcome.provider, cached=True, took_ms=took_ms)

    def _remember(self, key: tuple[str, int], outcome: WebSearchOutcome) -> None:
        if self._settings.cache_entries == 0:
            return
        self._cache[key] = (self._clock(), outcome)
        self._cache.move_to_end(key)
        while len(self._cache) > self._settings.cache_entries:
            self._cache.popitem(last=False)

    async def aclose(self) -> None:
        for provider in self._providers:
            await provider.aclose()
