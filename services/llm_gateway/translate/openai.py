"""Generic `ChatRequest` ⇄ OpenAI chat completions (and every OpenAI-compatible endpoint).

`to_openai_request` builds the `chat.completions.create` keyword arguments; `from_completion`
reads a `ChatCompletion`; `OpenAIStreamReader` reads `ChatCompletionChunk`s into `StreamEvent`s.
Both directions end in `_response`, so a streamed turn equals the same turn not streamed.

Tool-call arguments come back exactly as the model wrote them (`""` becomes `{}`): a weak model's
invalid JSON is kept, so the caller can answer the call with an error result the model sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from services.common.tool_text import instruction
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
    Message,
    Role,
    StopReason,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoiceMode,
    Usage,
)
from services.llm_gateway.tokens import count_message_tokens, estimate_request_tokens
from services.llm_gateway.translate.schemas import collapse_unions, strict_schema
from services.llm_gateway.translate.text_tool_calls import (
    call_text,
    directive,
    read_calls,
    result_text,
)
from services.llm_gateway.translate.tool_schema import NAME_KEY as TOOL_NAME_KEY
from services.llm_gateway.translate.tool_schema import SCHEMA_NAME as TOOL_CALL_SCHEMA_NAME
from services.llm_gateway.translate.tool_schema import tool_call_schema


@dataclass(frozen=True)
class OpenAIQuirks:
    """What one OpenAI-compatible endpoint accepts."""

    strict_schemas: bool = False
    """Send `strict: true` with strict-compatible schemas (closed objects, all required)."""
    collapse_unions: bool = False
    """Collapse `anyOf`/`oneOf` of simple types: the endpoint rejects unions."""
    supports_parallel_tool_calls: bool = True
    """Forward `parallel_tool_calls`."""
    supports_seed: bool = True
    supports_json_schema_response: bool = True
    """`response_format: json_schema`; otherwise `json_object` with the schema in the prompt."""
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"
    tool_calls_in_text: bool = False
    """The model has no native tool calls: tools go in a system message, calls and results
    travel as text, and calls are read from the reply's JSON (`text_tool_calls`)."""
    tool_calls_by_schema: bool = False
    """`tool_calls: json_schema`: as `tool_calls_in_text`, and the reply is forced by a JSON
    schema the server enforces (`tool_schema.tool_call_schema`) sent as `response_format`."""
    schema_in_json_object: bool = False
    """The server takes a schema as `response_format: {type: json_object, schema}` (llama-cpp-
    python's server) rather than OpenAI's `{type: json_schema, json_schema: {name, schema}}`."""
    one_system_message: bool = False
    """The server's prompt format keeps only the first system message and drops every other
    one silently (llama-cpp-python 0.2.x `chatml`: `_get_system_message` takes the first,
    `_map_roles` maps only user and assistant): the leading system texts are sent as one, and
    a system text later in the conversation (a turn's directive) as a user message."""


@dataclass
class OpenAIRequest:
    """The keyword arguments of `chat.completions.create` and what reading the answer needs."""

    params: dict[str, Any]
    ids: ToolCallIds
    wrapped_schema: bool = False
    """The response schema was not an object and sits under `value`: unwrap the reply text."""
    text_tools: tuple[str, ...] = ()
    """Tool calls in text: the tools whose calls are read from the reply's JSON."""


_FINISH_REASONS = {
    "stop": StopReason.END_TURN,
    "eos": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}

JSON_INSTRUCTION = "Reply with only a JSON object that conforms to this JSON schema:\n"


def to_openai_request(
    request: ChatRequest, *, model: str, quirks: OpenAIQuirks, default_max_output_tokens: int
) -> OpenAIRequest:
    """The `chat.completions.create` arguments for `request` (without `stream`)."""
    ids = ToolCallIds(request.messages)
    params: dict[str, Any] = {"model": model, "messages": _messages(request, ids, quirks)}
    params[quirks.max_tokens_param] = request.max_output_tokens or default_max_output_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.seed is not None and quirks.supports_seed:
        params["seed"] = request.seed
    if request.top_logprobs is not None:
        params["logprobs"] = True
        params["top_logprobs"] = request.top_logprobs
    in_text = _tools_in_text(request, quirks)
    if in_text:
        params["messages"] = _with_tool_instruction(params["messages"], request, quirks)
        choice = request.tool_choice
        forced = tool_call_schema(request.callable_tools, choice.mode, choice.name)
        if quirks.tool_calls_by_schema and forced is not None and request.response_schema is None:
            params["response_format"] = _schema_format(
                TOOL_CALL_SCHEMA_NAME, _schema(forced, quirks), quirks
            )
    elif request.tools:
        params["tools"] = [_tool(tool, quirks) for tool in request.callable_tools]
        params["tool_choice"] = _tool_choice(request)
        if request.parallel_tool_calls is not None and quirks.supports_parallel_tool_calls:
            params["parallel_tool_calls"] = request.parallel_tool_calls
    wrapped = False
    if request.response_schema is not None:
        schema, wrapped = object_schema(request.response_schema)
        params["response_format"] = _response_format(request, schema, quirks)
    text_tools = tuple(t.name for t in request.callable_tools) if in_text else ()
    if quirks.one_system_message:
        params["messages"] = _one_system_message(params["messages"])
    return OpenAIRequest(params, ids, wrapped, text_tools)


