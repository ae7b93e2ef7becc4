"""Streaming a complete turn as deltas, for the offline providers (extractive, scripted)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from services.llm_gateway.model import (
    ChatResponse,
    Completed,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)

_CHUNK_CHARS = 48


async def stream_response(response: ChatResponse) -> AsyncIterator[StreamEvent]:
    """Text in word-aligned chunks, each tool call in a few argument pieces, then `Completed`."""
    for piece in _chunks(response.text):
        yield TextDelta(piece)
    for index, call in enumerate(response.tool_calls):
        pieces = _chunks(call.arguments_json)
        yield ToolCallDelta(
            index=index, id=call.id, name=call.name, arguments_delta=pieces[0] if pieces else ""
        )
        for piece in pieces[1:]:
            yield ToolCallDelta(index=index, arguments_delta=piece)
    yield Completed(response)


def _chunks(text: str) -> list[str]:
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + _CHUNK_CHARS)
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space if space > start else end
        chunks.append(text[start:end])
        start = end
    return chunks
