"""Generic conversation ⇄ OpenAI chat completions, through the real SDK against the fake server.

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
from services.llm_gateway.providers.openai import OpenAIProvider, OpenAIQuirks
from services.llm_gateway.testing import (
    FakeOpenAIServer,
    Reply,
    ScriptedToolCall,
    ScriptedUsage,
)
from tests.llm_gateway.conftest import both_paths, replay_deltas

SEARCH = Tool(
    name="search",
    description="Search the collection.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["query"],
    },
)
USER = Message(Role.USER, "What is Quarry?")


def _request(*messages: Message, **options: Any) -> ChatRequest:
    return ChatRequest(messages=messages or (USER,), **options)


async def _sent(
    make: Callable[..., OpenAIProvider], fake: FakeOpenAIServer, request: ChatRequest, **kw: Any
) -> dict[str, Any]:
    """The JSON body the provider sent for `request`, the same on both paths."""
    await both_paths(make(**kw), fake, Reply(text="ok"), request)
    return fake.requests[-2].body


async def test_system_messages_stay_in_place_and_tool_results_come_first_in_call_order(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    calls = (ToolCall("call_a", "search", '{"query": "a"}'), ToolCall("call_b", "search", "{}"))
    request = _request(
        Message(Role.SYSTEM, "You are terse."),
        USER,
        Message(Role.ASSISTANT, "", tool_calls=calls),
        Message(Role.USER, "also consider b"),
        Message(Role.TOOL, "result b", tool_call_id="call_b"),
        Message(Role.TOOL, "result a", tool_call_id="call_a", is_error=True),
        Message(Role.SYSTEM, "Be precise."),
    )
    body = await _sent(make_openai_provider, fake_openai, request)
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is Quarry?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "a"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "search", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "result a"},
        {"role": "tool", "tool_call_id": "call_b", "content": "result b"},
        {"role": "user", "content": "also consider b"},
        {"role": "system", "content": "Be precise."},
    ]


async def test_consecutive_assistant_messages_merge_and_empty_text_is_never_sent(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, "First thought."),
        Message(Role.ASSISTANT, "   ", tool_calls=(ToolCall("c1", "search", ""),)),
        Message(Role.TOOL, "", tool_call_id="c1"),
    )
    body = await _sent(make_openai_provider, fake_openai, request)
    assistant = body["messages"][1]
    assert assistant["content"] == "First thought."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": ""}
    assert len(body["messages"]) == 3


async def test_invalid_past_arguments_are_sent_as_an_empty_object(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "search", '{"query": '),)),
        Message(Role.TOOL, "arguments were not valid JSON", tool_call_id="c1", is_error=True),
    )
    body = await _sent(make_openai_provider, fake_openai, request)
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_reused_tool_call_ids_are_made_unique_per_turn_for_call_and_result(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    request = _request(
        USER,
        Message(Role.ASSISTANT, tool_calls=(ToolCall("functions.search:0", "search", "{}"),)),
        Message(Role.TOOL, "one", tool_call_id="functions.search:0"),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("functions.search:0", "search", "{}"),)),
        Message(Role.TOOL, "two", tool_call_id="functions.search:0"),
    )
    messages = (await _sent(make_openai_provider, fake_openai, request))["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "functions_search_0"
    assert messages[2]["tool_call_id"] == "functions_search_0"
    assert messages[3]["tool_calls"][0]["id"] == "functions_search_0_2"
    assert messages[4]["tool_call_id"] == "functions_search_0_2"


@pytest.mark.parametrize(
    ("choice", "parallel", "expected_choice"),
    [
        (ToolChoice(ToolChoiceMode.AUTO), None, "auto"),
        (ToolChoice(ToolChoiceMode.REQUIRED), None, "required"),
        (ToolChoice(ToolChoiceMode.NONE), None, "none"),
        (
            ToolChoice(ToolChoiceMode.NAMED, "search"),
            False,
            {"type": "function", "function": {"name": "search"}},
        ),
    ],
)
async def test_tool_choice_and_parallel_tool_calls(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    choice: ToolChoice,
    parallel: bool | None,
    expected_choice: Any,
) -> None:
    request = _request(tools=(SEARCH,), tool_choice=choice, parallel_tool_calls=parallel)
    body = await _sent(make_openai_provider, fake_openai, request)
    assert body["tool_choice"] == expected_choice
    assert body.get("parallel_tool_calls") == parallel
    assert body["tools"][0]["function"]["parameters"] == SEARCH.parameters


async def test_requests_without_tools_send_no_tool_choice(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    body = await _sent(make_openai_provider, fake_openai, _request(temperature=0.2, seed=7))
    assert "tools" not in body
    assert "tool_choice" not in body
    assert (body["temperature"], body["seed"], body["max_completion_tokens"]) == (0.2, 7, 512)


async def test_endpoint_quirks_shape_the_request(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    quirks = OpenAIQuirks(
        strict_schemas=True,
        collapse_unions=True,
        supports_parallel_tool_calls=False,
        supports_seed=False,
        max_tokens_param="max_tokens",
    )
    request = _request(tools=(SEARCH,), parallel_tool_calls=False, seed=3, max_output_tokens=99)
    body = await _sent(make_openai_provider, fake_openai, request, quirks=quirks)
    function = body["tools"][0]["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
        "required": ["query", "limit"],
        "additionalProperties": False,
    }
    assert "parallel_tool_calls" not in body
    assert "seed" not in body
    assert body["max_tokens"] == 99
    assert "max_completion_tokens" not in body


async def test_structured_output_uses_json_schema_where_supported(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = _request(response_schema=schema, response_schema_name="answer")
    body = await _sent(
        make_openai_provider, fake_openai, request, quirks=OpenAIQuirks(strict_schemas=True)
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "schema": {
                "type": "object",
                "properties": {"answer": {"type": ["string", "null"]}},
                "required": ["answer"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


async def test_structured_output_falls_back_to_json_object_with_the_schema_in_the_prompt(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = _request(Message(Role.SYSTEM, "sys"), USER, response_schema=schema)
    quirks = OpenAIQuirks(supports_json_schema_response=False)
    body = await _sent(make_openai_provider, fake_openai, request, quirks=quirks)
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert body["messages"][1]["role"] == "system"
    assert json.dumps(schema) in body["messages"][1]["content"]
    assert body["messages"][2]["role"] == "user"


# -- responses, both paths -------------------------------------------------------------------


async def test_text_reply_with_cached_usage(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(
        text="Quarry is a search service.",
        usage=ScriptedUsage(input_tokens=100, output_tokens=7, cache_read_tokens=60),
        chunk_size=5,
    )
    response, deltas = await both_paths(make_openai_provider(), fake_openai, reply, _request())
    assert response.text == "Quarry is a search service."
    assert response.stop_reason is StopReason.END_TURN
    assert response.usage == Usage(input_tokens=160, output_tokens=7, cache_read_tokens=60)
    assert response.model == "gpt-test"
    assert replay_deltas(deltas) == (response.text, {})
    assert len(deltas) > 1


async def test_parallel_tool_calls_stream_by_index_and_equal_the_whole_reply(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(
        text="Searching.",
        tool_calls=[
            ScriptedToolCall("call_1", "search", '{"query": "alpha beta"}'),
            ScriptedToolCall("call_2", "search", '{"query": "gamma"}'),
        ],
        chunk_size=4,
    )
    request = _request(tools=(SEARCH,))
    response, deltas = await both_paths(make_openai_provider(), fake_openai, reply, request)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.tool_calls == [
        ToolCall("call_1", "search", '{"query": "alpha beta"}'),
        ToolCall("call_2", "search", '{"query": "gamma"}'),
    ]
    text, calls = replay_deltas(deltas)
    assert text == "Searching."
    assert calls == {
        0: ("call_1", "search", '{"query": "alpha beta"}'),
        1: ("call_2", "search", '{"query": "gamma"}'),
    }


@pytest.mark.parametrize(
    "quirk",
    [{"whole_tool_call_chunks": True}, {"anonymous_continuations": True}],
    ids=["whole-call-in-one-chunk", "continuations-without-id-or-index"],
)
async def test_quirky_compatible_chunks_assemble_the_same_calls(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    quirk: dict[str, bool],
) -> None:
    reply = Reply(
        tool_calls=[
            ScriptedToolCall("chatcmpl-tool-1", "search", '{"query": "x"}'),
            ScriptedToolCall("chatcmpl-tool-2", "search", '{"query": "y"}'),
        ],
        chunk_size=3,
        **quirk,  # type: ignore[arg-type]
    )
    response, deltas = await both_paths(make_openai_provider(), fake_openai, reply, _request())
    assert [c.arguments_json for c in response.tool_calls] == ['{"query": "x"}', '{"query": "y"}']
    assert [c.id for c in response.tool_calls] == ["chatcmpl-tool-1", "chatcmpl-tool-2"]
    assert replay_deltas(deltas)[1][1] == ("chatcmpl-tool-2", "search", '{"query": "y"}')


async def test_tool_without_arguments_and_malformed_arguments_are_kept(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(
        tool_calls=[
            ScriptedToolCall("c1", "list_sources", ""),
            ScriptedToolCall("c2", "search", '{"query": "unterminated'),
        ]
    )
    response, _ = await both_paths(make_openai_provider(), fake_openai, reply, _request())
    assert response.tool_calls == [
        ToolCall("c1", "list_sources", "{}"),
        ToolCall("c2", "search", '{"query": "unterminated'),
    ]


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", StopReason.END_TURN),
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.CONTENT_FILTER),
        ("tool_calls", StopReason.TOOL_USE),
    ],
)
async def test_finish_reasons_are_normalised(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    finish: str,
    stop: StopReason,
) -> None:
    reply = Reply(text="x", stop_reason=finish)
    response, _ = await both_paths(make_openai_provider(), fake_openai, reply, _request())
    assert response.stop_reason is stop


async def test_tool_calls_with_a_stop_finish_reason_are_still_tool_use(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    reply = Reply(tool_calls=[ScriptedToolCall("c", "search", "{}")], stop_reason="stop")
    response, _ = await both_paths(make_openai_provider(), fake_openai, reply, _request())
    assert response.stop_reason is StopReason.TOOL_USE


async def test_structured_reply_is_the_json_text(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    reply = Reply(text='{"answer": "42"}')
    response, _ = await both_paths(
        make_openai_provider(), fake_openai, reply, _request(response_schema=schema)
    )
    assert json.loads(response.text) == {"answer": "42"}


async def test_a_non_object_schema_is_wrapped_and_the_reply_unwrapped(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    reply = Reply(text='{"value": ["a", "b"]}')
    response, _ = await both_paths(
        make_openai_provider(), fake_openai, reply, _request(response_schema=schema)
    )
    assert json.loads(response.text) == ["a", "b"]
    sent = fake_openai.requests[0].body["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["value"] == schema
