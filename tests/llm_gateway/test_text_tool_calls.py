"""Tool calls written as JSON in the text (`tool_calls: json_in_text`): read tolerantly from the
fake OpenAI server's replies, malformed ones kept so the caller sends them back as tool errors,
and the tools, past calls and results sent as text."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from services.llm_gateway.config import ProviderSettings
from services.llm_gateway.model import (
    ChatRequest,
    Message,
    Role,
    StopReason,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
)
from services.llm_gateway.providers.openai import OpenAIProvider, OpenAIQuirks
from services.llm_gateway.testing import FakeOpenAIServer, Reply
from services.llm_gateway.translate.text_tool_calls import read_calls
from tests.llm_gateway.conftest import both_paths

SEARCH = Tool("search", "Search the collection.", {"type": "object", "properties": {}})
ANSWER = Tool("submit_answer", "Answer.", {"type": "object", "properties": {}})
NAMES = ("search", "submit_answer")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tool": "search", "arguments": {"q": "x"}}', [("search", {"q": "x"})]),
        (
            'I will search.\n```json\n{"name": "search", "parameters": {"q": "x"}}\n```',
            [("search", {"q": "x"})],
        ),
        (
            '{"function": {"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}}',
            [("search", {"q": "x"})],
        ),
        (
            '[{"tool": "search", "arguments": {}}, '
            '{"tool": "submit_answer", "args": {"text": "t"}}]',
            [("search", {}), ("submit_answer", {"text": "t"})],
        ),
    ],
)
def test_calls_are_read_tolerantly_from_the_text(
    text: str, expected: list[tuple[str, object]]
) -> None:
    _, calls = read_calls(text, NAMES)
    assert [(c.name, json.loads(c.arguments_json)) for c in calls] == expected


def test_prose_around_a_call_stays_text_and_plain_answers_are_not_calls() -> None:
    prose, calls = read_calls('Let me look.\n{"tool": "search", "arguments": {}}', NAMES)
    assert prose == "Let me look."
    assert [c.name for c in calls] == ["search"]
    assert read_calls("The answer is {42}.", NAMES) == ("The answer is {42}.", [])
    assert read_calls('{"tool": "browse", "arguments": {}}', NAMES)[1] == []


def test_a_malformed_call_of_a_known_tool_keeps_its_raw_text_as_arguments() -> None:
    broken = '{"tool": "search", "arguments": {"q": "x"'
    _, calls = read_calls(f"```json\n{broken}\n```", NAMES)
    assert [c.name for c in calls] == ["search"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(calls[0].arguments_json)


def test_a_call_cut_off_mid_json_is_a_malformed_call_not_an_answer() -> None:
    _, calls = read_calls('{"tool": "search", "arguments": {"query": {"primary": ', NAMES)
    assert [c.name for c in calls] == ["search"]


def test_the_setting_is_openai_only() -> None:
    ProviderSettings(kind="openai", model="m", tool_calls="json_in_text")
    with pytest.raises(ValueError, match="openai providers only"):
        ProviderSettings(kind="anthropic", model="m", tool_calls="json_in_text")


async def test_the_provider_reads_a_call_from_text_on_both_paths(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider(quirks=OpenAIQuirks(tool_calls_in_text=True))
    request = ChatRequest(
        messages=(
            Message(Role.SYSTEM, "You are an agent."),
            Message(Role.USER, "find x"),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "search", '{"q": "a"}'),)),
            Message(Role.TOOL, "no results", tool_call_id="c1", is_error=True),
        ),
        tools=(SEARCH, ANSWER),
        tool_choice=ToolChoice(ToolChoiceMode.AUTO),
    )
    reply = Reply(
        text='Searching again.\n```json\n{"tool": "search", "arguments": {"q": "b"}}\n```'
    )
    response, _ = await both_paths(provider, fake_openai, reply, request)

    assert [(c.name, c.arguments_json) for c in response.tool_calls] == [("search", '{"q": "b"}')]
    assert response.text == "Searching again."
    assert response.stop_reason is StopReason.TOOL_USE
    sent = fake_openai.requests[-1].body
    assert "tools" not in sent
    assert "tool_choice" not in sent
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "system", "user", "assistant", "user", "system"]
    assert "search: Search the collection." in sent["messages"][1]["content"]
    assert sent["messages"][5]["content"] == (
        "Call a tool when you need one; otherwise answer in plain text."
    )
    assert sent["messages"][3]["content"] == '{"tool": "search", "arguments": {"q": "a"}}'
    assert sent["messages"][4]["content"] == "Tool result (error) for call c1:\nno results"


async def test_native_providers_still_send_tools(
    make_openai_provider: Callable[..., OpenAIProvider], fake_openai: FakeOpenAIServer
) -> None:
    provider = make_openai_provider()
    request = ChatRequest(messages=(Message(Role.USER, "find x"),), tools=(SEARCH,))
    response, _ = await both_paths(
        provider, fake_openai, Reply(text='{"tool": "search", "arguments": {}}'), request
    )
    assert response.tool_calls == []
    assert [t["function"]["name"] for t in fake_openai.requests[-1].body["tools"]] == ["search"]


def test_a_raw_newline_inside_a_string_is_read_and_sent_on_as_valid_json() -> None:
    """llama-cpp-python's JSON grammar lets a model put a raw newline in a string: the call is
    read anyway and its arguments come out as valid JSON (the newline escaped)."""
    _, calls = read_calls('{"name": "submit_answer", "arguments": {"text": "a\nb"}}', NAMES)
    assert [c.name for c in calls] == ["submit_answer"]
    assert json.loads(calls[0].arguments_json) == {"text": "a\nb"}
    assert "\n" not in calls[0].arguments_json
