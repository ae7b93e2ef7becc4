"""AnthropicProvider against the fake server: failures classified (also inside a 200 stream), one
HTTP request per call, no SDK spans of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import anthropic
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    ProviderError,
    RateLimited,
    RetryableProviderError,
)
from services.llm_gateway.model import (
    ChatRequest,
    Message,
    Role,
    TextDelta,
    Tool,
    ToolChoice,
    ToolChoiceMode,
)
from services.llm_gateway.providers.anthropic import AnthropicProvider
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.testing import (
    FakeAnthropicServer,
    Reply,
    ScriptedError,
    ScriptedToolCall,
)
from tests.llm_gateway.conftest import FAKE_API_KEY, collect

REQUEST = ChatRequest(messages=(Message(Role.USER, "hello"),))


async def _call(provider: Provider, streamed: bool) -> None:
    if streamed:
        await collect(provider.stream(REQUEST))
    else:
        await provider.generate(REQUEST)


async def _fail(provider: Provider, streamed: bool) -> ProviderError:
    with pytest.raises(ProviderError) as raised:
        await _call(provider, streamed)
    return raised.value


def test_provider_satisfies_the_protocol(
    make_anthropic_provider: Callable[..., AnthropicProvider],
) -> None:
    provider: Provider = make_anthropic_provider()
    assert (provider.kind, provider.model, provider.context_window_tokens) == (
        "anthropic",
        "claude-test",
        200_000,
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize("reply", [Reply.server_error(500), Reply.overloaded()], ids=["500", "529"])
async def test_server_failures_are_retryable_after_exactly_one_http_request(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    reply: Reply,
    streamed: bool,
) -> None:
    fake_anthropic.push(reply, Reply(text="would be a hidden retry"))
    error = await _fail(make_anthropic_provider(), streamed)
    assert type(error) is RetryableProviderError
    assert len(fake_anthropic.requests) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_rate_limit_honours_retry_after_ms(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    streamed: bool,
) -> None:
    fake_anthropic.push(Reply.rate_limited("2500", header="retry-after-ms"))
    error = await _fail(make_anthropic_provider(), streamed)
    assert isinstance(error, RateLimited)
    assert error.retry_after_s == 2.5


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_prompt_too_long_is_a_context_overflow(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    streamed: bool,
) -> None:
    fake_anthropic.push(Reply.context_overflow())
    error = await _fail(make_anthropic_provider(), streamed)
    assert isinstance(error, ContextWindowExceeded)
    assert "prompt is too long" in error.message


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_bad_credentials_are_fatal_and_the_key_never_appears(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    streamed: bool,
) -> None:
    fake_anthropic.push(Reply.unauthorized(f"invalid x-api-key {FAKE_API_KEY}"))
    error = await _fail(make_anthropic_provider(), streamed)
    assert isinstance(error, FatalProviderError)
    assert not error.caller_error
    assert FAKE_API_KEY not in str(error)


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", RetryableProviderError),
        ("api_error", RetryableProviderError),
        ("rate_limit_error", RateLimited),
        ("invalid_request_error", FatalProviderError),
    ],
)
async def test_mid_stream_error_events_are_classified_by_type(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    error_type: str,
    kind: type[ProviderError],
) -> None:
    reply = Reply(
        text="some words first",
        stream_error=ScriptedError(type=error_type, message="mid-stream trouble"),
        stream_error_after_events=4,
    )
    fake_anthropic.push(reply)
    seen: list[object] = []

    async def consume() -> None:
        async for event in make_anthropic_provider().stream(REQUEST):
            seen.append(event)

    with pytest.raises(ProviderError) as raised:
        await consume()
    assert type(raised.value) is kind
    assert "mid-stream trouble" in raised.value.message
    assert any(isinstance(e, TextDelta) for e in seen)


async def test_a_stream_cut_mid_tool_call_without_message_stop_fails(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    reply = Reply(
        tool_calls=[ScriptedToolCall("toolu_1", "search", '{"query": "a long query"}')],
        chunk_size=3,
        cut_after_events=5,
    )
    fake_anthropic.push(reply)
    with pytest.raises(RetryableProviderError, match="message_stop"):
        await collect(make_anthropic_provider().stream(REQUEST))


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_a_hang_past_the_timeout_is_retryable_and_closes_the_request(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    streamed: bool,
) -> None:
    fake_anthropic.push(Reply.hang(30))
    # the timeout leaves the request time to reach the fake on a loaded machine (at 0.2 s a
    # client under load gave up before sending it, and nothing was there to see close)
    error = await _fail(make_anthropic_provider(timeout_s=1.0), streamed)
    assert type(error) is RetryableProviderError
    assert fake_anthropic.requests[0].disconnected.wait(5)


async def test_cancelling_a_stream_closes_the_upstream_request(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    fake_anthropic.push(Reply(text="stalls after a while", stall_after_events=4, delay_s=30))
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in make_anthropic_provider().stream(REQUEST):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake_anthropic.requests[0].disconnected.wait(5)


@pytest.fixture
def global_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A global tracer provider recording every span, as the gateway process installs one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


async def test_the_sdk_emits_no_span_of_its_own(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    global_spans: InMemorySpanExporter,
) -> None:
    fake_anthropic.push(Reply(text="plain SDK"), Reply(text="ours"), Reply(text="ours, streamed"))
    async with anthropic.AsyncAnthropic(
        api_key=FAKE_API_KEY, base_url=fake_anthropic.base_url, max_retries=0
    ) as plain:
        await plain.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert global_spans.get_finished_spans(), "a default SDK client does emit spans"
    global_spans.clear()
    provider = make_anthropic_provider()
    await provider.generate(REQUEST)
    await collect(provider.stream(REQUEST))
    assert global_spans.get_finished_spans() == ()


async def test_a_connection_dropped_mid_stream_is_retryable(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    fake_anthropic.push(Reply(text="a longer answer that breaks", abort_after_events=4))
    with pytest.raises(RetryableProviderError):
        await collect(make_anthropic_provider().stream(REQUEST))


async def test_a_turn_allowed_fewer_tools_sends_anthropic_only_those(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
) -> None:
    schema = {"type": "object", "properties": {}}
    tools = tuple(Tool(name, f"{name}.", schema) for name in ("search", "read", "submit_answer"))
    fake_anthropic.push(Reply(text="done"))
    choice = ToolChoice(ToolChoiceMode.NAMED, "submit_answer", allowed=("submit_answer",))
    await make_anthropic_provider().generate(
        ChatRequest(messages=REQUEST.messages, tools=tools, tool_choice=choice)
    )
    sent = fake_anthropic.requests[-1].body
    assert [t["name"] for t in sent["tools"]] == ["submit_answer"]
    assert sent["tool_choice"]["name"] == "submit_answer"
