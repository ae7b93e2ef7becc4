"""Every provider failure is classified here, once, into the `errors.py` tree.

Inputs are what the SDKs raise (status errors, timeouts, connection errors, OpenAI `data: {"error"}`
and Anthropic `error` events inside a 200 stream), raw transport errors, or a status with a body.
The rules, in order:

* context overflow: a structured code (`context_length_exceeded`) first, then `OVERFLOW_PATTERNS`,
  only on 400/413/422 → `ContextWindowExceeded` (never retried, never a breaker failure);
* 429 → `RateLimited` with Retry-After (`retry-after-ms`, seconds or an HTTP date), except an
  exhausted quota, which no retry fixes → `FatalProviderError`;
* 408/409/425, 5xx, 529, timeouts, connection errors, truncated streams → `RetryableProviderError`;
* 400/404/413/422 → `FatalProviderError(caller_error=True)`: the request's fault;
* 401/403 and every other 4xx → `FatalProviderError`: the provider's configuration, a breaker
  failure.

Messages are scrubbed of API keys before they leave this module.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

import anthropic
import httpx2
import openai

from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    ProviderError,
    RateLimited,
    RetryableProviderError,
)

OVERFLOW_CODES = frozenset({"context_length_exceeded", "context_window_exceeded"})
"""Structured error codes that mean the request does not fit the context window."""

OVERFLOW_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"maximum context length is",
        r"prompt is too long",
        r"exceeds? (?:the )?context limit",
        r"current length is \d+ while limit is \d+",
        r"maximum input length",
        r"exceeds the available context size",
    )
)
"""How providers word a context overflow (OpenAI, Anthropic, Groq, vLLM, TGI, llama.cpp ...)."""

OVERFLOW_STATUSES = frozenset({400, 413, 422})
# 404 is not here: a vendor's 404 means the configured model or endpoint does not exist there, a
# provider-configuration failure that should fall back and count against that provider's breaker.
CALLER_ERROR_STATUSES = frozenset({400, 413, 422})
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})

ANTHROPIC_ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Anthropic error types by the status they stand for (mid-stream `error` events come in a 200)."""

OPENAI_ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "invalid_api_key": 401,
    "insufficient_quota": 429,
    "rate_limit_exceeded": 429,
    "requests": 429,
    "tokens": 429,
    "server_error": 500,
}
"""OpenAI error types and codes by status, for errors sent inside a stream."""

_SECRET_PATTERN = re.compile(
    r"(?:sk-(?:ant-)?|gsk_|csk-|xai-|key-)[A-Za-z0-9_\-*]{6,}|Bearer\s+[A-Za-z0-9._\-]{6,}"
)
_MAX_MESSAGE = 500


def classify(error: BaseException, *, provider: str, secrets: Sequence[str] = ()) -> ProviderError:
    """The `ProviderError` for anything an SDK call or stream raised."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(
        error,
        openai.APITimeoutError | anthropic.APITimeoutError | httpx2.TimeoutException | TimeoutError,
    ):
        return RetryableProviderError(f"{provider}: request timed out")
    if isinstance(error, openai.APIStatusError | anthropic.APIStatusError):
        return _from_status_error(error, provider, secrets)
    if isinstance(error, openai.APIConnectionError | anthropic.APIConnectionError):
        return RetryableProviderError(f"{provider}: connection failed")
    if isinstance(error, httpx2.TransportError):
        detail = scrub(str(error) or type(error).__name__, secrets)
        return RetryableProviderError(f"{provider}: connection failed: {detail}")
    if isinstance(error, openai.APIError):
        return _from_openai_stream_error(error, provider, secrets)
    detail = scrub(str(error) or type(error).__name__, secrets)
    return RetryableProviderError(f"{provider}: unreadable response: {detail}")


def classify_status(
    status: int,
    *,
    provider: str,
    message: str = "",
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
) -> ProviderError:
    """The `ProviderError` for an HTTP status with the provider's message and structured code."""
    text = f"{provider}: HTTP {status}: {_shorten(scrub(message, secrets)) or 'no detail'}"
    retry_after = parse_retry_after(headers or {})
    if status in OVERFLOW_STATUSES and is_context_overflow(code, message):
        return ContextWindowExceeded(text, status=status)
    if status == 429 and code == "insufficient_quota":
        return FatalProviderError(text, status=status)
    if status == 429:
        return RateLimited(text, status=status, retry_after_s=retry_after)
    if status in RETRYABLE_STATUSES or status >= 500:
        return RetryableProviderError(text, status=status, retry_after_s=retry_after)
    return FatalProviderError(text, status=status, caller_error=status in CALLER_ERROR_STATUSES)


def is_context_overflow(code: str | None, message: str) -> bool:
    """Structured code first, then the message table."""
    if code and code in OVERFLOW_CODES:
        return True
    return any(pattern.search(message) for pattern in OVERFLOW_PATTERNS)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` in seconds or as an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return max(millis / 1000, 0.0)
    value = lowered.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return max(seconds, 0.0)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def truncated_stream(provider: str, missing: str) -> RetryableProviderError:
    """A stream that ended without its terminal event: a provider failure."""
    return RetryableProviderError(f"{provider}: stream ended before {missing}")


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` without the given secrets or anything shaped like an API key."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "[REDACTED]")
    return _SECRET_PATTERN.sub("[REDACTED]", text)


def _from_status_error(
    error: openai.APIStatusError | anthropic.APIStatusError, provider: str, secrets: Sequence[str]
) -> ProviderError:
    message = _body_message(error.body) or error.message
    if isinstance(error, anthropic.APIStatusError):
        code = error.error_code or (str(error.type) if error.type else None)
        if error.status_code < 400:
            return _from_error_type(str(error.type or ""), provider, message, code, secrets)
    else:
        code = error.code or error.type
    return classify_status(
        error.status_code,
        provider=provider,
        message=message,
        code=code,
        headers=error.response.headers,
        secrets=secrets,
    )


def _from_openai_stream_error(
    error: openai.APIError, provider: str, secrets: Sequence[str]
) -> ProviderError:
    code = error.code or error.type or ""
    return _from_error_type(
        code,
        provider,
        _body_message(error.body) or error.message,
        code,
        secrets,
        OPENAI_ERROR_STATUS,
    )


def _from_error_type(
    error_type: str,
    provider: str,
    message: str,
    code: str | None,
    secrets: Sequence[str],
    statuses: Mapping[str, int] = ANTHROPIC_ERROR_STATUS,
) -> ProviderError:
    """An error reported inside a 200 stream, by its type."""
    status = statuses.get(error_type)
    if status is None:
        text = f"{provider}: stream error {error_type or 'unknown'}: {scrub(message, secrets)}"
        return RetryableProviderError(_shorten(text))
    return classify_status(status, provider=provider, message=message, code=code, secrets=secrets)


def _body_message(body: object) -> str:
    if isinstance(body, dict):
        inner: Any = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return body if isinstance(body, str) else ""


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"
