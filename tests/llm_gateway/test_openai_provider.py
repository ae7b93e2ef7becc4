"""OpenAIProvider against the fake server: failures classified, one HTTP request per call, streams
that end early or are abandoned handled."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import httpx2
import openai
import pytest

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
    StopReason,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
)
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.openai import ENDPOINT_PRESETS, OpenAIProvider, OpenAIQuirks
from services.llm_gateway.testing import FakeOpenAIServer, Reply, ScriptedError, ScriptedToolCall
from services.llm_gateway.translate.openai import to_openai_request
from tests.llm_gateway.conftest import FAKE_API_KEY, both_paths, collect

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
    make_openai_provider: Callable[..., OpenAIProvider],
) -> None:
    provider: Provider = make_openai_provider(context_window_tokens=131_072)
    assert (provider.kind, provider.name, provider.model) == (
        "openai",
        "fake-openai/gpt-test",
        "gpt-test",
    )
    assert provider.context_window_tokens == 131_072


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_server_error_is_retryable_after_exactly_one_http_request(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    streamed: bool,
) -> None:
    fake_openai.push(Reply.server_error(500), Reply(text="would be a hidden retry"))
    error = await _fail(make_openai_provider(), streamed)
    assert type(error) is RetryableProviderError
    assert error.status == 500
    assert len(fake_openai.requests) == 1
    assert fake_openai.script.pending() == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_rate_limit_carries_retry_after(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    streamed: bool,
) -> None:
    fake_openai.push(Reply.rate_limited("2"))
    error = await _fail(make_openai_provider(), streamed)
    assert isinstance(error, RateLimited)
    assert error.retry_after_s == 2.0


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(
    "reply",
    [
        Reply.context_overflow(),
        Reply.context_overflow("This model's current length is 9000 while limit is 8192"),
        Reply.context_overflow("Request would exceed context limit", status=413),
        Reply.context_overflow("the request exceeds the available context size", status=422),
    ],
    ids=["openai-code", "current-length", "exceed-context-limit-413", "llama.cpp-422"],
)
async def test_context_overflow_in_compatible_wordings(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    reply: Reply,
    streamed: bool,
) -> None:
    fake_openai.push(reply)
    assert isinstance(await _fail(make_openai_provider(), streamed), ContextWindowExceeded)


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_bad_credentials_are_fatal_and_the_key_never_appears(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    streamed: bool,
) -> None:
    fake_openai.push(Reply.unauthorized(f"Incorrect API key provided: {FAKE_API_KEY}."))
    error = await _fail(make_openai_provider(), streamed)
    assert isinstance(error, FatalProviderError)
    assert not error.caller_error
    assert FAKE_API_KEY not in str(error)
    assert error.__cause__ is None
    assert error.__suppress_context__


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_a_hang_past_the_timeout_is_retryable_and_closes_the_request(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    streamed: bool,
) -> None:
    fake_openai.push(Reply.hang(30))
    # the timeout leaves the request time to reach the fake on a loaded machine (at 0.2 s a
    # client under load gave up before sending it, and nothing was there to see close)
    error = await _fail(make_openai_provider(timeout_s=1.0), streamed)
    assert type(error) is RetryableProviderError
    assert "timed out" in error.message
    assert fake_openai.requests[0].disconnected.wait(5)


async def test_a_stream_cut_mid_tool_call_fails_after_its_deltas(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(
        tool_calls=[ScriptedToolCall("c1", "search", '{"query": "a long query"}')],
        chunk_size=3,
        cut_after_events=4,
    )
    fake_openai.push(reply)
    seen: list[object] = []

    async def consume() -> None:
        async for event in make_openai_provider().stream(REQUEST):
            seen.append(event)

    with pytest.raises(RetryableProviderError, match="finish reason"):
        await consume()
    assert seen
    assert all(isinstance(e, ToolCallDelta) for e in seen)


async def test_an_error_inside_the_stream_is_classified(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.push(
        Reply(text="partial answer", stream_error=ScriptedError(500, "upstream crashed"))
    )
    with pytest.raises(RetryableProviderError, match="upstream crashed"):
        await collect(make_openai_provider().stream(REQUEST))


async def test_abandoning_a_stream_closes_the_upstream_request(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.push(Reply(text="first words then a stall", stall_after_events=3, delay_s=30))
    stream = make_openai_provider().stream(REQUEST)
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert fake_openai.requests[0].disconnected.wait(5)


async def test_cancelling_a_stream_closes_the_upstream_request(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.push(Reply(text="stalls", stall_after_events=2, delay_s=30))
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in make_openai_provider().stream(REQUEST):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake_openai.requests[0].disconnected.wait(5)


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_an_unreachable_endpoint_is_retryable(
    make_openai_provider: Callable[..., OpenAIProvider], streamed: bool
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = make_openai_provider(base_url=f"http://127.0.0.1:{port}/v1")
    error = await _fail(provider, streamed)
    assert type(error) is RetryableProviderError
    assert "connection" in error.message


def test_presets_name_an_endpoint_a_key_variable_and_quirks() -> None:
    assert set(ENDPOINT_PRESETS) >= {"openai", "groq", "cerebras", "vllm", "ollama"}
    for name, preset in ENDPOINT_PRESETS.items():
        assert preset.base_url.startswith("http"), name
        assert preset.api_key_env.endswith("_API_KEY"), name
    assert ENDPOINT_PRESETS["openai"].quirks.strict_schemas
    assert ENDPOINT_PRESETS["cerebras"].quirks.collapse_unions
    assert ENDPOINT_PRESETS["groq"].context_windows["llama-3.3-70b-versatile"] == 131_072


async def test_streams_ask_for_usage(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.push(Reply(text="hi"))
    await collect(make_openai_provider().stream(REQUEST))
    body = fake_openai.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_a_connection_dropped_mid_stream_is_retryable(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.push(Reply(text="a longer answer that breaks", abort_after_events=3))
    with pytest.raises(RetryableProviderError):
        await collect(make_openai_provider().stream(REQUEST))


async def test_a_refusal_is_a_content_filter_stop_with_its_message(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(refusal="I can't help with that.")
    response, _ = await both_paths(make_openai_provider(), fake_openai, reply, REQUEST)
    assert response.stop_reason is StopReason.CONTENT_FILTER
    assert response.text == "I can't help with that."


# -- the request on the wire is the one `chat.completions.create` would send ------------------

_SEARCH = Tool(
    name="search",
    description="Search the collection.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "enum": [1, 5, None]},
        },
        "required": ["query"],
    },
)
_CONVERSATION = (
    Message(Role.SYSTEM, "You answer by searching."),
    Message(Role.USER, 'When was the Royal Society founded? ✓ «quotes» "escaped" \\ \u2028'),
    Message(
        Role.ASSISTANT,
        tool_calls=(ToolCall("functions.search:0", "search", '{"query": "Royal Society"}'),),
    ),
    Message(Role.TOOL, "[1] founded 1660", tool_call_id="functions.search:0"),
    Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c2", "search", "not json"),)),
    Message(Role.TOOL, "no results", tool_call_id="c2", is_error=True),
    Message(Role.SYSTEM, "Answer now."),
)
_WIRE_CASES: dict[str, tuple[ChatRequest, OpenAIQuirks]] = {
    "bare": (REQUEST, OpenAIQuirks()),
    "agent-turn": (
        ChatRequest(messages=_CONVERSATION, tools=(_SEARCH,), temperature=0.2, seed=7),
        OpenAIQuirks(),
    ),
    "named-choice-strict-parallel": (
        ChatRequest(
            messages=_CONVERSATION,
            tools=(_SEARCH,),
            tool_choice=ToolChoice(ToolChoiceMode.NAMED, "search"),
            parallel_tool_calls=False,
            max_output_tokens=64,
        ),
        ENDPOINT_PRESETS["openai"].quirks,
    ),
    "collapsed-unions-max-tokens": (
        ChatRequest(messages=_CONVERSATION, tools=(_SEARCH,), parallel_tool_calls=True),
        ENDPOINT_PRESETS["cerebras"].quirks,
    ),
    "structured-json-schema": (
        ChatRequest(
            messages=(REQUEST.messages[0],),
            response_schema={"type": "array", "items": {"type": "number"}},
            response_schema_name="numbers",
        ),
        ENDPOINT_PRESETS["openai"].quirks,
    ),
    "structured-json-object": (
        ChatRequest(
            messages=(REQUEST.messages[0],),
            response_schema={"type": "object", "properties": {"a": {"type": "string"}}},
        ),
        ENDPOINT_PRESETS["ollama"].quirks,
    ),
    "tool-calls-in-text": (
        ChatRequest(messages=_CONVERSATION, tools=(_SEARCH,)),
        OpenAIQuirks(tool_calls_in_text=True, supports_seed=False),
    ),
}


class _Wire:
    """Every HTTP request a client sends: method, URL, headers and body bytes."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, list[tuple[str, str]], bytes]] = []

    async def __call__(self, request: httpx2.Request) -> None:
        self.sent.append(
            (request.method, str(request.url), list(request.headers.items()), request.content)
        )

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(verify=False, event_hooks={"request": [self]})


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize("case", list(_WIRE_CASES))
async def test_the_request_sent_is_byte_for_byte_the_one_the_sdk_create_sends(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    case: str,
    streamed: bool,
) -> None:
    """The provider posts its body through the SDK client without `create`'s parameter walk: the
    method, URL, headers (auth included) and body bytes must still be exactly `create`'s."""
    request, quirks = _WIRE_CASES[case]
    ours, sdks = _Wire(), _Wire()
    provider = make_openai_provider(quirks=quirks, http_client=ours.client())
    fake_openai.push(Reply(text="ok"), Reply(text="ok"))
    await _call_with(provider, request, streamed)
    wire = to_openai_request(
        request, model=provider.model, quirks=quirks, default_max_output_tokens=512
    )
    async with openai.AsyncOpenAI(
        api_key=FAKE_API_KEY,
        base_url=fake_openai.base_url,
        max_retries=0,
        timeout=5.0,
        http_client=sdks.client(),
    ) as sdk:
        if streamed:
            chunks = await sdk.chat.completions.create(
                **wire.params, stream=True, stream_options={"include_usage": True}
            )
            async with chunks:
                async for _ in chunks:
                    pass
        else:
            await sdk.chat.completions.create(**wire.params)
    assert len(ours.sent) == len(sdks.sent) == 1
    assert ours.sent == sdks.sent
    assert fake_openai.requests[0].body == fake_openai.requests[1].body
    assert fake_openai.requests[0].sent_api_key(FAKE_API_KEY)


async def _call_with(provider: Provider, request: ChatRequest, streamed: bool) -> None:
    if streamed:
        await collect(provider.stream(request))
    else:
        await provider.generate(request)