def _one_system_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leading system messages joined into one, later ones sent as user messages."""
    lead = _leading_systems(messages)
    joined = "\n\n".join(m["content"] for m in messages[:lead])
    head = [{"role": "system", "content": joined}] if lead else []
    rest = [{**m, "role": "user"} if m["role"] == "system" else m for m in messages[lead:]]
    return head + rest


def _leading_systems(messages: list[dict[str, Any]]) -> int:
    """How many system messages open `messages`."""
    return next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))


def input_tokens(request: ChatRequest, quirks: OpenAIQuirks) -> int:
    """About how many input tokens `request` is as this endpoint receives it. With tools as
    text (`json_in_text`, `json_schema`) the model reads the tool instruction, not the tools'
    schemas (with `json_schema` each tool is a one-line signature and the schema is the server's
    grammar): counting the schemas made the gateway skip a 4,096-token local model for requests
    it would have taken (a THINKING turn's five tools: ~1,600-2,200 tokens of schemas against a
    ~550-token instruction), and the route's fallback answered instead."""
    if not _tools_in_text(request, quirks):
        return estimate_request_tokens(request)
    told, asked = _tool_texts(request, quirks)
    without_schemas = estimate_request_tokens(replace(request, tools=()))
    return without_schemas + sum(
        count_message_tokens(Message(Role.SYSTEM, t)) for t in (told, asked)
    )


def _tools_in_text(request: ChatRequest, quirks: OpenAIQuirks) -> bool:
    """Whether tools, calls and results travel as text (`json_in_text`, `json_schema`)."""
    return (quirks.tool_calls_in_text or quirks.tool_calls_by_schema) and bool(request.tools)


def _call_key(quirks: OpenAIQuirks) -> str:
    """The key naming the tool in a call written as JSON: the forced schema's `name`."""
    return TOOL_NAME_KEY if quirks.tool_calls_by_schema else "tool"


def _with_tool_instruction(
    messages: list[dict[str, Any]], request: ChatRequest, quirks: OpenAIQuirks
) -> list[dict[str, Any]]:
    """Every tool as a system message after the leading system messages, the same on every
    turn of a conversation, and what this turn asks (`directive`) as a system message after
    the conversation. A local model server re-reads a prompt from its first changed token:
    with the turn's choice in the leading message, each change of it (a run's first turn,
    its answer-only turn) re-read the conversation from the instruction on."""
    lead = _leading_systems(messages)
    told, asked = _tool_texts(request, quirks)
    return [
        *messages[:lead],
        {"role": "system", "content": told},
        *messages[lead:],
        {"role": "system", "content": asked},
    ]


def _tool_texts(request: ChatRequest, quirks: OpenAIQuirks) -> tuple[str, str]:
    """The tool instruction (every tool of the request) and this turn's directive."""
    choice = request.tool_choice
    told = instruction(request.tools, forced=quirks.tool_calls_by_schema)
    asked = directive(request.tools, request.callable_tools, choice.mode, choice.name)
    return told, asked


def _messages(request: ChatRequest, ids: ToolCallIds, quirks: OpenAIQuirks) -> list[dict[str, Any]]:
    system, start = leading_system_texts(request.messages)
    messages: list[dict[str, Any]] = [{"role": "system", "content": text} for text in system]
    if request.response_schema is not None and not quirks.supports_json_schema_response:
        instruction = JSON_INSTRUCTION + json.dumps(object_schema(request.response_schema)[0])
        messages.append({"role": "system", "content": instruction})
    in_text = _tools_in_text(request, quirks)
    key = _call_key(quirks)
    for turn in group_turns(request.messages, start, ids):
        if in_text:
            messages += (
                _assistant_text(turn, key) if turn.role is Role.ASSISTANT else _user_text(turn)
            )
        else:
            messages += _assistant(turn) if turn.role is Role.ASSISTANT else _user(turn)
    return messages


