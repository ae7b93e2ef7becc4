"""The one scripted-reply format: the scripted provider replays it, record mode writes it, and the
fake vendor servers serve the same file; a scripted fault is the error a real provider reports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

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
    ChatResponse,
    Completed,
    Message,
    Role,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
)
from services.llm_gateway.providers.anthropic import AnthropicProvider
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.extractive import ExtractiveProvider
from services.llm_gateway.providers.openai import OpenAIProvider
from services.llm_gateway.providers.recording import RecordingProvider
from services.llm_gateway.providers.scripted import ScriptedProvider
from services.llm_gateway.scripted_reply import (
    Reply,
    ScriptedError,
    ScriptedReplies,
    ScriptedToolCall,
    ScriptedUsage,
    provider_error,
    reply_from_dict,
    reply_to_dict,
    scripted_error,
)
from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer, FakeServer
from tests.llm_gateway.conftest import collect
from tests.llm_gateway.gateway_fixtures import agent_question, search_result
from tests.llm_gateway.test_extractive import PASSAGES, TOOLS

SCRIPT = """
replies:
  - tool_calls:
      - {id: call_1, name: search, arguments: '{"query": {"primary": "photosynthesis"}}'}
    usage: {input_tokens: 120, output_tokens: 9}
  - {fault: rate_limited, retry_after: "2"}
  - text: "Chloroplasts [1]"
    stop_reason: end_turn
