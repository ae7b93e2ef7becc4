"""Provider-neutral conversation rules every translation shares.

* `validate_conversation`: the rules spanning messages, checked before any provider is called
  (`InvalidConversation` naming the field): a conversation that does not start with the user, an
  empty user message, tool calls and results that do not pair up. Rules about single fields
  (names, schemas, ranges) are the protobuf edge's (`convert.py`), checked once there.
* `ToolCallIds`: tool-call ids sanitised to `[A-Za-z0-9_-]` and made unique across the conversation
  (weak servers reuse `call_0` every turn), the same way for a call and its result, and mapped back.
* `group_turns`: consecutive user/tool (and later system) messages merge into one user turn with the
  tool results first, in call order; consecutive assistant messages merge; empty text is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import shown
from services.llm_gateway.errors import InvalidConversation
from services.llm_gateway.model import ChatRequest, Message, Role, ToolCall

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""What every provider accepts as a tool name."""
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
STRUCTURED_OUTPUT_TOOL = "structured_output"
"""Default name of the schema when a structured request does not name it."""


def validate_conversation(request: ChatRequest) -> None:
    """Raise `InvalidConversation` for a conversation no provider could answer as it stands."""
    _validate_start(request.messages)
    _validate_pairing(request.messages)


def _validate_start(messages: tuple[Message, ...]) -> None:
    for i, message in enumerate(messages):
        if message.role is Role.USER and not message.text.strip():
            raise InvalidConversation(f"messages[{i}].text", "a user message must not be empty")
    first = next(((i, m) for i, m in enumerate(messages) if m.role is not Role.SYSTEM), None)
    if first is None:
        raise InvalidConversation("messages", "needs at least one user message")
    if first[1].role is not Role.USER:
        raise InvalidConversation(
            f"messages[{first[0]}].role", "the conversation must start with a user message"
        )


def _validate_pairing(messages: tuple[Message, ...]) -> None:
    """Each tool call answered exactly once, after its assistant message, before the next one."""
    open_calls: dict[str, str] = {}
    answered: set[str] = set()
    for i, message in enumerate(messages):
        if message.role is Role.ASSISTANT:
            _require_answered(open_calls)
            open_calls, answered = _calls_of(i, message), set()
        elif message.role is Role.TOOL:
            call_id = message.tool_call_id
            if call_id in answered:
                raise InvalidConversation(
                    f"messages[{i}].tool_call_id",
                    f"tool call {shown(call_id)} already has a result",
                )
            if call_id not in open_calls:
                raise InvalidConversation(
                    f"messages[{i}].tool_call_id",
                    f"no tool call {shown(call_id)} in the preceding assistant message",
                )
            del open_calls[call_id]
            answered.add(call_id)
    _require_answered(open_calls)


def _calls_of(index: int, message: Message) -> dict[str, str]:
    calls: dict[str, str] = {}
    for j, call in enumerate(message.tool_calls):
        path = f"messages[{index}].tool_calls[{j}].id"
        if call.id in calls:
            raise InvalidConversation(path, f"duplicate tool call id {shown(call.id)}")
        calls[call.id] = path
    return calls


def _require_answered(open_calls: dict[str, str]) -> None:
    for call_id, path in open_calls.items():
        raise InvalidConversation(path, f"tool call {shown(call_id)} has no tool result")


class ToolCallIds:
    """Provider-safe, conversation-unique ids for the tool calls of one request."""

    def __init__(self, messages: tuple[Message, ...]) -> None:
        self._safe: dict[tuple[int, str], str] = {}
        self._original: dict[str, str] = {}
        self._result_turn: dict[int, int] = {}
        last_assistant = -1
        for i, message in enumerate(messages):
            if message.role is Role.ASSISTANT:
                last_assistant = i
                for call in message.tool_calls:
                    self._assign(i, call.id)
            elif message.role is Role.TOOL:
                self._result_turn[i] = last_assistant

    def for_call(self, message_index: int, call_id: str) -> str:
        """The id sent for `call_id` of the assistant message at `message_index`."""
        return self._safe.get((message_index, call_id)) or sanitize_id(call_id)

    def for_result(self, message_index: int, call_id: str) -> str:
        """The id sent for the tool message at `message_index` (same as its call's)."""
        return self.for_call(self._result_turn.get(message_index, -1), call_id)

    def original(self, sent_id: str) -> str:
        """The caller's id for an id the provider echoes back; new ids are returned as they are."""
        return self._original.get(sent_id, sent_id)

    def _assign(self, message_index: int, call_id: str) -> None:
        base = sanitize_id(call_id)
        safe, n = base, 1
        while safe in self._original:
            n += 1
            safe = f"{base}_{n}"
        self._safe[(message_index, call_id)] = safe
        self._original[safe] = call_id