def _assistant_text(turn: Turn, key: str) -> list[dict[str, Any]]:
    """An assistant turn with its calls written as the model writes them in text mode."""
    parts = [text for _, text in turn.texts]
    parts += [call_text(call.name, call.arguments_json, key=key) for call, _ in turn.calls]
    return [{"role": "assistant", "content": "\n\n".join(parts)}]


def _user_text(turn: Turn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": result_text(r.sent_id, r.message.text, is_error=r.message.is_error),
        }
        for r in turn.results
    ]
    messages += [
        {"role": "system" if role is Role.SYSTEM else "user", "content": text}
        for role, text in turn.texts
    ]
    return messages


def _assistant(turn: Turn) -> list[dict[str, Any]]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "\n\n".join(text for _, text in turn.texts) or None,
    }
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": sent_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _sendable(call.arguments_json)},
            }
            for call, sent_id in turn.calls
        ]
    return [message]


def _user(turn: Turn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": r.sent_id, "content": r.message.text} for r in turn.results
    ]
    messages += [
        {"role": "system" if role is Role.SYSTEM else "user", "content": text}
        for role, text in turn.texts
    ]
    return messages


def _sendable(arguments_json: str) -> str:
    """Past arguments as the endpoint will accept them: `{}` in place of empty or invalid JSON."""
    if parse_arguments(arguments_json) is None or not arguments_json.strip():
        return "{}"
    return arguments_json


def _schema(schema: dict[str, Any], quirks: OpenAIQuirks) -> dict[str, Any]:
    if quirks.strict_schemas:
        schema = strict_schema(schema)
    if quirks.collapse_unions:
        schema = collapse_unions(schema)
    return schema


def _tool(tool: Tool, quirks: OpenAIQuirks) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": _schema(tool.parameters, quirks),
    }
    if quirks.strict_schemas:
        function["strict"] = True
    return {"type": "function", "function": function}


def _tool_choice(request: ChatRequest) -> Any:
    choice = request.tool_choice
    if choice.mode is ToolChoiceMode.NAMED:
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode.value


def _response_format(
    request: ChatRequest, schema: dict[str, Any], quirks: OpenAIQuirks
) -> dict[str, Any]:
    return _schema_format(structured_output_name(request), _schema(schema, quirks), quirks)


def _schema_format(name: str, schema: dict[str, Any], quirks: OpenAIQuirks) -> dict[str, Any]:
    """`response_format` carrying `schema` as this endpoint takes it."""
    if quirks.schema_in_json_object:
        return {"type": "json_object", "schema": schema}
    if not quirks.supports_json_schema_response:
        return {"type": "json_object"}
    json_schema = {"name": name, "schema": schema, "strict": quirks.strict_schemas}
    return {"type": "json_schema", "json_schema": json_schema}


@dataclass
class _CallDraft:
    id: str
    name: str
    arguments: str = ""
    wire_index: int | None = None


@dataclass
class _Draft:
    """A turn as read so far, streamed or not."""

    model: str
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: list[_CallDraft] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    first_token_logprobs: tuple[tuple[str, float], ...] = ()


def from_completion(completion: ChatCompletion, wire: OpenAIRequest, *, model: str) -> ChatResponse:
    """The generic response for a non-streamed completion."""
    draft = _Draft(model=completion.model or model)
    if completion.usage is not None:
        draft.usage = _usage(completion.usage)
    if completion.choices:
        choice = completion.choices[0]
        message = choice.message
        draft.text.append(message.content or "")
        draft.refusal.append(getattr(message, "refusal", None) or "")
        for i, call in enumerate(message.tool_calls or []):
            function = getattr(call, "function", None)
            if function is None:
                continue
            call_id = call.id or f"call_{i}"
            draft.calls.append(_CallDraft(call_id, function.name, function.arguments or ""))
        draft.finish_reason = choice.finish_reason
        draft.first_token_logprobs = first_token_logprobs(choice.logprobs)
    return _response(draft, wire)


