"""What every web search provider implements, and what it returns.

A provider turns one query into at most `limit` `WebResult`s over HTTP, or raises a
`WebProviderError` saying whether trying again may help. It never retries, caches or keeps a
breaker: `guard.GuardedProvider` does that for every provider alike.

    WebProviderError                 one try failed
    ├── retryable=True               429, 5xx, timeout, connection: try again (after Retry-After)
    └── retryable=False              the key was refused, the request was refused, a malformed reply
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

WEB_ID_PREFIX = "web_"


def web_result_id(url: str) -> str:
    """`web_` + 16 hex digits of the URL's SHA-256: stable, and never a chunk id (those end in
    `__chunk_<n>`), so a web result cannot be mistaken for a collection's."""
    return WEB_ID_PREFIX + hashlib.sha256(url.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class WebResult:
    """One web page a provider returned."""

    title: str
    url: str
    snippet: str
    """The provider's excerpt of the page, whitespace collapsed."""
    provider: str
    """The configured name of the provider that returned it."""
    fetched_at: datetime
    """When the provider answered (UTC)."""

    @property
    def id(self) -> str:
        return web_result_id(self.url)


class WebProviderError(Exception):
    """One try against a provider failed. The message never contains the API key."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after_s: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        """Trying again may succeed (429, 5xx, timeout, connection failure)."""
        self.retry_after_s = retry_after_s
        """The provider's Retry-After, when it sent one."""
        self.status = status
        """The HTTP status, when there was a response."""


class WebProvider(Protocol):
    """One configured web search API."""

    @property
    def name(self) -> str:
        """The configured name, e.g. `searxng` or `brave`: what results and errors show."""
        ...

    async def search(self, query: str, limit: int, *, timeout_s: float) -> list[WebResult]:
        """At most `limit` results for `query`; one HTTP exchange bounded by `timeout_s`."""
        ...

    async def aclose(self) -> None:
        """Release the HTTP client."""
        ...


def collapse(text: object) -> str:
    """A JSON value as one line of text (providers send snippets with newlines and runs of
    spaces; a missing or non-string value is empty)."""
    return " ".join(text.split()) if isinstance(text, str) else ""


def utc_now() -> datetime:
    return datetime.now(UTC)


def parse_results(items: Any, provider: str, snippet_key: str, limit: int) -> list[WebResult]:
    """The results of a reply's list of `{url, title, <snippet_key>}` objects: entries without an
    http(s) URL are skipped, the same URL is kept once, at most `limit`."""
    fetched_at = utc_now()
    results: list[WebResult] = []
    seen: set[str] = set()
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        title = collapse(item.get("title")) or url
        results.append(WebResult(title, url, collapse(item.get(snippet_key)), provider, fetched_at))
        if len(results) == limit:
            break
    return results
