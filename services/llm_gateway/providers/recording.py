"""Record mode: wrap any provider and write what it answers as a script file
(`scripted_reply.ScriptedReplies`).

Each reply is stored at its position (the number of assistant messages in the request), preceded by
the faults the provider raised at that position, so `ScriptedProvider` replays the run exactly and
a fake OpenAI or Anthropic server serves the same file in order. The file (JSON for `.json`, YAML
otherwise) is rewritten after every turn; record one conversation at a time (a second conversation
overwrites the positions it shares with the first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from services.llm_gateway.errors import ProviderError
from services.llm_gateway.model import ChatRequest, ChatResponse, Completed, Role, StreamEvent
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.scripted_reply import (
    CONTEXT_OVERFLOW_STOP,
    Reply,
    ScriptedReplies,
    ScriptedToolCall,
    ScriptedUsage,
    scripted_error,
)
from services.llm_gateway.tokens import estimate_input_tokens


class RecordingProvider:
    """A provider that passes everything through to `inner` and records it to `path`."""

    def __init__(self, inner: Provider, path: str | Path) -> None:
        self._inner = inner
        self._path = Path(path)
        self._replies: dict[int, Reply] = {}
        self._faults: dict[int, list[Reply]] = {}

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def kind(self) -> str:
        return self._inner.kind

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def enforces_tool_schemas(self) -> bool:
        return bool(getattr(self._inner, "enforces_tool_schemas", False))

    @property
    def forces_tool_calls(self) -> bool:
        return bool(getattr(self._inner, "forces_tool_calls", False))

    @property
    def context_window_tokens(self) -> int:
        return self._inner.context_window_tokens

    def estimate_input_tokens(self, request: ChatRequest) -> int:
        return estimate_input_tokens(self._inner, request)

    async def generate(self, request: ChatRequest) -> ChatResponse:
        position = _position(request)
        try:
            response = await self._inner.generate(request)
        except ProviderError as error:
            self._record_fault(position, error)
            raise
        self._record_reply(position, response)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        position = _position(request)
        try:
            async for event in self._inner.stream(request):
                if isinstance(event, Completed):
                    self._record_reply(position, event.response)
                yield event
        except ProviderError as error:
            self._record_fault(position, error)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _record_reply(self, position: int, response: ChatResponse) -> None:
        self._replies[position] = recorded_reply(response)
        self._write()

    def _record_fault(self, position: int, error: ProviderError) -> None:
        fault = Reply(error=scripted_error(error, provider=self._inner.name))
        self._faults.setdefault(position, []).append(fault)
        self._write()

    def _write(self) -> None:
        replies: list[Reply] = []
        position = 0
        while position in self._replies:
            replies.extend(self._faults.get(position, []))
            replies.append(self._replies[position])
            position += 1
        ScriptedReplies(replies).write(self._path)


def recorded_reply(response: ChatResponse) -> Reply:
    """`response` as a scripted reply that replays to an equal response."""
    usage = response.usage
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    overflow = response.context_window_exceeded
    return Reply(
        text=response.text,
        tool_calls=[ScriptedToolCall(c.id, c.name, c.arguments_json) for c in response.tool_calls],
        stop_reason=CONTEXT_OVERFLOW_STOP if overflow else response.stop_reason.value,
        usage=ScriptedUsage(
            input_tokens=usage.input_tokens - cached,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model=response.model,
    )


def _position(request: ChatRequest) -> int:
    return sum(1 for m in request.messages if m.role is Role.ASSISTANT)
