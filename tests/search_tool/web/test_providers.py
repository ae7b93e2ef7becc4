"""Each provider against a local server speaking its documented JSON: what is sent, what is read,
how failures are classified."""

from __future__ import annotations

import pytest

from services.search_tool.web import build_web_search
from services.search_tool.web.base import WebProviderError, web_result_id
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from services.search_tool.web.http import retry_after_s
from tests.search_tool.web.conftest import BRAVE_KEY, PAGES, TAVILY_KEY
from tests.search_tool.web.fake_web import FakeWebServer, Page, WebReply


def provider_settings(server: FakeWebServer, **overrides: object) -> WebProviderSettings:
    fields: dict[str, object] = {"kind": server.kind, "base_url": server.base_url}
    fields.update(overrides)
    return WebProviderSettings.model_validate(fields)


def one_provider(server: FakeWebServer, **overrides: object) -> WebSearchSettings:
    return WebSearchSettings(providers=[provider_settings(server, **overrides)])


@pytest.mark.parametrize("kind", ["searxng", "brave", "tavily"])
async def test_each_provider_returns_title_url_snippet_provider_and_fetch_time(
    kind: str, request: pytest.FixtureRequest
) -> None:
    server: FakeWebServer = request.getfixturevalue(kind)
    service = build_web_search(one_provider(server))
    try:
        outcome = await service.search("systems languages", 2)
    finally:
        await service.aclose()
    assert outcome.provider == kind
    assert not outcome.cached
    assert [(r.title, r.url) for r in outcome.results] == [(p.title, p.url) for p in PAGES[:2]]
    first = outcome.results[0]
    assert first.snippet == "Rust is a systems language."
    assert first.provider == kind
    assert first.fetched_at.tzinfo is not None
    assert first.id == web_result_id(PAGES[0].url)
    assert first.id.startswith("web_")
    assert not first.id.endswith("__chunk_0")


async def test_searxng_is_asked_for_json_with_the_query(searxng: FakeWebServer) -> None:
    service = build_web_search(one_provider(searxng))
    await service.search("  what is   zig ", 1)
    await service.aclose()
    sent = searxng.requests[0]
    assert (sent.method, sent.path) == ("GET", "/search")
    assert sent.params["q"] == "what is zig"
    assert sent.params["format"] == "json"


async def test_brave_gets_its_key_in_the_subscription_header_and_count(
    brave: FakeWebServer,
) -> None:
    service = build_web_search(one_provider(brave))
    await service.search("zig", 3)
    await service.aclose()
    sent = brave.requests[0]
    assert sent.sent_key
    assert sent.path == "/res/v1/web/search"
    assert sent.params == {"q": "zig", "count": "3"}


async def test_tavily_gets_a_bearer_key_and_a_json_body(tavily: FakeWebServer) -> None:
    service = build_web_search(one_provider(tavily))
    await service.search("zig", 4)
    await service.aclose()
    sent = tavily.requests[0]
    assert sent.sent_key
    assert sent.method == "POST"
    assert sent.body == {"query": "zig", "max_results": 4, "search_depth": "basic"}


async def test_results_without_an_http_url_or_repeated_are_skipped_and_limit_holds(
    searxng: FakeWebServer,
) -> None:
    odd = (
        Page("javascript:alert(1)", "bad", "x"),
        PAGES[0],
        PAGES[0],
        Page("https://example.org/untitled", "", "no title"),
        *PAGES[1:],
    )
    searxng.push(WebReply(odd))
    service = build_web_search(one_provider(searxng))
    outcome = await service.search("q", 3)
    await service.aclose()
    assert [r.url for r in outcome.results] == [
        PAGES[0].url,
        "https://example.org/untitled",
        PAGES[1].url,
    ]
    assert outcome.results[1].title == "https://example.org/untitled"


@pytest.mark.parametrize("kind", ["brave", "tavily"])
async def test_a_wrong_key_is_refused_and_the_message_never_contains_a_key(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    server: FakeWebServer = request.getfixturevalue(kind)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "wrong-key-000")
    provider = build_web_search(one_provider(server))._providers[0]
    with pytest.raises(WebProviderError) as caught:
        await provider.provider.search("zig", 3, timeout_s=5)
    await provider.aclose()
    error = caught.value
    assert error.status == 401
    assert not error.retryable
    assert "API key" in error.message
    assert kind in error.message
    for secret in ("wrong-key-000", BRAVE_KEY, TAVILY_KEY):
        assert secret not in error.message


async def test_searxng_without_json_enabled_is_reported_as_refused(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(status=403, raw_body="Forbidden"))
    provider = build_web_search(one_provider(searxng))._providers[0]
    with pytest.raises(WebProviderError) as caught:
        await provider.provider.search("zig", 3, timeout_s=5)
    await provider.aclose()
    assert caught.value.status == 403
    assert "JSON API" in caught.value.message


async def test_a_body_that_is_not_json_is_a_fault_not_worth_retrying(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(raw_body="<html>maintenance</html>"))
    provider = build_web_search(one_provider(searxng))._providers[0]
    with pytest.raises(WebProviderError) as caught:
        await provider.provider.search("zig", 3, timeout_s=5)
    await provider.aclose()
    assert not caught.value.retryable
    assert "not a JSON object" in caught.value.message


async def test_a_hung_provider_is_cut_at_its_timeout_and_may_be_retried(
    searxng: FakeWebServer,
) -> None:
    searxng.push(WebReply(PAGES, delay_s=5))
    provider = build_web_search(one_provider(searxng))._providers[0]
    with pytest.raises(WebProviderError) as caught:
        await provider.provider.search("zig", 3, timeout_s=0.2)
    await provider.aclose()
    assert caught.value.retryable
    assert "within 0.2 s" in caught.value.message


async def test_an_unreachable_provider_is_retryable() -> None:
    settings = WebProviderSettings(kind="searxng", base_url="http://127.0.0.1:9")
    provider = build_web_search(WebSearchSettings(providers=[settings]))._providers[0]
    with pytest.raises(WebProviderError) as caught:
        await provider.provider.search("zig", 3, timeout_s=2)
    await provider.aclose()
    assert caught.value.retryable
    assert "could not be reached" in caught.value.message


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_s("7") == 7.0
    assert retry_after_s("-3") == 0.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_s("soon") is None
    assert retry_after_s(None) is None


def test_a_keyed_provider_without_its_environment_variable_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    with pytest.raises(ValueError, match="BRAVE_API_KEY"):
        WebSearchSettings(providers=[WebProviderSettings(kind="brave")])


def test_the_settings_have_no_place_for_a_key_and_searxng_needs_its_url() -> None:
    with pytest.raises(ValueError, match="api_key"):
        WebProviderSettings.model_validate({"kind": "brave", "api_key": "x"})
    with pytest.raises(ValueError, match="base_url"):
        WebProviderSettings(kind="searxng")
    assert not WebSearchSettings().enabled
