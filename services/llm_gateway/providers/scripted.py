"""The scripted provider: replays a conversation file, one assistant turn per request.

File (JSON or YAML): a list of turns, or `{turns: [...]}`. A turn is either an assistant reply

    {text: "...", tool_calls: [{id: c1, name: search, arguments: {...}}],
     stop_reason: tool_use, usage: {input_tokens: 12, output_tokens: 3}, latency_ms: 20}

or a fault raised instead of the reply that follows it

    {fault: retryable | rate_limited | fatal | caller_error | context_window_exceeded,
     message: "...", retry_after_s: 1.5, latency_ms: 20}

Which reply answers a request is decided by the request alone: the number of assistant messages
already in it. That makes replay stateless and safe for any number of concurrent conversations.
Faults are the one piece of state: each fault placed before reply k is raised once per process,
the first time(s) a request at position k arrives, so "429, then the reply" replays as recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    ProviderError,
    RateLimited,
    RetryableProviderError,
)
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Role,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
)
from services.llm_gateway.providers.offline_stream import stream_response
from services.llm_gateway.tokens import count_text_tokens, estimate_request_tokens

FAULT_KINDS = ("retryable", "rate_limited", "fatal", "caller_error", "context_window_exceeded")


@dataclass(frozen=True)
class ScriptedFault:
    """A provider error to raise instead of answering."""

    kind: str
    message: str = "scripted fault"
    retry_after_s: float | None = None
    latency_ms: float = 0.0

    def error(self) -> ProviderError:
        if self.kind == "retryable":
            return RetryableProviderError(self.message, status=503)
        if self.kind == "rate_limited":
            return RateLimited(self.message, status=429, retry_after_s=self.retry_after_s)
        if self.kind == "context_window_exceeded":
            return ContextWindowExceeded(self.message, status=400)
        return FatalProviderError(
            self.message,
            status=400 if self.kind == "caller_error" else 401,
            caller_error=self.kind == "caller_error",
        )


@dataclass(frozen=True)
class ScriptedTurn:
    """One assistant reply, with the faults to raise before it."""

    response: ChatResponse
    usage_given: bool
    """The file set usage; otherwise it is counted from the request (chars/4)."""
    latency_ms: float = 0.0
    faults: tuple[ScriptedFault, ...] = ()


@dataclass
class Conversation:
    """A parsed conversation file."""

    turns: list[ScriptedTurn] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Conversation:
        source = Path(path)
        text = source.read_text()
        data = json.loads(text) if source.suffix == ".json" else yaml.safe_load(text)
        return cls.parse(data, model=source.stem)

    @classmethod
    def parse(cls, data: Any, *, model: str = "scripted") -> Conversation:
        entries = data.get("turns", []) if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise ValueError("a conversation file holds a list of turns")
        turns: list[ScriptedTurn] = []
        pending: list[ScriptedFault] = []
        for number, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ValueError(f"turn {number}: must be a mapping")
            if "fault" in entry:
                pending.append(_fault(entry, number))
            else:
                turns.append(_turn(entry, number, model, tuple(pending)))
                pending = []
        if pending:
            raise ValueError("faults at the end of a conversation file precede no reply")
        return cls(turns=turns)


class ScriptedProvider:
    """See the module docstring."""

    kind = "scripted"

    def __init__(
        self,
        conversation: Conversation,
        *,
        name: str = "scripted",
        model: str = "scripted",
        context_window_tokens: int = 1_000_000,
    ) -> None:
        self._conversation = conversation
        self._name = name
        self._model = model
        self._context_window_tokens = context_window_tokens
        self._faults_raised: dict[int, int] = {}
        self.requests: list[ChatRequest] = []
        """Every request received, in order (for tests)."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window_tokens(self) -> int:
        return self._context_window_tokens

    async def generate(self, request: ChatRequest) -> ChatResponse:
        return await self._answer(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        response = await self._answer(request)
        async for event in stream_response(response):
            yield event

    async def aclose(self) -> None:
        return None

    async def _answer(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        position = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        if position >= len(self._conversation.turns):
            raise FatalProviderError(
                f"the script has {len(self._conversation.turns)} turns; "
                f"no turn {position + 1} to replay",
            )
        turn = self._conversation.turns[position]
        raised = self._faults_raised.get(position, 0)
        if raised < len(turn.faults):
            self._faults_raised[position] = raised + 1
            fault = turn.faults[raised]
            await _pause(fault.latency_ms)
            raise fault.error()
        await _pause(turn.latency_ms)
        return _copy(turn, request)


def _copy(turn: ScriptedTurn, request: ChatRequest) -> ChatResponse:
    original = turn.response
    usage = Usage(**vars(original.usage))
    if not turn.usage_given:
        usage.input_tokens = estimate_request_tokens(request)
    return ChatResponse(
        text=original.text,
        tool_calls=list(original.tool_calls),
        stop_reason=original.stop_reason,
        usage=usage,
        model=original.model,
        context_window_exceeded=original.context_window_exceeded,
    )


async def _pause(latency_ms: float) -> None:
    if latency_ms > 0:
        await asyncio.sleep(latency_ms / 1000)


def _fault(entry: dict[str, Any], number: int) -> ScriptedFault:
    kind = entry["fault"]
    if kind not in FAULT_KINDS:
        raise ValueError(f"turn {number}: fault must be one of {', '.join(FAULT_KINDS)}")
    return ScriptedFault(
        kind=kind,
        message=str(entry.get("message", f"scripted {kind}")),
        retry_after_s=entry.get("retry_after_s"),
        latency_ms=float(entry.get("latency_ms", 0)),
    )


def _turn(
    entry: dict[str, Any], number: int, model: str, faults: tuple[ScriptedFault, ...]
) -> ScriptedTurn:
    text = str(entry.get("text", ""))
    calls = [
        _tool_call(call, number, index) for index, call in enumerate(entry.get("tool_calls", []))
    ]
    default_stop = "tool_use" if calls else "end_turn"
    usage_data = entry.get("usage")
    usage = Usage(**usage_data) if isinstance(usage_data, dict) else Usage()
    if not usage_data:
        usage.output_tokens = count_text_tokens(text + "".join(c.arguments_json for c in calls))
    response = ChatResponse(
        text=text,
        tool_calls=calls,
        stop_reason=StopReason(entry.get("stop_reason", default_stop)),
        usage=usage,
        model=str(entry.get("model", model)),
        context_window_exceeded=bool(entry.get("context_window_exceeded", False)),
    )
    return ScriptedTurn(
        response=response,
        usage_given=bool(usage_data),
        latency_ms=float(entry.get("latency_ms", 0)),
        faults=faults,
    )


def _tool_call(call: dict[str, Any], number: int, index: int) -> ToolCall:
    arguments = call.get("arguments", {})
    if "arguments_json" in call:
        arguments_json = str(call["arguments_json"])
    else:
        arguments_json = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(
        id=str(call.get("id", f"scripted_{number}_{index}")),
        name=str(call["name"]),
        arguments_json=arguments_json,
    )
