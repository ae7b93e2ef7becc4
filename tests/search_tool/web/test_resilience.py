"""Retries honouring Retry-After, the circuit breaker, the cache and the provider order — against
the fake servers, with an injected sleep and clock (no test waits on a real backoff)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from services.search_tool.web import build_provider
from services.search_tool.web.base import WebProviderError
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from services.search_tool.web.guard import BreakerOpen, GuardedProvider
from services.search_tool.web.service import WebSearchService
from tests.search_tool.web.conftest import BRAVE_KEY, PAGES
from tests.search_tool.web.fake_web import FakeWebServer, WebReply


class Sleeps:
    """Records each backoff instead of waiting it out."""

    def __init__(self) -> None:
        self.waited: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waited.append(seconds)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guarded(server: FakeWebServer, sleeps: Sleeps, **overrides: object) -> GuardedProvider:
    fields: dict[str, object] = {"kind": server.kind, "base_url": server.base_url}
    fields.update(overrides)
    settings = WebProviderSettings.model_validate(fields)
    return GuardedProvider(build_provider(settings), settings, sleep=sleeps)


def service_of(
    *providers: GuardedProvider, clock: Clock | None = None, **fields: object
) -> WebSearchService:
    settings = WebSearchSettings.model_validate(
        {"providers": [p.settings.model_dump() for p in providers], **fields}
    )
    return WebSearchService(list(providers), settings, clock=clock or Clock())


async def test_a_429_is_retried_after_the_providers_retry_after(searxng: FakeWebServer) -> None:
    searxng.push(WebReply(status=429, headers={"retry-after": "2"}))
    sleeps = Sleeps()
    provider = guarded(searxng, sleeps)
    results = await provider.search("zig", 3, deadline=None)
    await provider.aclose()
    assert len(results) == 3
    assert sleeps.waited == [2.0]
    assert len(searxng.requests) == 2


async def test_5xx_without_retry_after_backs_off_exponentially_then_gives_up(
    searxng: FakeWebServer,
) -> None:
    searxng.push(*[WebReply(status=503)] * 3)
    sleeps = Sleeps()
    provider = guarded(searxng, sleeps, max_attempts=3, base_backoff_s=0.5)
    with pytest.raises(WebProviderError) as caught:
        await provider.search("zig", 3, deadline=None)
    await provider.aclose()
    assert caught.value.status == 503
    assert sleeps.waited == [0.5, 1.0]
    assert len(searxng.requests) == 3


async def test_a_retry_after_beyond_the_cap_is_not_waited_for_but_reported(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(status=429, headers={"retry-after": "120"}))
    sleeps = Sleeps()
    service = service_of(guarded(searxng, sleeps, max_retry_after_s=10))
    with pytest.raises(Unavailable) as caught:
        await service.search("zig", 3)
    await service.aclose()
    assert sleeps.waited == []
    assert len(searxng.requests) == 1
    assert caught.value.retry_after_s == 120.0
    assert caught.value.reason == "WEB_SEARCH_FAILED"
    assert "searxng answered 429" in caught.value.message


async def test_a_refused_key_is_not_retried(
    brave: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", "not-the-key")
    sleeps = Sleeps()
    service = service_of(guarded(brave, sleeps))
    with pytest.raises(Unavailable, match="refused the request"):
        await service.search("zig", 3)
    await service.aclose()
    assert len(brave.requests) == 1
    assert sleeps.waited == []


async def test_no_retry_is_started_that_the_callers_deadline_cannot_wait_for(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(status=429, headers={"retry-after": "5"}))
    provider = guarded(searxng, Sleeps())
    with pytest.raises(WebProviderError, match="429"):
        await provider.search("zig", 3, deadline=time.monotonic() + 1)
    await provider.aclose()
    assert len(searxng.requests) == 1


async def test_the_breaker_opens_after_repeated_failures_and_refuses_without_a_request(
    searxng: FakeWebServer,
) -> None:
    searxng.push(*[WebReply(status=500)] * 2)
    provider = guarded(searxng, Sleeps(), max_attempts=1, breaker_fail_max=2, breaker_reset_s=60)
    for _ in range(2):
        with pytest.raises(WebProviderError, match="500"):
            await provider.search("zig", 3, deadline=None)
    assert provider.breaker_state == "open"
    with pytest.raises(BreakerOpen) as caught:
        await provider.search("zig", 3, deadline=None)
    await provider.aclose()
    assert len(searxng.requests) == 2
    assert caught.value.retry_after_s > 50


async def test_after_the_reset_time_one_probe_closes_the_breaker_again(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(status=500))
    provider = guarded(searxng, Sleeps(), max_attempts=1, breaker_fail_max=1, breaker_reset_s=0)
    with pytest.raises(WebProviderError, match="500"):
        await provider.search("zig", 3, deadline=None)
    assert provider.breaker_state == "open"
    assert len(await provider.search("zig", 3, deadline=None)) == 3
    await provider.aclose()
    assert provider.breaker_state == "closed"


async def test_a_cancelled_search_is_not_counted_against_the_breaker(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(PAGES, delay_s=30))
    provider = guarded(searxng, Sleeps(), breaker_fail_max=1)
    task = asyncio.create_task(provider.search("zig", 3, deadline=None))
    assert await asyncio.to_thread(searxng.arrived.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert provider.breaker_state == "closed"
    assert len(await provider.search("zig", 3, deadline=None)) == 3
    await provider.aclose()


async def test_the_next_provider_answers_when_the_first_fails(
    searxng: FakeWebServer, brave: FakeWebServer
) -> None:
    searxng.push(WebReply(status=502))
    service = service_of(guarded(searxng, Sleeps(), max_attempts=1), guarded(brave, Sleeps()))
    outcome = await service.search("zig", 2)
    await service.aclose()
    assert outcome.provider == "brave"
    assert {r.provider for r in outcome.results} == {"brave"}


async def test_an_open_breaker_sends_searches_to_the_next_provider_at_once(
    searxng: FakeWebServer, brave: FakeWebServer
) -> None:
    searxng.push(WebReply(status=500))
    first = guarded(searxng, Sleeps(), max_attempts=1, breaker_fail_max=1, breaker_reset_s=60)
    service = service_of(first, guarded(brave, Sleeps()))
    await service.search("one", 2)
    await service.search("two", 2)
    await service.aclose()
    assert len(searxng.requests) == 1
    assert len(brave.requests) == 2


async def test_a_repeated_search_is_answered_from_the_cache_until_it_expires(
    searxng: FakeWebServer,
) -> None:
    clock = Clock()
    service = service_of(guarded(searxng, Sleeps()), clock=clock, cache_ttl_s=60)
    first = await service.search("Zig  language", 2)
    again = await service.search("zig language", 2)
    assert again.cached
    assert again.results == first.results
    assert len(searxng.requests) == 1
    assert (await service.search("zig language", 3)).cached is False
    clock.now += 61
    assert (await service.search("zig language", 2)).cached is False
    await service.aclose()
    assert len(searxng.requests) == 3


async def test_the_cache_keeps_only_the_most_recent_entries(searxng: FakeWebServer) -> None:
    service = service_of(guarded(searxng, Sleeps()), cache_entries=2)
    for query in ("a", "b", "a", "c", "a", "b"):
        await service.search(query, 1)
    await service.aclose()
    assert [r.params["q"] for r in searxng.requests] == ["a", "b", "c", "b"]


async def test_web_search_is_off_without_a_provider() -> None:
    service = WebSearchService([], WebSearchSettings())
    with pytest.raises(FailedPrecondition) as caught:
        await service.search("zig", 3)
    assert caught.value.reason == "WEB_SEARCH_DISABLED"


@pytest.mark.parametrize(
    ("query", "limit", "field"),
    [("   ", 3, "query"), ("x" * 401, 3, "query"), ("zig", 21, "limit"), ("zig", -1, "limit")],
)
async def test_bad_requests_name_the_field(
    searxng: FakeWebServer, query: str, limit: int, field: str
) -> None:
    service = service_of(guarded(searxng, Sleeps()))
    with pytest.raises(InvalidArgument) as caught:
        await service.search(query, limit)
    await service.aclose()
    assert caught.value.violations[0].field == field
    assert not searxng.requests


async def test_the_api_key_never_reaches_the_logs_or_the_error(
    brave: FakeWebServer, caplog: pytest.LogCaptureFixture
) -> None:
    brave.push(*[WebReply(status=500)] * 3)
    service = service_of(guarded(brave, Sleeps()))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Unavailable) as caught:
        await service.search("zig", 3)
    await service.aclose()
    assert brave.requests[0].sent_key
    assert caplog.records, "the failures were logged"
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert BRAVE_KEY not in logged
    assert BRAVE_KEY not in str(caught.value)
