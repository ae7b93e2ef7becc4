"""The generic conversation the loop keeps: messages with text, tool calls and tool results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

CHARS_PER_TOKEN = 4


class Role(Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ToolCall:
    """A tool call made by the model."""

    id: str
    """Pairs the call with its tool result."""
    name: str
    arguments_json: str
    """The arguments object, serialised; may be invalid JSON."""


@dataclass(frozen=True)
class Message:
    """One conversation message."""

    role: Role
    text: str = ""
    """Text (system, user, assistant) or the tool result (tool)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Assistant only."""
    tool_call_id: str = ""
    """Tool only: the call this message answers."""
    is_error: bool = False
    """Tool only: the result is an error the model should correct."""
    step: int = 0
    """Assistant only: the step (model turn) that wrote it; its record is `records.StepRecord`."""

    @property
    def chars(self) -> int:
        calls = sum(len(c.name) + len(c.arguments_json) + len(c.id) for c in self.tool_calls)
        return len(self.text) + calls

    def with_text(self, text: str) -> Message:
        return replace(self, text=text)


def system(text: str) -> Message:
    return Message(Role.SYSTEM, text)


def user(text: str) -> Message:
    return Message(Role.USER, text)


def assistant(text: str, tool_calls: Sequence[ToolCall] = (), *, step: int = 0) -> Message:
    return Message(Role.ASSISTANT, text, tuple(tool_calls), step=step)


def tool_result(call_id: str, text: str, *, is_error: bool = False) -> Message:
    return Message(Role.TOOL, text, tool_call_id=call_id, is_error=is_error)


def total_chars(messages: Sequence[Message]) -> int:
    return sum(m.chars for m in messages)


def estimate_tokens(chars: int) -> int:
    """Tokens for `chars` characters at the usual four characters a token (rounded up)."""
    return -(-chars // CHARS_PER_TOKEN)


def unpaired_calls(messages: Sequence[Message]) -> list[str]:
    """Ids of tool calls without a result and of results without a call; empty when paired."""
    called = [c.id for m in messages for c in m.tool_calls]
    answered = [m.tool_call_id for m in messages if m.role is Role.TOOL]
    return [i for i in called if i not in answered] + [i for i in answered if i not in called]