def sanitize_id(call_id: str) -> str:
    """`call_id` with every character outside `[A-Za-z0-9_-]` replaced by `_`."""
    return _UNSAFE_ID_CHARS.sub("_", call_id) or "call"


@dataclass
class Result:
    """A tool result inside a user turn."""

    message: Message
    sent_id: str


@dataclass
class Turn:
    """Consecutive messages of one side merged: a user turn or an assistant turn."""

    role: Role
    """USER (user, tool and non-leading system messages) or ASSISTANT."""
    texts: list[tuple[Role, str]] = field(default_factory=list)
    """Non-empty texts in order, with the role of the message they came from."""
    calls: list[tuple[ToolCall, str]] = field(default_factory=list)
    """Assistant: tool calls in order, with the id to send."""
    results: list[Result] = field(default_factory=list)
    """User: tool results, in the order of the calls they answer."""


def leading_system_texts(messages: tuple[Message, ...]) -> tuple[list[str], int]:
    """Texts of the system messages that open the conversation, and where the rest starts."""
    texts: list[str] = []
    for i, message in enumerate(messages):
        if message.role is not Role.SYSTEM:
            return texts, i
        if message.text.strip():
            texts.append(message.text)
    return texts, len(messages)


def group_turns(messages: tuple[Message, ...], start: int, ids: ToolCallIds) -> list[Turn]:
    """`messages[start:]` as alternating user and assistant turns."""
    turns: list[Turn] = []
    call_order: dict[str, int] = {}
    for i in range(start, len(messages)):
        message = messages[i]
        side = Role.ASSISTANT if message.role is Role.ASSISTANT else Role.USER
        if not turns or turns[-1].role is not side:
            turns.append(Turn(side))
        turn = turns[-1]
        if message.text.strip() and message.role is not Role.TOOL:
            turn.texts.append((message.role, message.text))
        if message.role is Role.ASSISTANT:
            for call in message.tool_calls:
                call_order[ids.for_call(i, call.id)] = len(call_order)
                turn.calls.append((call, ids.for_call(i, call.id)))
        elif message.role is Role.TOOL:
            turn.results.append(Result(message, ids.for_result(i, message.tool_call_id)))
    for turn in turns:
        turn.results.sort(key=lambda r: call_order.get(r.sent_id, 0))
    return [t for t in turns if t.texts or t.calls or t.results]


def parse_arguments(arguments_json: str) -> dict[str, Any] | None:
    """The arguments object of a call; `{}` for none; None when not a JSON object."""
    if not arguments_json.strip():
        return {}
    try:
        value = json.loads(arguments_json)
    except (ValueError, RecursionError):  # too deep for the parser is not a JSON object either
        return None
    return value if isinstance(value, dict) else None


def normalise_arguments(raw: str) -> str:
    """A response's arguments text: `{}` when the model sent none, otherwise exactly as sent
    (possibly invalid JSON, which the caller answers with an error tool result)."""
    return raw if raw.strip() else "{}"


WRAPPED_KEY = "value"
"""Where a non-object response schema sits inside the object schema vendors require."""


def object_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`schema` as an object schema (vendors require one at the root), and whether it was wrapped
    under `WRAPPED_KEY`."""
    if schema.get("type") == "object":
        return schema, False
    wrapped = {"type": "object", "properties": {WRAPPED_KEY: schema}, "required": [WRAPPED_KEY]}
    return wrapped, True


def unwrap_structured(text: str) -> str:
    """The JSON text of the wrapped value; `text` itself when it holds no wrapped value."""
    value = parse_arguments(text)
    if value is None or WRAPPED_KEY not in value:
        return text
    return json.dumps(value[WRAPPED_KEY])


def structured_output_name(request: ChatRequest) -> str:
    name = request.response_schema_name or STRUCTURED_OUTPUT_TOOL
    return name if TOOL_NAME.match(name) else sanitize_id(name)[:64]
