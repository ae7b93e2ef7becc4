"""Tool calls forced by a JSON schema (`tool_calls: json_schema`): the request's tools and
`tool_choice` become one `response_format` schema, in the shape each server takes, and the reply's
JSON comes back as tool calls on the streamed and the non-streamed path (fake OpenAI server)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from services.common.tool_text import instruction, signature
from services.llm_gateway.config import ProviderSettings
from services.llm_gateway.model import (
    ChatRequest,
    Message,
    Role,
    StopReason,
    TextDelta,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
)
from services.llm_gateway.providers.factory import build_provider
from services.llm_gateway.providers.openai import ENDPOINT_PRESETS, OpenAIProvider, OpenAIQuirks
from services.llm_gateway.testing import FakeOpenAIServer, Reply
from services.llm_gateway.translate.tool_schema import (
    bounded,
    inline_refs,
    tool_call_schema,
)
from tests.llm_gateway.conftest import both_paths

SEARCH = Tool(
    "search",
    "Search the collection.",
    {
        "type": "object",
        "properties": {
            "query": {"$ref": "#/$defs/Query"},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["query"],
        "$defs": {
            "Query": {
                "type": "object",
                "properties": {
                    "primary": {"type": "string", "minLength": 1},
                    "variations": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["primary"],
            }
        },
    },
)
ANSWER = Tool(
    "submit_answer",
    "Answer with citations.",
    {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "citations": {"type": "array", "items": {"enum": ["a__chunk_0", "b__chunk_1"]}},
        },
        "required": ["text"],
    },
)
LLAMA_CPP_PYTHON = ENDPOINT_PRESETS["llama-cpp-python"].quirks


def _by_schema(quirks: OpenAIQuirks = LLAMA_CPP_PYTHON) -> OpenAIQuirks:
    return OpenAIQuirks(**{**quirks.__dict__, "tool_calls_by_schema": True})


def _request(choice: ToolChoice = ToolChoice(ToolChoiceMode.AUTO)) -> ChatRequest:  # noqa: B008
    return ChatRequest(
        messages=(
            Message(Role.SYSTEM, "You are an agent."),
            Message(Role.USER, "find x"),
            Message(
                Role.ASSISTANT,
                "",
                tool_calls=(ToolCall("c1", "search", '{"query": {"primary": "a"}}'),),
            ),
            Message(Role.TOOL, "one result", tool_call_id="c1"),
        ),
        tools=(SEARCH, ANSWER),
        tool_choice=choice,
    )


def test_the_schema_is_any_of_the_tools_each_a_constant_name_and_its_arguments() -> None:
    schema = tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.AUTO, "")
    assert schema is not None
    names = [branch["properties"]["name"]["const"] for branch in schema["anyOf"]]
    assert names == ["search", "submit_answer"]
    jsonschema.Draft202012Validator.check_schema(schema)
    valid = {"name": "search", "arguments": {"query": {"primary": "x"}}}
    jsonschema.validate(valid, schema)
    for invalid in (
        {"name": "browse", "arguments": {}},
        {"name": "search", "arguments": {"query": {}}},
        {"name": "submit_answer", "arguments": {"text": "t", "citations": ["invented__chunk_0"]}},
        {"name": "search"},
        {"name": "search", "arguments": {"query": {"primary": "x"}}, "text": "also prose"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(invalid, schema)


def test_a_named_choice_allows_only_that_tool_and_none_allows_no_call() -> None:
    named = tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.NAMED, "submit_answer")
    assert named is not None
    assert "anyOf" not in named
    assert named["properties"]["name"] == {"const": "submit_answer"}
    required = tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.REQUIRED, "")
    assert required == tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.AUTO, "")
    assert tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.NONE, "") is None
    assert tool_call_schema((), ToolChoiceMode.AUTO, "") is None


def test_local_refs_are_inlined_and_a_recursive_one_keeps_its_definitions() -> None:
    inlined = inline_refs(SEARCH.parameters)
    assert "$defs" not in inlined
    assert inlined["properties"]["query"]["properties"]["primary"] == {
        "type": "string",
        "minLength": 1,
    }
    recursive = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}, "definitions": {"type": "string"}},
        "$defs": {
            "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}},
        },
    }
    kept = inline_refs(recursive)
    assert kept["$defs"] == recursive["$defs"]
    assert kept["properties"]["tree"]["properties"]["child"] == {"$ref": "#/$defs/Node"}
    assert kept["properties"]["definitions"] == {"type": "string"}, "a property, not a $defs key"
    jsonschema.validate({"tree": {"child": {"child": {}}}}, kept)


def test_arrays_without_a_bound_get_one_and_strings_only_when_asked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "free": {"type": "array", "items": {"type": "string"}},
            "capped": {"type": "array", "maxItems": 3},
            "long_min": {"type": "array", "minItems": 40},
            "text": {"type": "string"},
            "choice": {"type": "string", "enum": ["a", "b"]},
        },
    }
    out = bounded(schema)
    props = out["properties"]
    assert props["free"]["maxItems"] == 16
    assert props["capped"]["maxItems"] == 3
    assert props["long_min"]["maxItems"] == 40, "never below minItems"
    assert "maxLength" not in props["text"]
    assert "maxLength" not in props["free"]["items"]
    strings = bounded(schema, max_string=100)["properties"]
    assert strings["text"]["maxLength"] == 100
    assert "maxLength" not in strings["choice"]


async def test_llama_cpp_python_gets_the_schema_in_a_json_object_format_and_calls_come_back(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider(quirks=_by_schema())
    arguments = {"text": "x is 4 [1]", "citations": ["a__chunk_0"]}
    call = {"name": "submit_answer", "arguments": arguments}
    response, deltas = await both_paths(
        provider, fake_openai, Reply(text=json.dumps(call)), _request()
    )

    assert [(c.name, json.loads(c.arguments_json)) for c in response.tool_calls] == [
        ("submit_answer", arguments)
    ]
    assert response.text == ""
    assert response.stop_reason is StopReason.TOOL_USE
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == json.dumps(call)
    sent = fake_openai.requests[-1].body
    assert "tools" not in sent
    assert "tool_choice" not in sent
    assert sent["response_format"] == {
        "type": "json_object",
        "schema": tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.AUTO, ""),
    }
    assert "max_tokens" in sent
    assert "max_completion_tokens" not in sent
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user", "user"], (
        "its chatml format drops every system message but the first"
    )
    assert sent["messages"][0]["content"].startswith("You are an agent.\n\nYou can call")
    assert '{"name": "<tool name>", "arguments"' in sent["messages"][0]["content"]
    assert sent["messages"][2]["content"] == (
        '{"name": "search", "arguments": {"query": {"primary": "a"}}}'
    ), "past calls are written in the shape the schema forces"
    assert sent["messages"][3]["content"] == "Tool result for call c1:\none result"


@pytest.mark.parametrize("endpoint", ["llama-server", "vllm", "custom"])
async def test_servers_taking_openai_json_schema_get_it_under_json_schema(
    make_openai_provider: Callable[..., OpenAIProvider],
    fake_openai: FakeOpenAIServer,
    endpoint: str,
) -> None:
    quirks = OpenAIQuirks() if endpoint == "custom" else ENDPOINT_PRESETS[endpoint].quirks
    provider = make_openai_provider(quirks=_by_schema(quirks))
    request = _request(ToolChoice(ToolChoiceMode.NAMED, "submit_answer"))
    reply = Reply(text='{"name": "submit_answer", "arguments": {"text": "no"}}')
    response, _ = await both_paths(provider, fake_openai, reply, request)

    assert [c.name for c in response.tool_calls] == ["submit_answer"]
    format_: dict[str, Any] = fake_openai.requests[-1].body["response_format"]
    assert format_ == {
        "type": "json_schema",
        "json_schema": {
            "name": "tool_call",
            "schema": tool_call_schema((SEARCH, ANSWER), ToolChoiceMode.NAMED, "submit_answer"),
            "strict": False,
        },
    }


async def test_tool_choice_none_sends_no_schema_and_a_plain_answer_stays_text(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider(quirks=_by_schema())
    response, _ = await both_paths(
        provider,
        fake_openai,
        Reply(text="x is 4."),
        _request(ToolChoice(ToolChoiceMode.NONE)),
    )
    assert response.tool_calls == []
    assert response.text == "x is 4."
    sent = fake_openai.requests[-1].body
    assert "response_format" not in sent
    assert "Do not call a tool now" in sent["messages"][-1]["content"]


async def test_a_reply_cut_off_by_the_output_limit_is_a_broken_call_the_agent_can_answer(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider(quirks=_by_schema())
    cut = '{"name": "search", "arguments": {"query": {"primary": "the the the'
    response, _ = await both_paths(
        provider, fake_openai, Reply(text=cut, stop_reason="max_tokens"), _request()
    )
    assert [c.name for c in response.tool_calls] == ["search"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.tool_calls[0].arguments_json)
    assert response.stop_reason is StopReason.MAX_TOKENS


async def test_a_structured_request_keeps_its_own_schema(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    """GenerateStructured through llama-cpp-python: its schema goes in the json_object form
    (enforced there), not the bare json_object that leaves the reply free."""
    provider = make_openai_provider(quirks=_by_schema())
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}}
    request = ChatRequest(messages=(Message(Role.USER, "sum up"),), response_schema=schema)
    response, _ = await both_paths(provider, fake_openai, Reply(text='{"summary": "s"}'), request)
    assert response.text == '{"summary": "s"}'
    assert fake_openai.requests[-1].body["response_format"] == {
        "type": "json_object",
        "schema": schema,
    }


def test_the_mode_is_for_openai_kind_and_endpoints_that_enforce_a_schema() -> None:
    with pytest.raises(ValueError, match="openai providers only"):
        ProviderSettings(kind="anthropic", model="m", tool_calls="json_schema")
    local = ProviderSettings(
        kind="openai", endpoint="llama-cpp-python", model="qwen", tool_calls="json_schema"
    )
    assert not local.needs_api_key
    provider = build_provider(local)
    assert isinstance(provider, OpenAIProvider)
    assert provider.quirks.tool_calls_by_schema
    assert provider.quirks.schema_in_json_object
    ollama = ProviderSettings(kind="openai", endpoint="ollama", model="q", tool_calls="json_schema")
    with pytest.raises(ValueError, match="needs an endpoint that enforces a JSON schema"):
        build_provider(ollama)


def test_the_forced_prompt_gives_compact_signatures_not_whole_schemas() -> None:
    assert signature(inline_refs(SEARCH.parameters)) == (
        "{query: {primary: string, variations?: string[]}, limit?: integer}"
    )
    assert signature(ANSWER.parameters) == (
        '{text: string, citations?: ("a__chunk_0"|"b__chunk_1")[]}'
    )
    union = {"anyOf": [{"type": "number"}, {"type": "null"}]}
    assert signature({"type": "array", "items": union}) == "(number|null)[]"
    assert signature({"type": "array", "items": {"type": "object", "properties": {}}}) == "{}[]"
    forced = instruction((SEARCH, ANSWER), forced=True)
    plain = instruction((SEARCH, ANSWER))
    assert "arguments: {query: {primary: string" in forced
    assert '"$defs"' not in forced
    assert '{"name": "<tool name>"' in forced
    assert '{"tool": "<tool name>"' in plain
    assert len(forced) < len(plain) * 0.6


def test_a_named_scalar_definition_keeps_the_prompt_the_same_while_its_enum_changes() -> None:
    def answer(ids: list[str]) -> Tool:
        definition: dict[str, Any] = {"type": "string"} | ({"enum": ids} if ids else {})
        items = {"type": "object", "properties": {"result_id": {"$ref": "#/$defs/Cited"}}}
        schema = {
            "type": "object",
            "properties": {"citations": {"type": "array", "items": items}},
            "$defs": {"Cited": definition},
        }
        return Tool("submit_answer", "Answer.", schema)

    prompts = {
        instruction((SEARCH, answer(ids)), forced=True)
        for ids in ([], ["a__chunk_0"], ["a__chunk_0", "b__chunk_1"])
    }
    assert len(prompts) == 1
    assert "{citations?: {result_id?: Cited}[]}" in prompts.pop()
    forced = tool_call_schema((answer(["a__chunk_0"]),), ToolChoiceMode.AUTO, "")
    assert forced is not None
    jsonschema.validate({"name": "submit_answer", "arguments": {"citations": []}}, forced)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"name": "submit_answer", "arguments": {"citations": [{"result_id": "x"}]}}, forced
        )


READ = Tool(
    "read",
    "Read a document.",
    {"type": "object", "properties": {"result_id": {"type": "string"}}, "required": ["result_id"]},
)


async def test_a_turn_allowed_fewer_tools_keeps_the_tool_instruction_and_narrows_the_grammar(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    """The leading tool instruction is byte-identical whatever a turn allows (a local server's
    cached prefix holds); the grammar and the closing directive name what this turn may call."""
    provider = make_openai_provider(quirks=_by_schema())
    tools = (SEARCH, READ, ANSWER)
    turns = [
        ToolChoice(ToolChoiceMode.REQUIRED, allowed=("search", "read")),
        ToolChoice(ToolChoiceMode.AUTO),
        ToolChoice(ToolChoiceMode.NAMED, "submit_answer", allowed=("submit_answer",)),
    ]
    replies = [
        '{"name": "read", "arguments": {"result_id": "a__chunk_0"}}',
        '{"name": "search", "arguments": {"query": {"primary": "x"}}}',
        '{"name": "submit_answer", "arguments": {"text": "x"}}',
    ]
    sent = []
    for choice, text in zip(turns, replies, strict=True):
        request = ChatRequest(messages=_request().messages, tools=tools, tool_choice=choice)
        response, _ = await both_paths(provider, fake_openai, Reply(text=text), request)
        assert response.tool_calls[0].name == json.loads(text)["name"]
        sent.append(fake_openai.requests[-1].body)

    instructions = {body["messages"][0]["content"] for body in sent}
    assert len(instructions) == 1
    assert all(f"- {t.name}:" in next(iter(instructions)) for t in tools)
    grammars = [body["response_format"]["schema"] for body in sent]
    assert [b["properties"]["name"]["const"] for b in grammars[0]["anyOf"]] == ["search", "read"]
    assert len(grammars[1]["anyOf"]) == 3
    assert grammars[2]["properties"]["name"] == {"const": "submit_answer"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "submit_answer", "arguments": {"text": "x"}}, grammars[0])
    directives = [body["messages"][-1] for body in sent]
    assert [d["role"] for d in directives] == ["user"] * 3  # its chatml keeps one system message
    assert [d["content"] for d in directives] == [
        "You must call one of these tools now: search or read.",
        "Call a tool when you need one; otherwise answer in plain text.",
        "You must call the tool submit_answer now.",
    ]


async def test_a_native_tools_endpoint_is_sent_only_the_allowed_tools(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider()
    request = ChatRequest(
        messages=_request().messages,
        tools=(SEARCH, READ, ANSWER),
        tool_choice=ToolChoice(ToolChoiceMode.REQUIRED, allowed=("search", "read")),
    )
    await both_paths(provider, fake_openai, Reply(text="thinking"), request)
    sent = fake_openai.requests[-1].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["search", "read"]
    assert sent["tool_choice"] == "required"
    assert all(
        m["role"] != "system" or "You can call" not in m["content"] for m in sent["messages"]
    )
