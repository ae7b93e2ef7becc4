"""Generic `ChatRequest` ⇄ Anthropic Messages.

* Only the leading system messages become `system` (a later one stays in place as user text, so
  the cached prefix is not broken); with prompt caching the last system block and the last tool
  carry `cache_control: ephemeral`.
* Consecutive user/tool messages merge into one user turn, `tool_result` blocks first in call
  order, then text; consecutive assistant messages merge; empty text blocks are never sent.
* `max_tokens` is always sent: the request's, else the model default, clamped so that it plus the
  estimated input (`tokens.py`, the estimate the chain skips providers by) fits the context window.
* `temperature` and `seed` are not sent: the Messages API version the SDK speaks has neither.
* Structured output is a forced single tool whose input schema is the requested schema; its input
  comes back as the response text (JSON).
* Tool arguments come back as JSON text: re-serialised when valid (so the streamed and the
  non-streamed turn are equal), exactly as sent when not (the caller answers with an error result).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from anthropic.types import (
    InputJSONDelta,
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    ToolUseBlock,
)
from anthropic.types import TextDelta as AnthropicTextDelta

from services.llm_gateway.classify import truncated_stream
from services.llm_gateway.conversation import (
    ToolCallIds,
    Turn,
    group_turns,
    leading_system_texts,
    normalise_arguments,
    object_schema,
    parse_arguments,
    structured_output_name,
    unwrap_structured,
)
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Role,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolChoiceMode,
    Usage,
)
from services.llm_gateway.tokens import estimate_request_tokens

CACHE_CONTROL = {"type": "ephemeral"}
STRUCTURED_DESCRIPTION = "Give the final answer by calling this tool with the requested JSON."

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "pause_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.CONTENT_FILTER,
}


@dataclass(frozen=True)
class StructuredTool:
    """The forced tool standing in for a response schema."""

    name: str
    wrapped: bool
    """The schema is not an object, so it sits under `value` of the tool input."""


@dataclass
class AnthropicRequest:
    """The keyword arguments of `messages.create` and what reading the answer needs."""

    params: dict[str, Any]
    ids: ToolCallIds
    structured: StructuredTool | None = None


def to_anthropic_request(
    request: ChatRequest,
    *,
    model: str,
    default_max_output_tokens: int,
    context_window_tokens: int,
    prompt_caching: bool,
) -> AnthropicRequest:
    """The `messages.create` arguments for `request` (without `stream`)."""
    ids = ToolCallIds(request.messages)
    system, start = leading_system_texts(request.messages)
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_output_tokens(request, default_max_output_tokens, context_window_tokens),
        "messages": [_turn(turn) for turn in group_turns(request.messages, start, ids)],
    }
    if system:
        params["system"] = _cached([{"type": "text", "text": t} for t in system], prompt_caching)
    wire = AnthropicRequest(params, ids)
    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in request.callable_tools
    ]
    tool_choice = _tool_choice(request)
    if request.response_schema is not None:
        wire.structured, tool = _structured_tool(request, request.response_schema)
        tools.append(tool)
        tool_choice = {"type": "tool", "name": tool["name"], "disable_parallel_tool_use": True}
    if tools:
        params["tools"] = _cached(tools, prompt_caching)
        params["tool_choice"] = tool_choice
    return wire


def max_output_tokens(request: ChatRequest, default: int, context_window_tokens: int) -> int:
    """The requested (or default) output budget, clamped to what the window leaves."""
    wanted = request.max_output_tokens or default
    room = context_window_tokens - estimate_request_tokens(request)
    return max(1, min(wanted, room))


def _cached(blocks: list[dict[str, Any]], prompt_caching: bool) -> list[dict[str, Any]]:
    if prompt_caching and blocks:
        blocks[-1] = {**blocks[-1], "cache_control": CACHE_CONTROL}
    return blocks


def _turn(turn: Turn) -> dict[str, Any]:
    texts = [{"type": "text", "text": text} for _, text in turn.texts]
    if turn.role is Role.ASSISTANT:
        calls = [
            {
                "type": "tool_use",
                "id": sent_id,
                "name": call.name,
                "input": parse_arguments(call.arguments_json) or {},
            }
            for call, sent_id in turn.calls
        ]
        return {"role": "assistant", "content": texts + calls}
    results = [_tool_result(r.message.text, r.sent_id, r.message.is_error) for r in turn.results]
    return {"role": "user", "content": results + texts}


def _tool_result(text: str, sent_id: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": sent_id}
    if text:
        block["content"] = text
    if is_error:
        block["is_error"] = True
    return block


def _tool_choice(request: ChatRequest) -> dict[str, Any]:
    choice = request.tool_choice
    mapped: dict[str, Any] = {
        ToolChoiceMode.AUTO: {"type": "auto"},
        ToolChoiceMode.REQUIRED: {"type": "any"},
        ToolChoiceMode.NONE: {"type": "none"},
        ToolChoiceMode.NAMED: {"type": "tool", "name": choice.name},
    }[choice.mode]
    if request.parallel_tool_calls is False and choice.mode is not ToolChoiceMode.NONE:
        mapped["disable_parallel_tool_use"] = True
    return mapped


def _structured_tool(
    request: ChatRequest, schema: dict[str, Any]
) -> tuple[StructuredTool, dict[str, Any]]:
    name = structured_output_name(request)
    schema, wrapped = object_schema(schema)
    tool = {"name": name, "description": STRUCTURED_DESCRIPTION, "input_schema": schema}
    return StructuredTool(name, wrapped), tool


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    """Text pieces, or raw argument JSON pieces."""
    call_position: int | None = None


@dataclass
class _Draft:
    """A turn as read so far, streamed or not."""

    model: str
    blocks: list[_Block] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0

    def read_usage(self, usage: Any) -> None:
        """Take the counts a usage object carries (a stream's later counts replace earlier)."""
        for name, attribute in (
            ("input_tokens", "input_tokens"),
            ("cache_read_tokens", "cache_read_input_tokens"),
            ("cache_write_tokens", "cache_creation_input_tokens"),
            ("output_tokens", "output_tokens"),
        ):
            value = getattr(usage, attribute, None)
            if value is not None:
                setattr(self, name, value)


def from_message(message: Message, wire: AnthropicRequest, *, model: str) -> ChatResponse:
    """The generic response for a non-streamed message."""
    draft = _Draft(model=message.model or model, stop_reason=message.stop_reason)
    draft.read_usage(message.usage)
    for block in message.content:
        if isinstance(block, TextBlock):
            draft.blocks.append(_Block("text", parts=[block.text]))
        elif isinstance(block, ToolUseBlock):
            raw = block.input if isinstance(block.input, str) else json.dumps(block.input)
            draft.blocks.append(_Block("tool_use", block.id, block.name, [raw]))
    return _response(draft, wire)


class AnthropicStreamReader:
    """Reads one stream of events; `finish()` gives the response once `message_stop` arrived."""

    def __init__(self, wire: AnthropicRequest, *, model: str, provider: str) -> None:
        self._wire = wire
        self._provider = provider
        self._draft = _Draft(model=model)
        self._by_index: dict[int, _Block] = {}
        self._calls = 0
        self._stopped = False

    def feed(self, event: RawMessageStreamEvent) -> list[StreamEvent]:
        if isinstance(event, RawMessageStartEvent):
            self._draft.model = event.message.model or self._draft.model
            self._draft.read_usage(event.message.usage)
        elif isinstance(event, RawContentBlockStartEvent):
            return self._start(event)
        elif isinstance(event, RawContentBlockDeltaEvent):
            return self._delta(event)
        elif isinstance(event, RawMessageDeltaEvent):
            self._draft.stop_reason = event.delta.stop_reason or self._draft.stop_reason
            self._draft.read_usage(event.usage)
        elif isinstance(event, RawMessageStopEvent):
            self._stopped = True
        return []

    def finish(self) -> ChatResponse:
        """The whole turn; a stream without `message_stop` was cut off (retryable)."""
        if not self._stopped:
            raise truncated_stream(self._provider, "message_stop")
        return _response(self._draft, self._wire)

    def _start(self, event: RawContentBlockStartEvent) -> list[StreamEvent]:
        source = event.content_block
        if isinstance(source, TextBlock):
            block = _Block("text", parts=[source.text] if source.text else [])
            self._add(event.index, block)
            return [TextDelta(source.text)] if source.text else []
        if not isinstance(source, ToolUseBlock):
            return []
        block = _Block("tool_use", source.id, source.name)
        if source.input:
            block.parts.append(json.dumps(source.input))
        self._add(event.index, block)
        if self._is_structured(block):
            return []
        block.call_position, self._calls = self._calls, self._calls + 1
        sent = self._wire.ids.original(block.id)
        return [ToolCallDelta(block.call_position, id=sent, name=block.name)]

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[StreamEvent]:
        block = self._by_index.get(event.index)
        delta = event.delta
        if block is None:
            return []
        if isinstance(delta, AnthropicTextDelta):
            block.parts.append(delta.text)
            return [TextDelta(delta.text)] if delta.text else []
        if not isinstance(delta, InputJSONDelta) or not delta.partial_json:
            return []
        block.parts.append(delta.partial_json)
        if block.call_position is not None:
            return [ToolCallDelta(block.call_position, arguments_delta=delta.partial_json)]
        wrapped = self._wire.structured is not None and self._wire.structured.wrapped
        return [] if wrapped else [TextDelta(delta.partial_json)]

    def _add(self, index: int, block: _Block) -> None:
        self._by_index[index] = block
        self._draft.blocks.append(block)

    def _is_structured(self, block: _Block) -> bool:
        return self._wire.structured is not None and block.name == self._wire.structured.name


def _response(draft: _Draft, wire: AnthropicRequest) -> ChatResponse:
    text = "".join(part for b in draft.blocks if b.kind == "text" for part in b.parts)
    calls: list[ToolCall] = []
    structured_text: str | None = None
    for block in draft.blocks:
        if block.kind != "tool_use":
            continue
        arguments = _arguments("".join(block.parts))
        if wire.structured is not None and block.name == wire.structured.name:
            structured_text = _unwrap(arguments, wire.structured)
            continue
        calls.append(ToolCall(wire.ids.original(block.id), block.name, arguments))
    stop = _STOP_REASONS.get(draft.stop_reason or "end_turn", StopReason.END_TURN)
    if structured_text is not None:
        text = structured_text
        if stop is StopReason.TOOL_USE and not calls:
            stop = StopReason.END_TURN
    usage = Usage(
        input_tokens=draft.input_tokens + draft.cache_read_tokens + draft.cache_write_tokens,
        output_tokens=draft.output_tokens,
        cache_read_tokens=draft.cache_read_tokens,
        cache_write_tokens=draft.cache_write_tokens,
    )
    return ChatResponse(
        text=text,
        tool_calls=calls,
        stop_reason=stop,
        usage=usage,
        model=draft.model,
        context_window_exceeded=draft.stop_reason == "model_context_window_exceeded",
    )


def _arguments(raw: str) -> str:
    """Valid JSON re-serialised canonically; anything else exactly as sent."""
    try:
        return json.dumps(json.loads(raw)) if raw.strip() else "{}"
    except ValueError:
        return normalise_arguments(raw)


def _unwrap(arguments: str, structured: StructuredTool) -> str:
    return unwrap_structured(arguments) if structured.wrapped else arguments
