"""The fake provider servers speak the wire formats the real SDKs parse, and inject faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from services.llm_gateway.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    Reply,
    ScriptedError,
    ScriptedToolCall,
    ScriptedUsage,
    load_script,
)
from tests.llm_gateway.conftest import FAKE_API_KEY

MESSAGES: Any = [{"role": "user", "content": "hi"}]


async def test_openai_sdk_parses_a_scripted_tool_call_reply(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.push(
        Reply(
            text="Let me look.",
            tool_calls=[ScriptedToolCall("call_1", "search", '{"q": "x"}')],
            usage=ScriptedUsage(input_tokens=7, output_tokens=3, cache_read_tokens=2),
        )
    )
    completion = await openai_sdk.chat.completions.create(model="gpt-test", messages=MESSAGES)
    choice = completion.choices[0]
    assert choice.message.content == "Let me look."
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert (call.id, call.function.name, call.function.arguments) == (  # type: ignore[union-attr]
        "call_1",
        "search",
        '{"q": "x"}',
    )
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 9
    assert completion.usage.prompt_tokens_details.cached_tokens == 2  # type: ignore[union-attr]
    assert completion.model == "gpt-test"


async def test_openai_stream_is_chunked_and_ends_with_usage(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.push(
        Reply(text="abcdef", tool_calls=[ScriptedToolCall("c", "f", '{"a":1}')], chunk_size=3)
    )
    stream = await openai_sdk.chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["abc", "def"]
    args = [
        tc.function.arguments
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
        for tc in c.choices[0].delta.tool_calls
        if tc.function
    ]
    assert "".join(a or "" for a in args) == '{"a":1}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None


async def test_requests_are_recorded_with_the_api_key_redacted(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.push(Reply(text="ok"))
    await openai_sdk.chat.completions.create(model="m", messages=MESSAGES)
    (request,) = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["messages"] == MESSAGES
    assert request.headers["authorization"] == "REDACTED"
    assert FAKE_API_KEY not in json.dumps(request.to_json())
    assert request.sent_api_key(FAKE_API_KEY)
    assert request.finished.is_set()


async def test_openai_error_replies_carry_status_body_and_headers(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.push(Reply.rate_limited("3"), Reply.context_overflow())
    client = openai_sdk
    with pytest.raises(openai.RateLimitError) as limited:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert limited.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.BadRequestError) as overflow:
        await client.chat.completions.create(model="m", messages=MESSAGES)
    assert overflow.value.code == "context_length_exceeded"
    assert "maximum context length is" in overflow.value.message


async def test_exhausted_script_answers_500(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError, match="fake script exhausted"):
        await openai_sdk.chat.completions.create(model="m", messages=MESSAGES)


async def test_default_reply_repeats_when_the_queue_is_empty(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.reset([Reply(text="first")], default=Reply(text="again"))
    client = openai_sdk
    texts = [
        (await client.chat.completions.create(model="m", messages=MESSAGES))
        .choices[0]
        .message.content
        for _ in range(3)
    ]
    assert texts == ["first", "again", "again"]


async def test_hang_outlasts_the_client_timeout_and_notices_the_disconnect(
    fake_openai: FakeOpenAIServer, openai_sdk: openai.AsyncOpenAI
) -> None:
    fake_openai.push(Reply.hang(30))
    with pytest.raises(openai.APITimeoutError):
        await openai_sdk.with_options(timeout=0.2).chat.completions.create(
            model="m", messages=MESSAGES
        )
    (request,) = fake_openai.requests
    assert request.disconnected.wait(5)


async def test_anthropic_sdk_parses_a_scripted_reply(
    fake_anthropic: FakeAnthropicServer, anthropic_sdk: anthropic.AsyncAnthropic
) -> None:
    fake_anthropic.push(
        Reply(
            text="Sure.",
            tool_calls=[ScriptedToolCall("toolu_1", "search", '{"q": "x"}')],
            usage=ScriptedUsage(input_tokens=5, output_tokens=2, cache_write_tokens=100),
        )
    )
    message = await anthropic_sdk.messages.create(
        model="claude-test", max_tokens=100, messages=MESSAGES
    )
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"q": "x"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    assert message.usage.cache_creation_input_tokens == 100
    (request,) = fake_anthropic.requests
    assert request.headers["authorization"] == "REDACTED"
    assert request.sent_api_key(FAKE_API_KEY)


async def test_anthropic_stream_has_every_event_type(
    fake_anthropic: FakeAnthropicServer, anthropic_sdk: anthropic.AsyncAnthropic
) -> None:
    fake_anthropic.push(
        Reply(text="hello", tool_calls=[ScriptedToolCall("toolu_1", "f", '{"a": 1}')])
    )
    stream = await anthropic_sdk.messages.create(
        model="m", max_tokens=10, messages=MESSAGES, stream=True
    )
    types = [event.type async for event in stream]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(types)


async def test_anthropic_mid_stream_error_event_raises_in_the_sdk(
    fake_anthropic: FakeAnthropicServer, anthropic_sdk: anthropic.AsyncAnthropic
) -> None:
    fake_anthropic.push(
        Reply(text="partial", stream_error=ScriptedError(type="overloaded_error", message="busy"))
    )
    stream = await anthropic_sdk.messages.create(
        model="m", max_tokens=10, messages=MESSAGES, stream=True
    )
    with pytest.raises(anthropic.APIStatusError) as raised:
        async for _ in stream:
            pass
    assert raised.value.type == "overloaded_error"


async def test_anthropic_overflow_uses_its_own_wording(
    fake_anthropic: FakeAnthropicServer, anthropic_sdk: anthropic.AsyncAnthropic
) -> None:
    fake_anthropic.push(Reply.context_overflow(), Reply.overloaded())
    client = anthropic_sdk
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        await client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
    with pytest.raises(anthropic.OverloadedError):
        await client.messages.create(model="m", max_tokens=10, messages=MESSAGES)


def test_script_file_in_yaml_becomes_replies(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(
        "replies:\n"
        "  - text: hi\n"
        "    usage: {input_tokens: 3}\n"
        "  - {fault: rate_limited, retry_after: '2'}\n"
        "  - tool_calls: [{id: c1, name: search, arguments: '{}'}]\n"
        "default: {text: again}\n"
    )
    script = load_script(path)
    first, second, third, fourth = (script.next() for _ in range(4))
    assert first is not None
    assert (first.text, first.usage) == ("hi", ScriptedUsage(input_tokens=3))
    assert second is not None
    assert second.error is not None
    assert second.error.headers == {"retry-after": "2"}
    assert third is not None
    assert third.tool_calls[0].name == "search"
    assert fourth is not None
    assert fourth.text == "again"


async def test_replies_can_be_pushed_and_requests_read_over_http(
    fake_anthropic: FakeAnthropicServer, anthropic_sdk: anthropic.AsyncAnthropic
) -> None:
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{fake_anthropic.port}") as http:
        pushed = await http.post("/_fake/replies", json={"replies": [{"text": "from admin"}]})
        assert pushed.json() == {"pending": 1}
        message = await anthropic_sdk.messages.create(model="m", max_tokens=10, messages=MESSAGES)
        assert message.content[0].text == "from admin"  # type: ignore[union-attr]
        recorded = (await http.get("/_fake/requests")).json()
    assert recorded[0]["body"]["model"] == "m"
    assert recorded[0]["headers"]["authorization"] == "REDACTED"


def test_standalone_server_prints_its_url_and_serves_the_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": [{"text": "from file"}]}))
    process = subprocess.Popen(
        [sys.executable, "-m", "services.llm_gateway.testing.fake_openai", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = json.loads(process.stdout.readline())["base_url"]
        client = openai.OpenAI(api_key=FAKE_API_KEY, base_url=base_url, max_retries=0)
        completion = client.chat.completions.create(model="m", messages=MESSAGES)
        assert completion.choices[0].message.content == "from file"
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=10)
    assert "Warning" not in errors
