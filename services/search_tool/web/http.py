"""One HTTP exchange with a provider, classified: what every provider module shares.

Statuses: 2xx → the JSON body; 429, 5xx → retryable (with Retry-After, seconds or an HTTP date);
401, 403 → the provider refused the key (not retryable: the operator must fix it); other 4xx → not
retryable. A timeout or a connection failure is retryable; a 2xx body that is not a JSON object is
not. Messages name the provider and the status, never the request's headers (the key travels in
them) nor its body.
"""

from __future__ import annotations

import email.utils
import time
from datetime import UTC
from typing import Any

import httpx

from services.search_tool.web.base import WebProviderError

MAX_BODY_CHARS = 200
"""Of an error reply's body, what a message quotes (the provider's own explanation)."""


async def exchange_json(
    client: httpx.AsyncClient, request: httpx.Request, provider: str, *, timeout_s: float
) -> dict[str, Any]:
    """Send `request` (built with `timeout=timeout_s`); the reply's JSON object, or a classified
    `WebProviderError`."""
    try:
        response = await client.send(request)
    except httpx.TimeoutException:
        raise WebProviderError(
            f"{provider} did not answer within {timeout_s:g} s", retryable=True
        ) from None
    except httpx.TransportError as error:
        raise WebProviderError(
            f"{provider} could not be reached ({type(error).__name__})", retryable=True
        ) from None
    if response.status_code >= 300:
        raise _status_error(response, provider)
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise WebProviderError(
            f"{provider} answered {response.status_code} with a body that is not a JSON object",
            retryable=False,
            status=response.status_code,
        )
    return body


def _status_error(response: httpx.Response, provider: str) -> WebProviderError:
    status = response.status_code
    said = " ".join(response.text.split())[:MAX_BODY_CHARS]
    detail = f": {said}" if said else ""
    if status in (401, 403):
        return WebProviderError(
            f"{provider} refused the request ({status}): check its API key or that its JSON API "
            f"is enabled{detail}",
            retryable=False,
            status=status,
        )
    retryable = status == 429 or status >= 500
    return WebProviderError(
        f"{provider} answered {status}{detail}",
        retryable=retryable,
        retry_after_s=retry_after_s(response.headers.get("retry-after")) if retryable else None,
        status=status,
    )


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
