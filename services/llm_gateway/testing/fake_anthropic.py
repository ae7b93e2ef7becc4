"""A fake Anthropic Messages server, driven by a script.

Speaks `POST /v1/messages`: a JSON `message`, or with `"stream": true` the SSE events
`message_start`, `ping`, `content_block_start`, `content_block_delta` (`text_delta`,
`input_json_delta`), `content_block_stop`, `message_delta` (stop_reason, usage), `message_stop`,
and on request an `error` event inside the 200 stream. Errors use the envelope
`{"type": "error", "error": {"type", "message"}}`; context overflow says "prompt is too long".

Non-streaming tool calls whose scripted `arguments` are not a JSON object are sent with that raw
text as `input` (a weak upstream's answer); streamed, they arrive as `input_json_delta` pieces.

In a test: `async with FakeAnthropicServer() as fake: fake.push(Reply(text="hi"))` and build
`anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url, max_retries=0)`.

Standalone: `python -m services.llm_gateway.testing.fake_anthropic --port 0 --script FILE`, with the
script format of `services.llm_gateway.scripted_reply`. The neutral stop reason `content_filter` is
sent as `refusal`; the others are Anthropic's own wording, and any other value is sent verbatim.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from services.llm_gateway.scripted_reply import (
    Reply,
    ScriptedError,
    ScriptedToolCall,
    ScriptedUsage,
)
from services.llm_gateway.testing.fake_openai import chunks
from services.llm_gateway.testing.fake_server import FakeServer, SseEvent, run_cli

OVERFLOW_MESSAGE = "prompt is too long: 210000 tokens > 200000 maximum"

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _input(call: ScriptedToolCall) -> Any:
    if not call.arguments:
        return {}
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def _stop_reason(reply: Reply) -> str:
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return "refusal" if stop == "content_filter" else stop


def _usage(reply: Reply) -> ScriptedUsage:
    return reply.usage or ScriptedUsage()


def _event(name: str, payload: dict[str, Any]) -> SseEvent:
    return SseEvent(json.dumps({"type": name, **payload}), event=name)


class FakeAnthropicServer(FakeServer):
    """Fake `POST /v1/messages`; `base_url` is the server root."""

    kind: ClassVar[str] = "anthropic"
    api_path: ClassVar[str] = "/v1/messages"
    base_path: ClassVar[str] = ""

    def render_body(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c)}
            for c in reply.tool_calls
        ]
        return {
            **self._message_head(reply, model),
            "content": content,
            "stop_reason": _stop_reason(reply),
            "usage": {**self._input_usage(reply), "output_tokens": _usage(reply).output_tokens},
        }

    def render_events(self, reply: Reply, model: str) -> list[SseEvent]:
        start = {
            **self._message_head(reply, model),
            "content": [],
            "stop_reason": None,
            "usage": {**self._input_usage(reply), "output_tokens": 1},
        }
        events = [_event("message_start", {"message": start}), _event("ping", {})]
        index, size = 0, reply.chunk_size
        if reply.text:
            text_block = {"type": "text", "text": ""}
            events += _block(index, text_block, ("text_delta", "text"), chunks(reply.text, size))
            index += 1
        for call in reply.tool_calls:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": {},
            }
            delta_field = ("input_json_delta", "partial_json")
            events += _block(index, block, delta_field, chunks(call.arguments, size))
            index += 1
        delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
        usage = {"output_tokens": _usage(reply).output_tokens}
        events.append(_event("message_delta", {"delta": delta, "usage": usage}))
        events.append(_event("message_stop", {}))
        return events

    def render_error(self, error: ScriptedError) -> tuple[int, dict[str, Any], dict[str, str]]:
        message = error.message
        if error.kind == "context_overflow" and not message:
            message = OVERFLOW_MESSAGE
        type_ = error.type or ERROR_TYPES.get(error.status, "api_error")
        body = {"type": "error", "error": {"type": type_, "message": message or type_}}
        return error.status, {**body, "request_id": "req_fake"}, {"request-id": "req_fake"}

    def render_stream_error(self, error: ScriptedError) -> SseEvent:
        _, body, _ = self.render_error(error)
        return _event("error", {"error": body["error"]})

    @staticmethod
    def _message_head(reply: Reply, model: str) -> dict[str, Any]:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "stop_sequence": None,
        }

    @staticmethod
    def _input_usage(reply: Reply) -> dict[str, int]:
        usage = _usage(reply)
        return {
            "input_tokens": usage.input_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
        }


def _block(
    index: int, block: dict[str, Any], delta: tuple[str, str], pieces: list[str]
) -> list[SseEvent]:
    """One content block: start, a delta per piece, stop."""
    delta_type, field = delta
    events = [_event("content_block_start", {"index": index, "content_block": block})]
    events += [
        _event("content_block_delta", {"index": index, "delta": {"type": delta_type, field: p}})
        for p in pieces
    ]
    events.append(_event("content_block_stop", {"index": index}))
    return events


def main(argv: list[str] | None = None) -> None:
    run_cli(FakeAnthropicServer, argv)


if __name__ == "__main__":
    main()
