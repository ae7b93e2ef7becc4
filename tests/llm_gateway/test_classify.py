"""Error classification: one place, every rule tested, keys never leak."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from services.llm_gateway.classify import (
    OVERFLOW_PATTERNS,
    classify,
    classify_status,
    is_context_overflow,
    parse_retry_after,
    scrub,
    truncated_stream,
)
from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    RateLimited,
    RetryableProviderError,
)

SECRET = "sk-live-AbCdEf0123456789"
REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
_OPENAI = openai.OpenAI(
    api_key="x", base_url="http://127.0.0.1/v1", http_client=httpx2.Client(verify=False)
)
_ANTHROPIC = anthropic.Anthropic(
    api_key="x", base_url="http://127.0.0.1", http_client=httpx2.Client(verify=False)
)

OVERFLOW_MESSAGES = [
    "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
    "prompt is too long: 210000 tokens > 200000 maximum",
    "Please reduce the length of the messages or completion. Request would exceed context limit",
    "This model's current length is 9000 while limit is 8192",
    "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 5000 "
    "tokens and 100 `max_new_tokens`; the maximum input length is 4096",
    "the request exceeds the available context size, try increasing it",
]


def _openai_status_error(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> openai.APIStatusError:
    response = httpx2.Response(status, json=body, headers=headers or {}, request=REQUEST)
    return _OPENAI._make_status_error_from_response(response)


def _anthropic_status_error(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> anthropic.APIStatusError:
    response = httpx2.Response(status, json=body, headers=headers or {}, request=REQUEST)
    return _ANTHROPIC._make_status_error_from_response(response)


def test_every_overflow_pattern_has_a_row_in_the_table() -> None:
    for pattern in OVERFLOW_PATTERNS:
        assert any(pattern.search(message) for message in OVERFLOW_MESSAGES), pattern.pattern


@pytest.mark.parametrize("message", OVERFLOW_MESSAGES)
@pytest.mark.parametrize("status", [400, 413, 422])
def test_overflow_wordings_on_request_errors_mean_context_window_exceeded(
    status: int, message: str
) -> None:
    error = classify_status(status, provider="p", message=message)
    assert isinstance(error, ContextWindowExceeded)
    assert error.status == status


@pytest.mark.parametrize("message", OVERFLOW_MESSAGES)
@pytest.mark.parametrize("status", [429, 500, 503])
def test_overflow_wording_on_other_statuses_is_not_an_overflow(status: int, message: str) -> None:
    assert not isinstance(
        classify_status(status, provider="p", message=message), ContextWindowExceeded
    )


def test_structured_overflow_code_wins_over_an_unfamiliar_message() -> None:
    assert is_context_overflow("context_length_exceeded", "too many tokens, somehow")
    assert not is_context_overflow("invalid_value", "too many tokens, somehow")


@pytest.mark.parametrize(
    ("status", "kind", "caller_error"),
    [
        (400, FatalProviderError, True),
        (404, FatalProviderError, False),
        (413, FatalProviderError, True),
        (422, FatalProviderError, True),
        (401, FatalProviderError, False),
        (403, FatalProviderError, False),
        (402, FatalProviderError, False),
        (429, RateLimited, None),
        (408, RetryableProviderError, None),
        (500, RetryableProviderError, None),
        (502, RetryableProviderError, None),
        (503, RetryableProviderError, None),
        (529, RetryableProviderError, None),
    ],
)
def test_statuses_map_to_the_documented_kinds(
    status: int, kind: type[Exception], caller_error: bool | None
) -> None:
    error = classify_status(status, provider="p", message="boom")
    assert type(error) is kind
    if caller_error is not None:
        assert isinstance(error, FatalProviderError)
        assert error.caller_error is caller_error


def test_exhausted_quota_is_not_worth_retrying() -> None:
    error = classify_status(429, provider="p", message="quota", code="insufficient_quota")
    assert isinstance(error, FatalProviderError)
    assert not error.caller_error


def test_retry_after_seconds_http_date_and_milliseconds() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    delay = parse_retry_after({"retry-after": later})
    assert delay is not None
    assert 25 < delay <= 30
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_rate_limit_from_the_openai_sdk_carries_retry_after() -> None:
    sdk_error = _openai_status_error(
        429, {"error": {"message": "slow down", "type": "requests"}}, {"retry-after": "2"}
    )
    error = classify(sdk_error, provider="groq/llama")
    assert isinstance(error, RateLimited)
    assert error.retry_after_s == 2.0
    assert error.message.startswith("groq/llama: HTTP 429: slow down")


def test_openai_overflow_is_recognised_by_its_code() -> None:
    body = {
        "error": {
            "message": "too big",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    assert isinstance(
        classify(_openai_status_error(400, body), provider="p"), ContextWindowExceeded
    )


def test_anthropic_overloaded_and_overflow_from_the_sdk() -> None:
    overloaded = _anthropic_status_error(
        529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    assert type(classify(overloaded, provider="a")) is RetryableProviderError
    too_long = _anthropic_status_error(
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 9 tokens > 8 maximum",
            },
        },
    )
    assert isinstance(classify(too_long, provider="a"), ContextWindowExceeded)


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", RetryableProviderError),
        ("api_error", RetryableProviderError),
        ("rate_limit_error", RateLimited),
        ("invalid_request_error", FatalProviderError),
        ("authentication_error", FatalProviderError),
        ("something_new", RetryableProviderError),
    ],
)
def test_anthropic_mid_stream_error_events_are_classified_by_type(
    error_type: str, kind: type[Exception]
) -> None:
    body = {"type": "error", "error": {"type": error_type, "message": "mid-stream"}}
    sdk_error = _anthropic_status_error(200, body)
    assert type(classify(sdk_error, provider="a")) is kind


def test_openai_mid_stream_error_is_classified_by_type() -> None:
    server = openai.APIError("boom", REQUEST, body={"message": "boom", "type": "server_error"})
    assert type(classify(server, provider="o")) is RetryableProviderError
    overflow = openai.APIError(
        "x",
        REQUEST,
        body={"message": "maximum context length is 10", "type": "invalid_request_error"},
    )
    assert isinstance(classify(overflow, provider="o"), ContextWindowExceeded)


@pytest.mark.parametrize(
    "sdk_error",
    [
        openai.APITimeoutError(REQUEST),
        anthropic.APITimeoutError(REQUEST),
        openai.APIConnectionError(request=REQUEST),
        anthropic.APIConnectionError(request=REQUEST),
        httpx2.RemoteProtocolError("peer closed connection without sending complete message body"),
        httpx2.ReadTimeout("read timed out"),
    ],
)
def test_timeouts_and_broken_connections_are_retryable(sdk_error: BaseException) -> None:
    assert type(classify(sdk_error, provider="p")) is RetryableProviderError


def test_truncated_stream_is_retryable() -> None:
    error = truncated_stream("p", "message_stop")
    assert isinstance(error, RetryableProviderError)
    assert "message_stop" in error.message


def test_api_keys_in_upstream_bodies_never_reach_the_message() -> None:
    body = {
        "error": {
            "message": f"Incorrect API key provided: {SECRET}. Bearer {SECRET}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    error = classify(_openai_status_error(401, body), provider="p", secrets=[SECRET])
    assert SECRET not in error.message
    assert SECRET not in str(error)
    assert "[REDACTED]" in error.message
    assert "Incorrect API key provided" in error.message


def test_scrub_removes_configured_secrets_and_key_shapes() -> None:
    text = scrub(
        "custom-secret-value and gsk_abcdefghijkl and sk-ant-api03-xyzxyzxyz",
        ["custom-secret-value"],
    )
    assert text == "[REDACTED] and [REDACTED] and [REDACTED]"


def test_long_upstream_messages_are_shortened() -> None:
    error = classify_status(500, provider="p", message="x" * 5000)
    assert len(error.message) < 600
    assert error.message.endswith("…")
