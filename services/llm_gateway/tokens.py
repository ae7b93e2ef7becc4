"""Rough token counts (four characters a token): enough to tell whether a request fits a window."""

from __future__ import annotations

import json

from services.llm_gateway.model import ChatRequest, Message

CHARS_PER_TOKEN = 4
_PER_MESSAGE_OVERHEAD = 4


def count_text_tokens(text: str) -> int:
    """Tokens of `text`, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def count_message_tokens(message: Message) -> int:
    total = _PER_MESSAGE_OVERHEAD + count_text_tokens(message.text)
    for call in message.tool_calls:
        total += count_text_tokens(call.name) + count_text_tokens(call.arguments_json)
    return total


def estimate_request_tokens(request: ChatRequest) -> int:
    """Input tokens of `request`: messages, the definitions of the tools it may call and the
    response schema."""
    total = sum(count_message_tokens(m) for m in request.messages)
    for tool in request.callable_tools:
        total += count_text_tokens(tool.name) + count_text_tokens(tool.description)
        total += (
            tool.parameters_tokens
            if tool.parameters_tokens is not None
            else count_text_tokens(json.dumps(tool.parameters, separators=(",", ":")))
        )
    if request.response_schema is not None:
        total += count_text_tokens(json.dumps(request.response_schema, separators=(",", ":")))
    return total


def estimate_input_tokens(provider: object, request: ChatRequest) -> int:
    """Input tokens of `request` as `provider` receives it: its own estimate when it translates
    the request into something of another size (tools as text, `estimate_input_tokens`), else
    `estimate_request_tokens`."""
    own = getattr(provider, "estimate_input_tokens", None)
    return int(own(request)) if callable(own) else estimate_request_tokens(request)
