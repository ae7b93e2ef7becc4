"""The scripted provider: replays a script file (`scripted_reply.ScriptedReplies`), one reply per
conversation position.

Which reply answers a request is decided by the request alone: the number of assistant messages
already in it. Reply k of the script is the k-th reply that is not a fault (`error`); the faults
listed before it are raised, one per request, the first times a request at position k arrives, so
"429, then the reply" replays as recorded (and as a fake server serves the same file). Positions
past the script get `default`, after any faults listed last. Faults are the one piece of state:
replay is otherwise stateless and safe for any number of concurrent conversations.

A fault becomes the domain error the real providers' classifier gives for its HTTP status, message,
code and headers (`scripted_reply.provider_error`). `delay_s` pauses before answering. Streamed,
`stream_error` ends the stream in its error, and `cut_after_events`/`abort_after_events` in a
truncated-stream error, after the reply's deltas; the other stream settings only shape what a fake
server sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from services.llm_gateway.classify import truncated_stream
from services.llm_gateway.errors import FatalProviderError, ProviderError
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Completed,
    Role,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
)
from services.llm_gateway.providers.offline_stream import stream_response
from services.llm_gateway.scripted_reply import (
    CONTEXT_OVERFLOW_STOP,
    STOP_REASONS,
    Reply,
    ScriptedError,
    ScriptedReplies,
    provider_error,
)
from services.llm_gateway.tokens import count_text_tokens, estimate_request_tokens


@dataclass(frozen=True)
class _Position:
    """The faults raised at one position, then its reply (None: the script has none)."""

    faults: tuple[ScriptedError, ...]
    reply: Reply | None
    fault_delays: tuple[float, ...]


class ScriptedProvider:
    """See the module docstring."""

    kind = "scripted"

    def __init__(
        self,
        script: ScriptedReplies,
        *,
        name: str = "scripted",
        model: str = "scripted",
        context_window_tokens: int = 1_000_000,
    ) -> None:
        self._positions, self._past_end = _positions(script)
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
        _, response = await self._answer(request)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        reply, response = await self._answer(request)
        failure = self._stream_failure(reply)
        async for event in stream_response(response):
            if isinstance(event, Completed) and failure is not None:
                raise failure
            yield event

    async def aclose(self) -> None:
        return None

    async def _answer(self, request: ChatRequest) -> tuple[Reply, ChatResponse]:
        self.requests.append(request)
        position = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        if position < len(self._positions):
            scripted = self._positions[position]
        elif position == len(self._positions):
            scripted = self._past_end
        else:
            scripted = _Position((), self._past_end.reply, ())
        raised = self._faults_raised.get(position, 0)
        if raised < len(scripted.faults):
            self._faults_raised[position] = raised + 1
            await _pause(scripted.fault_delays[raised])
            raise provider_error(scripted.faults[raised], provider=self._name)
        reply = scripted.reply
        if reply is None:
            raise FatalProviderError(
                f"{self._name}: the script has {len(self._positions)} replies and no default; "
                f"no reply {position + 1} to replay",
            )
        await _pause(reply.delay_s)
        if reply.error is not None:
            raise provider_error(reply.error, provider=self._name)
        return reply, self._response(reply, request)

    def _response(self, reply: Reply, request: ChatRequest) -> ChatResponse:
        calls = [ToolCall(c.id, c.name, c.arguments) for c in reply.tool_calls]
        stop = reply.stop_reason or ("tool_use" if calls else "end_turn")
        overflow = stop == CONTEXT_OVERFLOW_STOP
        if reply.usage is None:
            spoken = reply.text + "".join(c.arguments_json for c in calls)
            usage = Usage(estimate_request_tokens(request), count_text_tokens(spoken))
        else:
            cached = reply.usage.cache_read_tokens + reply.usage.cache_write_tokens
            usage = Usage(
                input_tokens=reply.usage.input_tokens + cached,
                output_tokens=reply.usage.output_tokens,
                cache_read_tokens=reply.usage.cache_read_tokens,
                cache_write_tokens=reply.usage.cache_write_tokens,
            )
        return ChatResponse(
            text=reply.text,
            tool_calls=calls,
            stop_reason=StopReason.MAX_TOKENS if overflow else StopReason(stop),
            usage=usage,
            model=reply.model or self._model,
            context_window_exceeded=overflow,
        )

    def _stream_failure(self, reply: Reply) -> ProviderError | None:
        if reply.stream_error is not None:
            return provider_error(reply.stream_error, provider=self._name)
        if reply.cut_after_events is not None or reply.abort_after_events is not None:
            return truncated_stream(self._name, "its end")
        return None


def _positions(script: ScriptedReplies) -> tuple[list[_Position], _Position]:
    """The script by position, and what answers the first position past it."""
    positions: list[_Position] = []
    pending: list[Reply] = []
    for number, reply in enumerate(script.replies):
        if reply.is_fault:
            pending.append(reply)
            continue
        _check_stop_reason(reply, f"replies[{number}]")
        positions.append(_faults_then(pending, reply))
        pending = []
    if script.default is not None:
        _check_stop_reason(script.default, "default")
    return positions, _faults_then(pending, script.default)


def _faults_then(faults: Sequence[Reply], reply: Reply | None) -> _Position:
    return _Position(
        faults=tuple(f.error for f in faults if f.error is not None),
        reply=reply,
        fault_delays=tuple(f.delay_s for f in faults),
    )


def _check_stop_reason(reply: Reply, where: str) -> None:
    if reply.stop_reason and reply.stop_reason not in (*STOP_REASONS, CONTEXT_OVERFLOW_STOP):
        raise ValueError(
            f"{where}: the scripted provider replays the stop reasons "
            f"{', '.join(STOP_REASONS)}, {CONTEXT_OVERFLOW_STOP}; not {reply.stop_reason!r}"
        )


async def _pause(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)