"""


def _provider(tmp_path: Path, text: str = SCRIPT) -> ScriptedProvider:
    path = tmp_path / "script.yaml"
    path.write_text(text)
    return ScriptedProvider(ScriptedReplies.load(path))


def _start() -> ChatRequest:
    return ChatRequest((Message(Role.USER, text="q"),))


def _after_first_turn() -> ChatRequest:
    call = ToolCall("call_1", "search", '{"query": {"primary": "photosynthesis"}}')
    return ChatRequest(
        (
            Message(Role.USER, text="q"),
            Message(Role.ASSISTANT, tool_calls=(call,)),
            Message(Role.TOOL, text="results", tool_call_id="call_1"),
        )
    )


async def test_the_reply_is_chosen_by_the_number_of_assistant_messages(tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    first = await provider.generate(_start())
    assert first.stop_reason is StopReason.TOOL_USE
    assert first.tool_calls[0].arguments_json == '{"query": {"primary": "photosynthesis"}}'
    assert (first.usage.input_tokens, first.usage.output_tokens) == (120, 9)
    again = await provider.generate(ChatRequest((Message(Role.USER, text="other"),)))
    assert again == first, "replay is stateless: same position, same reply"


async def test_a_fault_is_raised_once_before_its_reply(tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    with pytest.raises(RateLimited) as caught:
        await provider.generate(_after_first_turn())
    assert caught.value.retry_after_s == 2
    second = await provider.generate(_after_first_turn())
    assert second.text == "Chloroplasts [1]"


async def test_concurrent_conversations_each_get_their_own_replies(tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    starts = [ChatRequest((Message(Role.USER, text=f"q{i}"),)) for i in range(10)]
    replies = await asyncio.gather(*(provider.generate(r) for r in starts))
    assert {r.tool_calls[0].id for r in replies} == {"call_1"}


async def test_a_request_beyond_the_script_fails_clearly(tmp_path: Path) -> None:
    provider = _provider(tmp_path, "replies: [{text: only one}]\n")
    with pytest.raises(FatalProviderError, match="no reply 2"):
        await provider.generate(_after_first_turn())


async def test_the_default_answers_every_position_past_the_script(tmp_path: Path) -> None:
    provider = _provider(tmp_path, "replies: [{text: first}]\ndefault: {text: again}\n")
    assert (await provider.generate(_start())).text == "first"
    assert (await provider.generate(_after_first_turn())).text == "again"


async def test_unscripted_usage_is_counted_from_the_request_and_the_reply(tmp_path: Path) -> None:
    provider = _provider(tmp_path, "replies: [{text: twelve chars}]\n")
    response = await provider.generate(ChatRequest((Message(Role.USER, text="x" * 400),)))
    assert response.usage.input_tokens >= 100
    assert response.usage.output_tokens == 3
    assert response.model == "scripted", "no model scripted: the configured one"


async def test_a_stream_error_ends_the_stream_after_the_replys_deltas(tmp_path: Path) -> None:
    provider = _provider(
        tmp_path, "replies: [{text: partial answer, stream_error: {status: 529}}]\n"
    )
    events: list[StreamEvent] = []

    async def consume() -> None:
        async for event in provider.stream(_start()):
            events.append(event)

    with pytest.raises(RetryableProviderError):
        await consume()
    assert events, "the deltas came before the error"
    assert not any(isinstance(e, Completed) for e in events)
    assert (await provider.generate(_start())).text == "partial answer"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("replies: [{fault: explode}, {text: x}]\n", "fault must be one of"),
        ("replies: [{text: x, colour: red}]\n", "unknown reply fields"),
        ("- text: x\n", "a script is a mapping"),
        ("replies: [{text: x, stop_reason: stop}]\n", "replays the stop reasons"),
    ],
)
def test_a_malformed_script_is_rejected_when_loading(
    tmp_path: Path, script: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _provider(tmp_path, script)


def test_the_file_form_round_trips_every_field() -> None:
    reply = Reply(
        text="t",
        tool_calls=[ScriptedToolCall("c", "search", "{bad")],
        stop_reason="max_tokens",
        usage=ScriptedUsage(input_tokens=1, output_tokens=2, cache_read_tokens=3),
        error=ScriptedError(status=429, headers={"retry-after": "2"}),
        stream_error=ScriptedError(status=529, type="overloaded_error"),
        delay_s=0.5,
        cut_after_events=3,
        whole_tool_call_chunks=True,
    )
    assert reply_from_dict(json.loads(json.dumps(reply_to_dict(reply)))) == reply
    assert reply_to_dict(Reply(text="only")) == {"text": "only"}


def test_mapping_arguments_are_shorthand_for_their_json_text() -> None:
    reply = reply_from_dict({"tool_calls": [{"id": "c", "name": "n", "arguments": {"q": "é"}}]})
    assert reply.tool_calls[0].arguments == '{"q": "é"}'


FAULTS: list[tuple[Reply, type[ProviderError], bool | None]] = [
    (Reply.rate_limited("3"), RateLimited, None),
    (Reply.server_error(502), RetryableProviderError, None),
    (Reply.overloaded(), RetryableProviderError, None),
    (Reply.context_overflow(), ContextWindowExceeded, None),
    (Reply.unauthorized(), FatalProviderError, False),
    (Reply(error=ScriptedError(status=400, message="bad")), FatalProviderError, True),
    (Reply(error=ScriptedError(status=404)), FatalProviderError, False),
]
"""Faults by the error every vendor provider reports for them."""
OPENAI_ONLY_FAULTS = [
    (Reply(error=ScriptedError(status=429, code="insufficient_quota")), FatalProviderError, False),
]
"""Faults only OpenAI's wire format carries (a structured `code`)."""


