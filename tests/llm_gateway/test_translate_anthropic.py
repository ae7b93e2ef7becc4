"""Generic conversation ⇄ Anthropic Messages, through the real SDK against the fake server.

Every response test runs the non-streamed and the streamed path and requires them to be equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from services.llm_gateway.model import (
    ChatRequest,
    Message,
    Role,
    StopReason,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    Usage,
)
from services.llm_gateway.providers.anthropic import AnthropicProvider
from services.llm_gateway.testing import (
    FakeAnthropicServer,
    Reply,
    ScriptedToolCall,
    ScriptedUsage,
)
from tests.llm_gateway.conftest import both_paths, replay_deltas

SEARCH = Tool(
    name="search",
    description="Search the collection.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
USER = Message(Role.USER, "What is Quarry?")
EPHEMERAL = {"type": "ephemeral"}


def _request(*messages: Message, **options: Any) -> ChatRequest:
    return ChatRequest(messages=messages or (USER,), **options)


async def _sent(
    make: Callable[..., AnthropicProvider],
    fake: FakeAnthropicServer,
    request: ChatRequest,
    **kw: Any,
) -> dict[str, Any]:
    """The JSON body the provider sent for `request`, the same on both paths."""
    await both_paths(make(**kw), fake, Reply(text="ok"), request)
    return fake.requests[-2].body


async def test_only_leading_system_messages_are_hoisted_and_cached(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    request = _request(
        Message(Role.SYSTEM, "You are Quarry."),
        Message(Role.SYSTEM, "Cite sources."),
        USER,
        Message(Role.ASSISTANT, "It is a search service."),
        Message(Role.SYSTEM, "Now answer in French."),
        Message(Role.USER, "Pourquoi?"),
    )
    body = await _sent(make_anthropic_provider, fake_anthropic, request)
    assert body["system"] == [
        {"type": "text", "text": "You are Quarry."},
        {"type": "text", "text": "Cite sources.", "cache_control": EPHEMERAL},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is Quarry?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is a search service."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Now answer in French."},
                {"type": "text", "text": "Pourquoi?"},
            ],
        },
    ]


async def test_prompt_caching_can_be_turned_off(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    request = _request(Message(Role.SYSTEM, "sys"), USER, tools=(SEARCH,))
    body = await _sent(make_anthropic_provider, fake_anthropic, request, prompt_caching=False)
    assert "cache_control" not in json.dumps(body)


async def test_tools_carry_the_cache_breakpoint_and_the_schema(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    other = Tool("submit_answer", "Submit.", {"type": "object", "properties": {}})
    body = await _sent(make_anthropic_provider, fake_anthropic, _request(tools=(SEARCH, other)))
    assert body["tools"] == [
        {
            "name": "search",
            "description": "Search the collection.",
            "input_schema": SEARCH.parameters,
        },
        {
            "name": "submit_answer",
            "description": "Submit.",
            "input_schema": {"type": "object", "properties": {}},
            "cache_control": EPHEMERAL,
        },
    ]


async def test_tool_results_merge_into_one_user_turn_first_in_call_order_then_text(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    calls = (ToolCall("toolu_a", "search", '{"query": "a"}'), ToolCall("toolu_b", "search", ""))
    request = _request(
        USER,
        Message(Role.ASSISTANT, "Let me search.", tool_calls=calls[:1]),
        Message(Role.ASSISTANT, "", tool_calls=calls[1:]),
        Message(Role.USER, "hurry"),
        Message(Role.TOOL, "result b", tool_call_id="toolu_b"),
        Message(Role.TOOL, "", tool_call_id="toolu_a", is_error=True),
    )
    body = await _sent(make_anthropic_provider, fake_anthropic, request, prompt_caching=False)
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me search."},
                {"type": "tool_use", "id": "toolu_a", "name": "search", "input": {"query": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "result b"},
                {"type": "text", "text": "hurry"},
            ],
        },
    ]
    assert '"text": ""' not in json.dumps(body)


async def test_compatible_tool_call_ids_are_sanitised_and_deduplicated_for_call_and_result(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, tool_calls=(ToolCall("functions.search:0", "search", "{}"),)),
        Message(Role.TOOL, "one", tool_call_id="functions.search:0"),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("functions.search:0", "search", "{}"),)),
        Message(Role.TOOL, "two", tool_call_id="functions.search:0"),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("chatcmpl-tool-9f/1", "search", "{}"),)),
        Message(Role.TOOL, "three", tool_call_id="chatcmpl-tool-9f/1"),
    )
    messages = (await _sent(make_anthropic_provider, fake_anthropic, request))["messages"]
    sent_calls = [m["content"][0]["id"] for m in messages if m["role"] == "assistant"]
    sent_results = [m["content"][0]["tool_use_id"] for m in messages[2:] if m["role"] == "user"]
    assert sent_calls == ["functions_search_0", "functions_search_0_2", "chatcmpl-tool-9f_1"]
    assert sent_results == sent_calls


async def test_past_arguments_that_are_not_a_json_object_are_sent_as_empty_input(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "search", '{"query": '),)),
        Message(Role.TOOL, "arguments were not valid JSON", tool_call_id="c1", is_error=True),
    )
    body = await _sent(make_anthropic_provider, fake_anthropic, request)
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "search", "input": {}}
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (ToolChoice(ToolChoiceMode.AUTO), None, {"type": "auto"}),
        (ToolChoice(ToolChoiceMode.REQUIRED), None, {"type": "any"}),
        (ToolChoice(ToolChoiceMode.NONE), None, {"type": "none"}),
        (ToolChoice(ToolChoiceMode.NAMED, "search"), None, {"type": "tool", "name": "search"}),
        (
            ToolChoice(ToolChoiceMode.AUTO),
            False,
            {"type": "auto", "disable_parallel_tool_use": True},
        ),
        (
            ToolChoice(ToolChoiceMode.NAMED, "search"),
            False,
            {"type": "tool", "name": "search", "disable_parallel_tool_use": True},
        ),
        (ToolChoice(ToolChoiceMode.AUTO), True, {"type": "auto"}),
    ],
)
async def test_tool_choice_mapping(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    choice: ToolChoice,
    parallel: bool | None,
    expected: dict[str, Any],
) -> None:
    request = _request(tools=(SEARCH,), tool_choice=choice, parallel_tool_calls=parallel)
    body = await _sent(make_anthropic_provider, fake_anthropic, request)
    assert body["tool_choice"] == expected


async def test_no_tools_means_no_tool_choice_and_unsupported_sampling_options_are_dropped(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    body = await _sent(make_anthropic_provider, fake_anthropic, _request(temperature=0.3, seed=4))
    assert "tools" not in body
    assert "tool_choice" not in body
    assert "seed" not in body
    assert "temperature" not in body


async def test_max_tokens_is_always_sent_and_kept_within_the_window(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    default = await _sent(make_anthropic_provider, fake_anthropic, _request())
    assert default["max_tokens"] == 1024
    asked = await _sent(make_anthropic_provider, fake_anthropic, _request(max_output_tokens=300))
    assert asked["max_tokens"] == 300
    long_prompt = Message(Role.USER, "word " * 4000)
    clamped = await _sent(
        make_anthropic_provider,
        fake_anthropic,
        _request(long_prompt, max_output_tokens=8000),
        context_window_tokens=8192,
    )
    assert 1 <= clamped["max_tokens"] <= 8192 - 20_000 // 4 + 10
    assert clamped["max_tokens"] < 8000


async def test_structured_output_is_a_forced_tool(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = _request(response_schema=schema, response_schema_name="final_answer")
    body = await _sent(make_anthropic_provider, fake_anthropic, request, prompt_caching=False)
    assert body["tools"] == [
        {
            "name": "final_answer",
            "description": body["tools"][0]["description"],
            "input_schema": schema,
        }
    ]
    assert body["tool_choice"] == {
        "type": "tool",
        "name": "final_answer",
        "disable_parallel_tool_use": True,
    }


# -- responses, both paths -------------------------------------------------------------------


async def test_text_reply_with_cache_usage_normalised(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    reply = Reply(
        text="Quarry is a search service.",
        usage=ScriptedUsage(
            input_tokens=12, output_tokens=9, cache_read_tokens=1000, cache_write_tokens=200
        ),
        chunk_size=6,
    )
    response, deltas = await both_paths(
        make_anthropic_provider(), fake_anthropic, reply, _request()
    )
    assert response.text == "Quarry is a search service."
    assert response.usage == Usage(
        input_tokens=1212, output_tokens=9, cache_read_tokens=1000, cache_write_tokens=200
    )
    assert response.stop_reason is StopReason.END_TURN
    assert response.model == "claude-test"
    assert replay_deltas(deltas) == (response.text, {})


async def test_tool_calls_stream_by_block_index_with_partial_json(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    reply = Reply(
        text="Searching twice.",
        tool_calls=[
            ScriptedToolCall("toolu_1", "search", '{"query":"alpha beta","limit":5}'),
            ScriptedToolCall("toolu_2", "search", '{"query":"gamma"}'),
        ],
        chunk_size=5,
    )
    response, deltas = await both_paths(
        make_anthropic_provider(), fake_anthropic, reply, _request(tools=(SEARCH,))
    )
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.tool_calls == [
        ToolCall("toolu_1", "search", json.dumps({"query": "alpha beta", "limit": 5})),
        ToolCall("toolu_2", "search", json.dumps({"query": "gamma"})),
    ]
    text, calls = replay_deltas(deltas)
    assert text == "Searching twice."
    assert [(c[0], c[1], json.loads(c[2])) for c in calls.values()] == [
        ("toolu_1", "search", {"query": "alpha beta", "limit": 5}),
        ("toolu_2", "search", {"query": "gamma"}),
    ]


async def test_tool_without_arguments_sends_no_deltas_and_reads_as_empty_object(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    reply = Reply(tool_calls=[ScriptedToolCall("toolu_1", "list_sources", "")])
    response, deltas = await both_paths(
        make_anthropic_provider(), fake_anthropic, reply, _request()
    )
    assert response.tool_calls == [ToolCall("toolu_1", "list_sources", "{}")]
    assert replay_deltas(deltas)[1] == {0: ("toolu_1", "list_sources", "")}


async def test_malformed_streamed_arguments_are_kept_as_sent(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    reply = Reply(tool_calls=[ScriptedToolCall("toolu_1", "search", '{"query": "x"')])
    response, _ = await both_paths(make_anthropic_provider(), fake_anthropic, reply, _request())
    assert response.tool_calls == [ToolCall("toolu_1", "search", '{"query": "x"')]


@pytest.mark.parametrize(
    ("stop_reason", "stop", "overflow"),
    [
        ("end_turn", StopReason.END_TURN, False),
        ("stop_sequence", StopReason.END_TURN, False),
        ("max_tokens", StopReason.MAX_TOKENS, False),
        ("refusal", StopReason.CONTENT_FILTER, False),
        ("model_context_window_exceeded", StopReason.MAX_TOKENS, True),
    ],
)
async def test_stop_reasons_are_normalised(
    make_anthropic_provider: Callable[..., AnthropicProvider],
    fake_anthropic: FakeAnthropicServer,
    stop_reason: str,
    stop: StopReason,
    overflow: bool,
) -> None:
    reply = Reply(text="partial", stop_reason=stop_reason)
    response, _ = await both_paths(make_anthropic_provider(), fake_anthropic, reply, _request())
    assert response.stop_reason is stop
    assert response.context_window_exceeded is overflow


async def test_structured_reply_is_the_forced_tool_input_as_json_text(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    reply = Reply(tool_calls=[ScriptedToolCall("toolu_s", "structured_output", '{"answer":"42"}')])
    response, deltas = await both_paths(
        make_anthropic_provider(), fake_anthropic, reply, _request(response_schema=schema)
    )
    assert json.loads(response.text) == {"answer": "42"}
    assert response.tool_calls == []
    assert response.stop_reason is StopReason.END_TURN
    assert json.loads(replay_deltas(deltas)[0]) == {"answer": "42"}


async def test_a_non_object_schema_is_wrapped_and_unwrapped(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    reply = Reply(tool_calls=[ScriptedToolCall("t", "structured_output", '{"value": ["a", "b"]}')])
    request = _request(response_schema=schema)
    response, _ = await both_paths(make_anthropic_provider(), fake_anthropic, reply, request)
    assert json.loads(response.text) == ["a", "b"]
    sent_schema = fake_anthropic.requests[0].body["tools"][0]["input_schema"]
    assert sent_schema["properties"]["value"] == schema


async def test_ids_the_provider_echoes_are_mapped_back_to_the_callers(
    make_anthropic_provider: Callable[..., AnthropicProvider], fake_anthropic: FakeAnthropicServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, tool_calls=(ToolCall("functions.search:0", "search", "{}"),)),
        Message(Role.TOOL, "one", tool_call_id="functions.search:0"),
    )
    reply = Reply(tool_calls=[ScriptedToolCall("functions_search_0", "search", "{}")])
    response, deltas = await both_paths(make_anthropic_provider(), fake_anthropic, reply, request)
    assert response.tool_calls[0].id == "functions.search:0"
    assert replay_deltas(deltas)[1][0][0] == "functions.search:0"
