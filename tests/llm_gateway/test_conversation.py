"""Conversation rules shared by every translation: validation of the rules spanning messages names
the bad field; tool-call ids are made safe and unique, the same way for a call and its result."""

from __future__ import annotations

import pytest

from services.llm_gateway.conversation import (
    ToolCallIds,
    sanitize_id,
    validate_conversation,
)
from services.llm_gateway.errors import InvalidConversation
from services.llm_gateway.model import (
    ChatRequest,
    Message,
    Role,
    Tool,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
)

USER = Message(Role.USER, "question")
SEARCH = Tool("search", "Search.", {"type": "object", "properties": {"q": {"type": "string"}}})


def _call(call_id: str = "c1", name: str = "search") -> ToolCall:
    return ToolCall(call_id, name, "{}")


def _invalid(request: ChatRequest) -> InvalidConversation:
    with pytest.raises(InvalidConversation) as raised:
        validate_conversation(request)
    return raised.value


def test_a_well_formed_tool_conversation_passes() -> None:
    validate_conversation(
        ChatRequest(
            messages=(
                Message(Role.SYSTEM, "sys"),
                USER,
                Message(Role.ASSISTANT, "", tool_calls=(_call("a"), _call("b"))),
                Message(Role.TOOL, "ra", tool_call_id="a"),
                Message(Role.USER, "and also"),
                Message(Role.TOOL, "rb", tool_call_id="b", is_error=True),
                Message(Role.ASSISTANT, "done"),
                Message(Role.SYSTEM, "late system"),
                Message(Role.USER, "next"),
            ),
            tools=(SEARCH,),
            tool_choice=ToolChoice(ToolChoiceMode.NAMED, "search"),
        )
    )


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ((), "messages"),
        ((Message(Role.SYSTEM, "only system"),), "messages"),
        ((Message(Role.ASSISTANT, "hi"), USER), "messages[0].role"),
        ((Message(Role.USER, "  "),), "messages[0].text"),
        ((USER, Message(Role.TOOL, "orphan", tool_call_id="nope")), "messages[1].tool_call_id"),
        (
            (USER, Message(Role.ASSISTANT, tool_calls=(_call("a"),)), Message(Role.USER, "x")),
            "messages[1].tool_calls[0].id",
        ),
        (
            (
                USER,
                Message(Role.ASSISTANT, tool_calls=(_call("a"),)),
                Message(Role.ASSISTANT, "moved on"),
                Message(Role.TOOL, "late", tool_call_id="a"),
            ),
            "messages[1].tool_calls[0].id",
        ),
        (
            (
                USER,
                Message(Role.ASSISTANT, tool_calls=(_call("a"),)),
                Message(Role.TOOL, "r", tool_call_id="a"),
                Message(Role.TOOL, "again", tool_call_id="a"),
            ),
            "messages[3].tool_call_id",
        ),
        (
            (USER, Message(Role.ASSISTANT, tool_calls=(_call("a"), _call("a")))),
            "messages[1].tool_calls[1].id",
        ),
    ],
    ids=[
        "empty",
        "system-only",
        "assistant-first",
        "empty-user-text",
        "result-without-call",
        "call-without-result",
        "result-after-next-assistant",
        "two-results-for-one-call",
        "duplicate-id-in-one-message",
    ],
)
def test_malformed_conversations_name_the_field(messages: tuple[Message, ...], field: str) -> None:
    assert _invalid(ChatRequest(messages=messages)).field == field


def test_ids_are_sanitised_unique_per_turn_and_mapped_back() -> None:
    messages = (
        USER,
        Message(Role.ASSISTANT, tool_calls=(_call("functions.search:0"), _call("x/y"))),
        Message(Role.TOOL, "r", tool_call_id="functions.search:0"),
        Message(Role.TOOL, "r", tool_call_id="x/y"),
        Message(Role.ASSISTANT, tool_calls=(_call("functions.search:0"),)),
        Message(Role.TOOL, "r", tool_call_id="functions.search:0"),
    )
    ids = ToolCallIds(messages)
    assert ids.for_call(1, "functions.search:0") == "functions_search_0"
    assert ids.for_result(2, "functions.search:0") == "functions_search_0"
    assert ids.for_call(1, "x/y") == ids.for_result(3, "x/y") == "x_y"
    assert ids.for_call(4, "functions.search:0") == "functions_search_0_2"
    assert ids.for_result(5, "functions.search:0") == "functions_search_0_2"
    assert ids.original("functions_search_0_2") == "functions.search:0"
    assert ids.original("toolu_new") == "toolu_new"


def test_sanitize_id_keeps_safe_characters_only() -> None:
    assert sanitize_id("chatcmpl-tool-abc_123") == "chatcmpl-tool-abc_123"
    assert sanitize_id("a.b:c d/é") == "a_b_c_d__"
    assert sanitize_id("") == "call"
