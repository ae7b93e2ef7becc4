"""The generic conversation model the gateway speaks; providers translate to and from it.

Domain code only: no grpc, no vendor SDK. `servicer.py` converts protobuf to these types and back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Role(Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class StopReason(Enum):
    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    CONTENT_FILTER = "content_filter"


class ToolChoiceMode(Enum):
    AUTO = "auto"
    REQUIRED = "required"
    NONE = "none"
    NAMED = "named"


@dataclass(frozen=True)
class ToolCall:
    """A tool call made by the assistant."""

    id: str
    """Provider-neutral id pairing the call with its result."""
    name: str
    arguments_json: str
    """The arguments object, serialised; may be invalid JSON from a weak model."""


@dataclass(frozen=True)
class Message:
    """One conversation message."""

    role: Role
    text: str = ""
    """Text (system/user/assistant) or the tool result content (tool)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Assistant only."""
    tool_call_id: str = ""
    """Tool only: the call this message answers."""
    is_error: bool = False
    """Tool only: the result is an error."""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object (integers already normalised from Struct doubles)."""
    parameters_tokens: int | None = None
    """Tokens of the schema as the caller sent it, measured once at the edge; None: estimated from
    `parameters` when needed."""


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str = ""
    """The tool to call when `mode` is NAMED."""
    allowed: tuple[str, ...] = ()
    """The tools that may be called this turn when fewer than the request's (empty: all). The
    others stay described where tools travel as text, so the prompt keeps its prefix."""


@dataclass(frozen=True)
class ChatRequest:
    """One model turn, provider-neutral."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    max_output_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    parallel_tool_calls: bool | None = None
    response_schema: dict[str, Any] | None = None
    """Structured output: the JSON schema the reply text must satisfy."""
    response_schema_name: str = ""
    top_logprobs: int | None = None
    """Report this many most likely first tokens of the reply (providers that can)."""

    @property
    def callable_tools(self) -> tuple[Tool, ...]:
        """The tools the model may call this turn: `tool_choice.allowed` of `tools`, or all."""
        allowed = self.tool_choice.allowed
        if not allowed:
            return self.tools
        return tuple(t for t in self.tools if t.name in allowed)


@dataclass
class Usage:
    input_tokens: int = 0
    """All input tokens, cache reads and writes included."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.cost_usd += other.cost_usd


@dataclass
class ChatResponse:
    """What one provider answered for one turn."""

    text: str
    tool_calls: list[ToolCall]
    stop_reason: StopReason
    usage: Usage
    model: str
    """Model name as the provider reported it."""
    context_window_exceeded: bool = False
    """The provider stopped because the context is full (its translator reports it with
    MAX_TOKENS); the chain turns such a reply into the overflow error (`ContextWindowExceeded`)."""
    first_token_logprobs: tuple[tuple[str, float], ...] = ()
    """(token, log-probability) of the most likely first tokens, when asked and reported."""


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    """Position of the call in the message."""
    id: str = ""
    """Set on the first delta of a call."""
    name: str = ""
    """Set on the first delta of a call."""
    arguments_delta: str = ""


@dataclass(frozen=True)
class Completed:
    """Last event of a successful stream: the whole turn, equal to the non-streamed response."""

    response: ChatResponse


StreamEvent = TextDelta | ToolCallDelta | Completed