def first_token_logprobs(logprobs: Any) -> tuple[tuple[str, float], ...]:
    """(token, log-probability) of the reply's most likely first tokens, most likely first, from
    a choice's `logprobs`: OpenAI's (`content[0].top_logprobs`) or the completion-style form
    llama-cpp-python's server answers chat with (`top_logprobs[0]`, a token -> logprob map)."""
    if logprobs is None:
        return ()
    content = getattr(logprobs, "content", None)
    if content:
        found = [(t.token, float(t.logprob)) for t in content[0].top_logprobs or ()]
    else:
        positions = getattr(logprobs, "top_logprobs", None) or []
        first = positions[0] if positions else None
        if not isinstance(first, dict):
            return ()
        found = [(str(token), float(logprob)) for token, logprob in first.items()]
    return tuple(sorted(found, key=lambda pair: -pair[1]))


class OpenAIStreamReader:
    """Reads one stream of chunks; `finish()` gives the response once the stream has ended."""

    def __init__(self, wire: OpenAIRequest, *, model: str, provider: str) -> None:
        self._wire = wire
        self._ids = wire.ids
        self._provider = provider
        self._draft = _Draft(model=model)

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamEvent]:
        if chunk.model:
            self._draft.model = chunk.model
        if chunk.usage is not None:
            self._draft.usage = _usage(chunk.usage)
        events: list[StreamEvent] = []
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self._draft.text.append(delta.content)
                events.append(TextDelta(delta.content))
            if getattr(delta, "refusal", None):
                self._draft.refusal.append(str(delta.refusal))
            for call in delta.tool_calls or []:
                events.append(self._tool_delta(call))
            if choice.finish_reason:
                self._draft.finish_reason = choice.finish_reason
        return events

    def finish(self) -> ChatResponse:
        """The whole turn; a stream without a finish reason was cut off (retryable)."""
        if self._draft.finish_reason is None:
            raise truncated_stream(self._provider, "its finish reason")
        return _response(self._draft, self._wire)

    def _tool_delta(self, delta: ChoiceDeltaToolCall) -> ToolCallDelta:
        index = getattr(delta, "index", None)
        call_id = getattr(delta, "id", None) or ""
        function = getattr(delta, "function", None)
        name = (getattr(function, "name", None) or "") if function else ""
        arguments = (getattr(function, "arguments", None) or "") if function else ""
        calls = self._draft.calls
        position = self._locate(index, call_id)
        if position is None:
            calls.append(_CallDraft(call_id or f"call_{len(calls)}", name, wire_index=index))
            position = len(calls) - 1
            draft = calls[position]
            draft.arguments += arguments
            sent = self._ids.original(draft.id)
            return ToolCallDelta(position, id=sent, name=draft.name, arguments_delta=arguments)
        draft = calls[position]
        draft.name = draft.name or name
        draft.arguments += arguments
        return ToolCallDelta(position, arguments_delta=arguments)

    def _locate(self, index: int | None, call_id: str) -> int | None:
        """Which call a delta continues, or None for a new call. Accepts servers that send a
        whole call per chunk (same index, new id) and continuations without id or index."""
        calls = self._draft.calls
        if index is not None:
            for position, draft in enumerate(calls):
                if draft.wire_index == index and (not call_id or call_id == draft.id):
                    return position
            return None
        if call_id:
            return next((p for p, d in enumerate(calls) if d.id == call_id), None)
        return len(calls) - 1 if calls else None


def _response(draft: _Draft, wire: OpenAIRequest) -> ChatResponse:
    ids = wire.ids
    text = "".join(draft.text)
    if wire.wrapped_schema:
        text = unwrap_structured(text)
    refusal = "".join(draft.refusal)
    calls = [
        ToolCall(ids.original(c.id), c.name, normalise_arguments(c.arguments)) for c in draft.calls
    ]
    if wire.text_tools and not calls:
        text, written = read_calls(text, wire.text_tools)
        calls = [
            ToolCall(f"text_call_{n}", c.name, c.arguments_json)
            for n, c in enumerate(written, start=1)
        ]
    stop = _FINISH_REASONS.get(draft.finish_reason or "stop", StopReason.END_TURN)
    if calls and stop is StopReason.END_TURN:
        stop = StopReason.TOOL_USE
    if refusal and not text and not calls:
        text, stop = refusal, StopReason.CONTENT_FILTER
    return ChatResponse(
        text=text,
        tool_calls=calls,
        stop_reason=stop,
        usage=draft.usage,
        model=draft.model,
        first_token_logprobs=draft.first_token_logprobs,
    )


def _usage(usage: CompletionUsage) -> Usage:
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached,
    )
