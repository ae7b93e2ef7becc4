"""Shared fixtures for gateway tests: one fake server per provider for the whole session, reset
before each test that asks for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Completed,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from services.llm_gateway.providers.anthropic import AnthropicProvider
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.openai import OpenAIProvider
from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer, FakeServer, Reply

FAKE_API_KEY = "sk-test-fake-key-0123456789abcdef"
"""The key tests configure; it must never appear in errors, logs or spans."""


def loopback_http_client() -> httpx2.AsyncClient:
    """An HTTP client for the fakes: plain HTTP on 127.0.0.1 needs no CA bundle, and not loading
    one saves the SDKs' default client ~0.1-0.5 s per construction."""
    return httpx2.AsyncClient(verify=False)


@pytest.fixture(scope="session")
def _openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def _anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
def fake_openai(_openai_server: FakeOpenAIServer) -> FakeOpenAIServer:
    """The session's fake OpenAI server, with an empty script and no recorded requests."""
    _openai_server.reset()
    return _openai_server


@pytest.fixture
def fake_anthropic(_anthropic_server: FakeAnthropicServer) -> FakeAnthropicServer:
    """The session's fake Anthropic server, with an empty script and no recorded requests."""
    _anthropic_server.reset()
    return _anthropic_server


@pytest.fixture
async def openai_sdk(fake_openai: FakeOpenAIServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """A raw OpenAI SDK client pointed at the fake, without retries."""
    async with openai.AsyncOpenAI(
        api_key=FAKE_API_KEY,
        base_url=fake_openai.base_url,
        max_retries=0,
        timeout=5.0,
        http_client=loopback_http_client(),
    ) as client:
        yield client


@pytest.fixture
async def anthropic_sdk(
    fake_anthropic: FakeAnthropicServer,
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """A raw Anthropic SDK client pointed at the fake, without retries."""
    async with anthropic.AsyncAnthropic(
        api_key=FAKE_API_KEY,
        base_url=fake_anthropic.base_url,
        max_retries=0,
        timeout=5.0,
        http_client=loopback_http_client(),
    ) as client:
        yield client


async def collect(stream: AsyncIterator[StreamEvent]) -> tuple[list[StreamEvent], ChatResponse]:
    """Every event of a provider stream, and the response its `Completed` event carries."""
    events = [event async for event in stream]
    assert isinstance(events[-1], Completed), "a successful stream ends with Completed"
    assert not any(isinstance(e, Completed) for e in events[:-1])
    return events[:-1], events[-1].response


async def both_paths(
    provider: Provider, fake: FakeServer, reply: Reply, request: ChatRequest
) -> tuple[ChatResponse, list[StreamEvent]]:
    """Answer `request` with `reply` non-streamed and streamed: both must send the same request
    (but for the stream flags) and read the same response. Returns it and the streamed deltas."""
    fake.push(reply, reply)
    plain = await provider.generate(request)
    deltas, streamed = await collect(provider.stream(request))
    assert streamed == plain, "the streamed turn must equal the non-streamed one"
    sent_plain, sent_streamed = (r.body for r in fake.requests[-2:])
    assert sent_streamed.pop("stream") is True
    sent_streamed.pop("stream_options", None)
    assert sent_streamed == sent_plain, "both paths must send the same request"
    return plain, deltas


def replay_deltas(deltas: list[StreamEvent]) -> tuple[str, dict[int, tuple[str, str, str]]]:
    """Text and tool calls (id, name, arguments by index) as a client assembles them from deltas."""
    text = ""
    calls: dict[int, tuple[str, str, str]] = {}
    for event in deltas:
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, ToolCallDelta):
            call_id, name, args = calls.get(event.index, ("", "", ""))
            calls[event.index] = (
                call_id or event.id,
                name or event.name,
                args + event.arguments_delta,
            )
    return text, calls


@pytest.fixture
async def make_openai_provider(
    fake_openai: FakeOpenAIServer,
) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """Build `OpenAIProvider`s against the fake (keyword overrides allowed); closed afterwards."""
    made: list[OpenAIProvider] = []

    def make(**overrides: Any) -> OpenAIProvider:
        options: dict[str, Any] = {
            "name": "fake-openai/gpt-test",
            "model": "gpt-test",
            "api_key": FAKE_API_KEY,
            "base_url": fake_openai.base_url,
            "context_window_tokens": 8192,
            "default_max_output_tokens": 512,
            "timeout_s": 5.0,
            "http_client": loopback_http_client(),
            **overrides,
        }
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def make_anthropic_provider(
    fake_anthropic: FakeAnthropicServer,
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """Build `AnthropicProvider`s against the fake (keyword overrides allowed), closed after."""
    made: list[AnthropicProvider] = []

    def make(**overrides: Any) -> AnthropicProvider:
        options: dict[str, Any] = {
            "name": "fake-anthropic/claude-test",
            "model": "claude-test",
            "api_key": FAKE_API_KEY,
            "base_url": fake_anthropic.base_url,
            "context_window_tokens": 200_000,
            "default_max_output_tokens": 1024,
            "timeout_s": 5.0,
            "http_client": loopback_http_client(),
            **overrides,
        }
        provider = AnthropicProvider(**options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()
