"""Fake provider servers for the web search tests (no network: everything is 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.search_tool.web.fake_web import FakeWebServer, Page, WebReply

PAGES = (
    Page("https://example.org/rust", "The Rust book", "Rust is a  systems\nlanguage."),
    Page("https://example.org/go", "Go by example", "Go is a language with goroutines."),
    Page("https://example.org/zig", "Zig", "Zig is a language without hidden control flow."),
)
BRAVE_KEY = "brv-test-key-1b2c3d"
TAVILY_KEY = "tvly-test-key-9f8e7d"


@pytest.fixture
def searxng() -> Iterator[FakeWebServer]:
    server = FakeWebServer("searxng", default=WebReply(PAGES)).start()
    yield server
    server.stop()


@pytest.fixture
def brave(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWebServer]:
    monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)
    server = FakeWebServer("brave", api_key=BRAVE_KEY, default=WebReply(PAGES)).start()
    yield server
    server.stop()


@pytest.fixture
def tavily(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWebServer]:
    monkeypatch.setenv("TAVILY_API_KEY", TAVILY_KEY)
    server = FakeWebServer("tavily", api_key=TAVILY_KEY, default=WebReply(PAGES)).start()
    yield server
    server.stop()
