"""The caller's conversation, checked before any provider sees it (LLM_TRANSLATION.md item 3).

Every tool message answers a call of the nearest preceding assistant message, each call exactly
once; every call is answered before the conversation moves on. Providers reject conversations that
break these rules, and pruning or compaction are the usual culprits: the caller learns which field
is wrong instead of a provider's 400.
"""

from __future__ import annotations

from services.llm_gateway.errors import InvalidConversation
from services.llm_gateway.model import ChatRequest, Role


def validate_conversation(request: ChatRequest) -> None:
    """Raise `InvalidConversation` naming the first offending field."""
    if not request.messages:
        raise InvalidConversation("messages", "at least one message is required")
    if all(m.role is Role.SYSTEM for m in request.messages):
        raise InvalidConversation("messages", "needs a user message, not only system messages")
    open_calls: dict[str, str] = {}
    """Unanswered call id → field path of the call."""
    for index, message in enumerate(request.messages):
        path = f"messages[{index}]"
        if message.role is Role.TOOL:
            if message.tool_call_id not in open_calls:
                raise InvalidConversation(
                    f"{path}.tool_call_id",
                    f"no unanswered tool call with id {message.tool_call_id!r} precedes this "
                    "tool result",
                )
            del open_calls[message.tool_call_id]
            continue
        _require_answered(open_calls)
        if message.role is Role.ASSISTANT:
            for number, call in enumerate(message.tool_calls):
                if call.id in open_calls:
                    raise InvalidConversation(
                        f"{path}.tool_calls[{number}].id",
                        f"tool call id {call.id!r} is used twice in one message",
                    )
                open_calls[call.id] = f"{path}.tool_calls[{number}].id"
    _require_answered(open_calls)


def _require_answered(open_calls: dict[str, str]) -> None:
    for call_id, path in open_calls.items():
        raise InvalidConversation(path, f"tool call {call_id!r} has no tool result")
