"""A fake OpenAI chat-completions server (and OpenAI-compatible endpoints), driven by a script.

Speaks `POST /v1/chat/completions`: a JSON `chat.completion`, or with `"stream": true` SSE
`data: {chat.completion.chunk}` lines (role chunk, content deltas, tool-call deltas by `index`, a
finish-reason chunk, a usage chunk with empty `choices`) and `data: [DONE]`. Errors use the OpenAI
envelope `{"error": {"message", "type", "param", "code"}}`; context overflow uses the wording
"This model's maximum context length is ..." with `code: context_length_exceeded`.

In a test:

    async with FakeOpenAIServer() as fake:
        fake.push(Reply(text="hi"), Reply.rate_limited("2"))
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url, max_retries=0)
        ...
        assert fake.requests[0].body["model"] == "m"

Standalone (for subprocess end-to-end tests and benchmarks):

    python -m services.llm_gateway.testing.fake_openai --port 0 --script replies.yaml

prints `{"base_url": "http://127.0.0.1:PORT/v1", "port": PORT}` on its first line, then serves until
SIGINT/SIGTERM. The script file is the one documented in `services.llm_gateway.scripted_reply`
(the scripted provider replays it, record mode writes it): `replies` are consumed one per request,
in order, then `default` is repeated. Neutral stop reasons are sent in OpenAI's wording (`end_turn`
→ `stop`, `tool_use` → `tool_calls`, `max_tokens` → `length`), any other verbatim. While running,
replies can be added with `POST /_fake/replies` (same format), replaced with `POST /_fake/reset`,
and the recorded requests read with `GET /_fake/requests` (API keys redacted).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from services.llm_gateway.scripted_reply import Reply, ScriptedError, ScriptedUsage
from services.llm_gateway.testing.fake_server import FakeServer, SseEvent, run_cli

OVERFLOW_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens. Please reduce the length of the messages."
)

_DEFAULT_ERRORS: dict[int, tuple[str, str, str]] = {
    400: ("Invalid request.", "invalid_request_error", ""),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", ""),
    404: ("The model does not exist.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
}


def chunks(text: str, size: int) -> list[str]:
    """`text` in pieces of `size` characters (none for empty text)."""
    size = max(size, 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


def usage_json(usage: ScriptedUsage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
    }


def logprobs_json(reply: Reply, body: dict[str, Any]) -> dict[str, Any] | None:
    """A choice's `logprobs` for a request that asked for them (`logprobs`, `top_logprobs`)."""
    if not body.get("logprobs") or not reply.first_token_logprobs:
        return None
    top = sorted(reply.first_token_logprobs.items(), key=lambda pair: -pair[1])
    top = top[: int(body.get("top_logprobs") or 0) or len(top)]
    first, best = top[0]
    if reply.llama_cpp_logprobs:
        return {
            "text_offset": [0],
            "token_logprobs": [best],
            "tokens": [first],
            "top_logprobs": [dict(top)],
        }
    candidates = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
    return {"content": [{**candidates[0], "top_logprobs": candidates}], "refusal": None}


FINISH_REASONS = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
"""Neutral stop reasons in OpenAI's wording (`content_filter` is the same in both)."""


def finish_reason(reply: Reply) -> str:
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return FINISH_REASONS.get(stop, stop)


class FakeOpenAIServer(FakeServer):
    """Fake `POST /v1/chat/completions`; `base_url` ends with `/v1`."""

    kind: ClassVar[str] = "openai"
    api_path: ClassVar[str] = "/v1/chat/completions"
    base_path: ClassVar[str] = "/v1"

    def render_body(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.refusal:
            message["refusal"] = reply.refusal
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in reply.tool_calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": finish_reason(reply)}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{**choice, "logprobs": logprobs_json(reply, body)}],
            "usage": usage_json(reply.usage or ScriptedUsage()),
        }

    def render_events(self, reply: Reply, model: str) -> list[SseEvent]:
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> SseEvent:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return SseEvent(json.dumps({**base, "choices": [choice]}))

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in chunks(reply.text, reply.chunk_size)]
        events += [chunk({"refusal": piece}) for piece in chunks(reply.refusal, reply.chunk_size)]
        for index, call in enumerate(reply.tool_calls):
            head = {"index": index, "id": call.id, "type": "function"}
            if reply.whole_tool_call_chunks:
                function = {"name": call.name, "arguments": call.arguments}
                events.append(chunk({"tool_calls": [{**head, "function": function}]}))
                continue
            function = {"name": call.name, "arguments": ""}
            events.append(chunk({"tool_calls": [{**head, "function": function}]}))
            for piece in chunks(call.arguments, reply.chunk_size):
                delta: dict[str, Any] = {"function": {"arguments": piece}}
                if not reply.anonymous_continuations:
                    delta["index"] = index
                events.append(chunk({"tool_calls": [delta]}))
        events.append(chunk({}, finish_reason(reply)))
        usage = {**base, "choices": [], "usage": usage_json(reply.usage or ScriptedUsage())}
        events.append(SseEvent(json.dumps(usage)))
        events.append(SseEvent("[DONE]"))
        return events

    def render_error(self, error: ScriptedError) -> tuple[int, dict[str, Any], dict[str, str]]:
        message, type_, code = error.message, error.type, error.code
        if error.kind == "context_overflow" and not message:
            message, code = OVERFLOW_MESSAGE, code or "context_length_exceeded"
        default = _DEFAULT_ERRORS.get(
            error.status,
            ("The server had an error while processing your request.", "server_error", ""),
        )
        body = {
            "message": message or default[0],
            "type": type_ or default[1],
            "param": None,
            "code": code or default[2] or None,
        }
        return error.status, {"error": body}, {}

    def render_stream_error(self, error: ScriptedError) -> SseEvent:
        _, body, _ = self.render_error(error)
        return SseEvent(json.dumps(body))


def main(argv: list[str] | None = None) -> None:
    run_cli(FakeOpenAIServer, argv)


if __name__ == "__main__":
    main()
