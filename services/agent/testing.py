"""Public test doubles for the loop's model port, and builders of the tool calls a model makes.

`ScriptedModel` replays a queue of scripted turns (text, tool calls, or an exception such as
`ContextWindowExceeded`) and records every request it received; it can be gated on an
`asyncio.Event` so a test can hold a call open, and given a latency for benchmarks. The search
tool's double is `tests/agent/fake_search.py`: it decides filters with the search tool's own code,
which a module inside the agent service must not import.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from services.agent.messages import Role, ToolCall
from services.agent.ports import (
    ModelRequest,
    ModelResponse,
    StructuredRequest,
    StructuredResponse,
    TokenUsage,
)

_ids = itertools.count(1)
_WORD = re.compile(r"[a-z0-9]+")


def search_call(
    primary: str,
    *,
    variations: Sequence[str] = (),
    filter_groups: Sequence[dict[str, Any]] = (),
    strategy: str = "hybrid",
    limit: int = 10,
    call_id: str = "",
) -> ToolCall:
    """A `search` tool call with well-formed arguments."""
    arguments = {
        "query": {"primary": primary, "variations": list(variations)},
        "filter_groups": list(filter_groups),
        "limit": limit,
        "offset": 0,
        "retrieval_strategy": strategy,
    }
    return ToolCall(call_id or f"call_{next(_ids)}", "search", json.dumps(arguments))


def answer_call(text: str, citations: Sequence[str] = (), *, call_id: str = "") -> ToolCall:
    """A `submit_answer` tool call citing `citations` (result ids)."""
    arguments = {"text": text, "citations": [{"result_id": c} for c in citations]}
    return ToolCall(call_id or f"call_{next(_ids)}", "submit_answer", json.dumps(arguments))


def read_call(
    result_id: str, *, scope: str = "around", neighbours: int = 2, call_id: str = ""
) -> ToolCall:
    """A `read` tool call."""
    arguments = json.dumps({"result_id": result_id, "scope": scope, "neighbours": neighbours})
    return ToolCall(call_id or f"call_{next(_ids)}", "read", arguments)


def calculate_call(expression: str, *, call_id: str = "") -> ToolCall:
    """A `calculate` tool call."""
    arguments = json.dumps({"expression": expression})
    return ToolCall(call_id or f"call_{next(_ids)}", "calculate", arguments)


def ask_call(question: str, *, call_id: str = "") -> ToolCall:
    """An `ask_user` tool call."""
    arguments = json.dumps({"question": question})
    return ToolCall(call_id or f"call_{next(_ids)}", "ask_user", arguments)


def raw_call(name: str, arguments_json: str, *, call_id: str = "") -> ToolCall:
    """A tool call with arbitrary (possibly invalid) arguments."""
    return ToolCall(call_id or f"call_{next(_ids)}", name, arguments_json)


def turn(
    text: str = "", *calls: ToolCall, input_tokens: int = 100, output_tokens: int = 20
) -> ModelResponse:
    """One scripted model turn."""
    usage = TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    return ModelResponse(text=text, tool_calls=tuple(calls), usage=usage, provider="scripted")


Scripted = ModelResponse | BaseException


class ScriptExhausted(AssertionError):
    """The model was called more often than the script has turns."""


class ScriptedModel:
    """A `ModelClient` that replays scripted turns and records what it was asked."""

    def __init__(
        self,
        turns: Iterable[Scripted] = (),
        *,
        summaries: Iterable[str | BaseException] = (),
        context_window_tokens: int | None = 32_000,
        latency_s: float = 0.0,
        gate: asyncio.Event | None = None,
        constrained: bool = False,
        forced_calls: bool = False,
        kind: str = "scripted",
    ) -> None:
        self.turns: deque[Scripted] = deque(turns)
        self.kind = kind
        """What `provider_kind` answers (`extractive`: the offline provider, asked no passage)."""
        self.summaries: deque[str | BaseException] = deque(summaries)
        self.context_window_tokens = context_window_tokens
        self.constrained = constrained
        """What `enforces_tool_schemas` answers: the route holds tools to their schemas."""
        self.forced_calls = forced_calls
        """What `forces_tool_calls` answers: every reply is a call of an offered tool."""
        self.latency_s = latency_s
        self.gate = gate
        self.requests: list[ModelRequest] = []
        self.structured_requests: list[StructuredRequest] = []
        self.remaining_s: list[float | None] = []
        self.called = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.requests.append(request)
        self.remaining_s.append(remaining_s)
        await self._wait()
        if not self.turns:
            raise ScriptExhausted(f"no scripted turn left for call {len(self.requests)}")
        scripted = self.turns.popleft()
        if isinstance(scripted, BaseException):
            raise scripted
        return scripted

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        self.structured_requests.append(request)
        await self._wait()
        if not self.summaries:
            raise ScriptExhausted("no scripted structured output left")
        scripted = self.summaries.popleft()
        if isinstance(scripted, BaseException):
            raise scripted
        return StructuredResponse(json_text=scripted, usage=TokenUsage(50, 30))

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        return self.context_window_tokens

    async def enforces_tool_schemas(self, route: str, *, remaining_s: float | None) -> bool:
        return self.constrained

    async def forces_tool_calls(self, route: str, *, remaining_s: float | None) -> bool:
        return self.forced_calls

    async def provider_kind(self, route: str, *, remaining_s: float | None) -> str:
        return self.kind

    async def _wait(self) -> None:
        self.called.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class FunctionModel:
    """A `ModelClient` whose every turn is computed by a function of the request (a rule-based
    model): one instance serves any number of concurrent runs."""

    def __init__(
        self,
        respond: Callable[[ModelRequest], ModelResponse],
        *,
        context_window_tokens: int | None = 32_000,
        latency_s: float = 0.0,
        constrained: bool = False,
        forced_calls: bool = False,
        kind: str = "scripted",
    ) -> None:
        self.respond = respond
        self.kind = kind
        self.context_window_tokens = context_window_tokens
        self.latency_s = latency_s
        self.calls = 0
        self.constrained = constrained
        self.forced_calls = forced_calls

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.calls += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self.respond(request)

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        raise NotImplementedError("FunctionModel does not summarise")

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        return self.context_window_tokens

    async def enforces_tool_schemas(self, route: str, *, remaining_s: float | None) -> bool:
        return self.constrained

    async def forces_tool_calls(self, route: str, *, remaining_s: float | None) -> bool:
        return self.forced_calls

    async def provider_kind(self, route: str, *, remaining_s: float | None) -> str:
        return self.kind


_RESULT_ID = re.compile(r"^### \[([^\]]+)\]", re.MULTILINE)


def search_then_answer(searches: int = 1) -> Callable[[ModelRequest], ModelResponse]:
    """A rule: search `searches` times (the question as the query), then answer citing the first
    result of the last search."""

    def respond(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        query = request.messages[1].text.split("\n", 2)[1] if len(request.messages) > 1 else "q"
        offered = {t.name for t in request.callable_tools}
        if len(results) < searches and "search" in offered:
            again = f" {len(results) + 1}" if results else ""  # a repeated search is refused
            return turn(f"Searching ({len(results) + 1}).", search_call(query + again))
        cited = _RESULT_ID.findall(results[-1].text)[:1] if results else []
        return turn("Answering.", answer_call("The answer [1].", cited))

    return respond