@pytest.mark.parametrize(
    ("vendor", "fault", "error_type", "caller_error"),
    [("openai", *case) for case in FAULTS + OPENAI_ONLY_FAULTS]
    + [("anthropic", *case) for case in FAULTS],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
async def test_a_scripted_fault_is_the_error_the_vendor_provider_reports(
    fault: Reply,
    error_type: type[ProviderError],
    caller_error: bool | None,
    vendor: str,
    make_openai_provider: Callable[..., OpenAIProvider],
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_openai: FakeOpenAIServer,
    fake_anthropic: FakeAnthropicServer,
) -> None:
    real: Provider
    fake: FakeServer
    if vendor == "openai":
        real, fake = make_openai_provider(), fake_openai
    else:
        real, fake = make_anthropic_provider(), fake_anthropic
    fake.push(fault)
    with pytest.raises(ProviderError) as from_vendor:
        await real.generate(_start())
    with pytest.raises(ProviderError) as from_script:
        await ScriptedProvider(ScriptedReplies([fault, Reply(text="x")])).generate(_start())
    for caught in (from_vendor.value, from_script.value):
        assert type(caught) is error_type
        assert getattr(caught, "caller_error", None) == caller_error
        assert caught.retry_after_s == from_vendor.value.retry_after_s


@pytest.mark.parametrize(
    "error",
    [
        RateLimited("p/m: HTTP 429: slow down", status=429, retry_after_s=2.5),
        RetryableProviderError("p/m: request timed out"),
        RetryableProviderError("p/m: HTTP 502: no detail", status=502, retry_after_s=1.0),
        FatalProviderError("p/m: HTTP 401: bad key", status=401),
        FatalProviderError("p/m: HTTP 429: quota", status=429),
        FatalProviderError("p/m: HTTP 422: bad", status=422, caller_error=True),
        FatalProviderError("p/m: no reply 3"),
        ContextWindowExceeded("p/m: HTTP 400: prompt is too long", status=400),
        ContextWindowExceeded("p/m: stream error: overflow"),
    ],
    ids=repr,
)
def test_a_recorded_error_replays_as_the_same_kind_of_error(error: ProviderError) -> None:
    scripted = scripted_error(error, provider="p/m")
    replayed = provider_error(scripted, provider="p/m")
    assert type(replayed) is type(error)
    assert getattr(replayed, "caller_error", None) == getattr(error, "caller_error", None)
    assert replayed.retry_after_s == error.retry_after_s
    assert "p/m: HTTP" not in scripted.message, "the vendor's words, not the gateway's prefix"


async def _agent_run(provider: Provider, *, stream: bool) -> list[ChatResponse]:
    """Two agent turns (search, then answer) against `provider`."""
    messages = [Message(Role.USER, text=agent_question("Where does photosynthesis take place?"))]
    responses = []
    for _ in range(2):
        request = ChatRequest(tuple(messages), TOOLS)
        if stream:
            _, response = await collect(provider.stream(request))
        else:
            response = await provider.generate(request)
        responses.append(response)
        call = response.tool_calls[0]
        messages.append(Message(Role.ASSISTANT, tool_calls=(call,)))
        messages.append(Message(Role.TOOL, text=search_result(PASSAGES), tool_call_id=call.id))
    return responses


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
async def test_a_recorded_run_replays_identically(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"recorded{suffix}"
    recorded = await _agent_run(RecordingProvider(ExtractiveProvider(), path), stream=True)
    replayed = await _agent_run(ScriptedProvider(ScriptedReplies.load(path)), stream=False)
    assert replayed == recorded
    if suffix == ".json":
        replies = json.loads(path.read_text())["replies"]
        assert [r["tool_calls"][0]["name"] for r in replies] == ["search", "submit_answer"]


async def _with_rate_limit(provider: Provider, request: ChatRequest) -> ChatResponse:
    with pytest.raises(RateLimited) as caught:
        await provider.generate(request)
    assert caught.value.retry_after_s == 2
    return await provider.generate(request)


async def test_a_recording_replays_through_scripted_and_the_fake_vendor_servers(
    tmp_path: Path,
    make_openai_provider: Callable[..., OpenAIProvider],
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_openai: FakeOpenAIServer,
    fake_anthropic: FakeAnthropicServer,
) -> None:
    path = tmp_path / "recorded.yaml"
    fake_openai.reset(
        [
            Reply(
                tool_calls=[ScriptedToolCall("call_a", "search", '{"query": {"primary": "x"}}')],
                usage=ScriptedUsage(input_tokens=40, output_tokens=7, cache_read_tokens=8),
            ),
            Reply.rate_limited("2"),
            Reply(text="The answer [1].", stop_reason="max_tokens"),
        ]
    )
    live = RecordingProvider(make_openai_provider(), path)
    first = await live.generate(_start())
    second = await _with_rate_limit(live, _after_first_turn())
    assert first.usage == Usage(input_tokens=48, output_tokens=7, cache_read_tokens=8)

    replayers: list[Provider] = [ScriptedProvider(ScriptedReplies.load(path), model="gpt-test")]
    for fake, make in (
        (fake_openai, make_openai_provider),
        (fake_anthropic, make_anthropic_provider),
    ):
        document = ScriptedReplies.load(path)
        fake.reset(document.replies, default=document.default)
        replayers.append(make())
    for replayer in replayers:
        assert await replayer.generate(_start()) == first, replayer.kind
        assert await _with_rate_limit(replayer, _after_first_turn()) == second, replayer.kind
