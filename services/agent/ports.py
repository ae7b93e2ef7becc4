"""What the loop needs from the outside world, and nothing more: a model and a search tool.

The gRPC implementations live in `gateway_client.py` and `search_tool_client.py`; tests use the
doubles in `testing.py` and `tests/agent/fake_search.py`. Failures are `services.common.errors`
exceptions, except an overflowing context: `ContextWindowExceeded`.
`remaining_s` is the caller's time left, passed downstream as the call's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from services.agent.filters import CallerFilter
from services.agent.messages import Message, ToolCall
from services.agent.search import (
    CollectionInfo,
    CountRequest,
    DocumentChunks,
    DocumentCount,
    ReadRequest,
    SearchPage,
    SearchRequest,
    WebPage,
)


class ContextWindowExceeded(Exception):
    """The model's context window cannot hold the conversation: compact and retry."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["auto", "required", "named"] = "auto"
    name: str = ""
    """The tool the model must call when `mode` is named."""
    allowed: tuple[str, ...] = ()
    """The tools the model may call this turn when fewer than the request's (empty: all)."""


@dataclass(frozen=True)
class ModelRequest:
    """One model turn."""

    route: str
    messages: tuple[Message, ...]
    """System prompt first, then the conversation."""
    tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    temperature: float | None = None
    """Passed to providers that support it; None: the provider's default."""
    seed: int | None = None
    """Passed to providers that support it; None: none."""
    max_output_tokens: int | None = None
    """The most tokens of the reply; None: the route's provider's own bound."""
    top_logprobs: int | None = None
    """Ask for this many most likely first tokens of the reply (providers that report them)."""

    @property
    def callable_tools(self) -> tuple[ToolSpec, ...]:
        """The tools the model may call this turn (`tool_choice.allowed` of `tools`, or all)."""
        allowed = self.tool_choice.allowed
        return tuple(t for t in self.tools if not allowed or t.name in allowed)


@dataclass
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    """What the call cost, when the gateway priced it (0: not priced)."""

    def add_tokens(self, other: TokenUsage) -> None:
        """Count `other`'s tokens in these (not its cost: the run counts cost apart)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    def add(self, other: TokenUsage) -> None:
        """Count `other`'s tokens and its cost in these (a call beside the run's turns)."""
        self.add_tokens(other)
        self.cost_usd += other.cost_usd


@dataclass(frozen=True)
class ModelResponse:
    """The model's turn: reasoning text and tool calls."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    provider: str = ""
    provider_kind: str = ""
    """openai, anthropic, extractive or scripted (empty: not reported)."""
    model: str = ""
    fallback_reason: str = ""
    """Set when an earlier provider of the route failed or was skipped: which, and why."""
    first_token_logprobs: tuple[tuple[str, float], ...] = ()
    """(token, log-probability) of the most likely first tokens, when asked and reported."""


@dataclass(frozen=True)
class StructuredRequest:
    route: str
    messages: tuple[Message, ...]
    schema: dict[str, Any]
    schema_name: str


@dataclass(frozen=True)
class StructuredResponse:
    json_text: str
    """JSON that validates against the schema."""
    usage: TokenUsage = field(default_factory=TokenUsage)


class ModelClient(Protocol):
    """The LLM gateway, as the loop uses it."""

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        """One turn; raises `ContextWindowExceeded` when the conversation does not fit."""
        ...

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse: ...

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        """Tokens the route's first model holds, or None when unknown."""
        ...

    async def enforces_tool_schemas(self, route: str, *, remaining_s: float | None) -> bool:
        """Whether the route's first model is held to its tools' schemas (tool calls forced by a
        JSON schema, or strict schemas): an `enum` in a tool's parameters is then a hard
        constraint, so the loop offers `submit_answer` with the citable ids as one."""
        ...

    async def forces_tool_calls(self, route: str, *, remaining_s: float | None) -> bool:
        """Whether every reply of the route's first model is a call of an offered tool (a grammar
        forces it): what a turn offers is then what the model does, so the loop makes a FAST
        run's first turn offer `search` alone."""
        ...

    async def provider_kind(self, route: str, *, remaining_s: float | None) -> str:
        """The kind of the route's first provider (openai, anthropic, extractive, scripted; empty
        when unknown): the offline `extractive` one quotes search results and writes no free
        text, so the search tool does not ask it for a passage (`loop.expand_queries`)."""
        ...


class SearchClient(Protocol):
    """The search tool, as the loop uses it."""

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        """Raises `InvalidArgument` (with violations) for a filter the search tool rejects."""
        ...

    async def get_collection(
        self,
        name: str,
        *,
        caller_filter: CallerFilter | None = None,
        remaining_s: float | None,
    ) -> CollectionInfo:
        """What the collection holds — under `caller_filter`, only what it lets its holder see.
        Raises `NotFound` for an unknown collection, `InvalidArgument` naming
        `caller_filter.…` for a filter the search tool rejects."""
        ...

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        """Raises `NotFound` when the document has no chunk inside the caller's filter."""
        ...

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        """Raises `InvalidArgument` (with violations) for a filter or breakdown it rejects."""
        ...

    async def web_search(self, query: str, limit: int, *, remaining_s: float | None) -> WebPage:
        """The search tool's `WebSearch` (the web, not a collection). Raises `FailedPrecondition`
        when no provider is configured, `PermissionDenied` for a caller whose key may not search
        the web, `Unavailable` when every provider failed, `InvalidArgument` for a bad query."""
        ...
