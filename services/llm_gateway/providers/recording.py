"""Record mode: wrap any provider and write what it answers as a scripted conversation file.

Each reply is stored at its position (the number of assistant messages in the request), preceded by
the faults the provider raised at that position, so `ScriptedProvider` replays the run exactly. The
file (JSON, or YAML for `.yaml`/`.yml`) is rewritten after every turn; record one conversation at a
time (a second conversation overwrites the positions it shares with the first).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    ProviderError,
    RateLimited,
)
from services.llm_gateway.model import ChatRequest, ChatResponse, Completed, Role, StreamEvent
from services.llm_gateway.providers.base import Provider


class RecordingProvider:
    """A provider that passes everything through to `inner` and records it to `path`."""

    def __init__(self, inner: Provider, path: str | Path) -> None:
        self._inner = inner
        self._path = Path(path)
        self._replies: dict[int, dict[str, Any]] = {}
        self._faults: dict[int, list[dict[str, Any]]] = {}

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
    def context_window_tokens(self) -> int:
        return self._inner.context_window_tokens

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
        self._replies[position] = reply_to_dict(response)
        self._write()

    def _record_fault(self, position: int, error: ProviderError) -> None:
        self._faults.setdefault(position, []).append(fault_to_dict(error))
        self._write()

    def _write(self) -> None:
        turns: list[dict[str, Any]] = []
        position = 0
        while position in self._replies:
            turns.extend(self._faults.get(position, []))
            turns.append(self._replies[position])
            position += 1
        document = {"turns": turns}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        if self._path.suffix in (".yaml", ".yml"):
            self._path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
        else:
            self._path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def reply_to_dict(response: ChatResponse) -> dict[str, Any]:
    """A reply in the conversation-file format."""
    return {
        "text": response.text,
        "tool_calls": [
            {"id": call.id, "name": call.name, **_arguments(call.arguments_json)}
            for call in response.tool_calls
        ],
        "stop_reason": response.stop_reason.value,
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "cache_read_tokens": response.usage.cache_read_tokens,
            "cache_write_tokens": response.usage.cache_write_tokens,
        },
        "model": response.model,
        "context_window_exceeded": response.context_window_exceeded,
    }


def fault_to_dict(error: ProviderError) -> dict[str, Any]:
    """A provider error in the conversation-file format."""
    if isinstance(error, ContextWindowExceeded):
        kind = "context_window_exceeded"
    elif isinstance(error, RateLimited):
        kind = "rate_limited"
    elif isinstance(error, FatalProviderError):
        kind = "caller_error" if error.caller_error else "fatal"
    else:
        kind = "retryable"
    fault: dict[str, Any] = {"fault": kind, "message": error.message}
    if error.retry_after_s is not None:
        fault["retry_after_s"] = error.retry_after_s
    return fault


def _arguments(arguments_json: str) -> dict[str, Any]:
    """Arguments as an object when they parse; else verbatim, so replay is byte-identical."""
    try:
        parsed = json.loads(arguments_json)
    except json.JSONDecodeError:
        return {"arguments_json": arguments_json}
    if json.dumps(parsed, ensure_ascii=False) == arguments_json and isinstance(parsed, dict):
        return {"arguments": parsed}
    return {"arguments_json": arguments_json}


def _position(request: ChatRequest) -> int:
    return sum(1 for m in request.messages if m.role is Role.ASSISTANT)
