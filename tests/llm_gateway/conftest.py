"""Shared fixtures for gateway tests: one fake server per provider for the whole session, reset
before each test that asks for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anthropic
import openai
import pytest

from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer

FAKE_API_KEY = "sk-test-fake-key-0123456789abcdef"
"""The key tests configure; it must never appear in errors, logs or spans."""


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
        api_key=FAKE_API_KEY, base_url=fake_openai.base_url, max_retries=0, timeout=5.0
    ) as client:
        yield client


@pytest.fixture
async def anthropic_sdk(
    fake_anthropic: FakeAnthropicServer,
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """A raw Anthropic SDK client pointed at the fake, without retries."""
    async with anthropic.AsyncAnthropic(
        api_key=FAKE_API_KEY, base_url=fake_anthropic.base_url, max_retries=0, timeout=5.0
    ) as client:
        yield client
