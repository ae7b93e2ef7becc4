"""The `web_search` section of the search tool's settings: off unless a provider is listed.

API keys are never part of the settings: a keyed provider names the environment variable that
holds its key (`api_key_env`, by default `BRAVE_API_KEY` / `TAVILY_API_KEY`); the key is read when
the provider is built, and a missing key stops the start naming the variable, never a value.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_DEFAULT_KEY_ENV = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
_DEFAULT_BASE_URL = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}


class WebProviderSettings(BaseModel):
    """One web search API, tried in the order listed."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", max_length=64)
    """What results, errors and logs call it; defaults to `kind`."""
    kind: Literal["searxng", "brave", "tavily"]
    """`searxng`: a SearxNG instance's JSON API (no key); `brave`: Brave Search API;
    `tavily`: Tavily's search API."""
    base_url: str = ""
    """The API's root; required for `searxng` (your instance), defaulted for the others."""
    api_key_env: str = ""
    """The environment variable holding the key (keyed kinds); the key is never configured."""
    categories: str = "general"
    """SearxNG only: the `categories` asked for."""
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Longest one HTTP try may take (the caller's deadline is shorter when it has one)."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    """Tries of one search against this provider (retryable failures only: 429, 5xx,
    timeouts, connection failures)."""
    base_backoff_s: float = Field(default=0.5, ge=0)
    """Wait before the first retry without a Retry-After; doubled on each retry."""
    max_retry_after_s: float = Field(default=10.0, ge=0)
    """A Retry-After longer than this is not waited for: the search goes to the next provider
    (or fails with that delay as its RetryInfo)."""
    breaker_fail_max: int = Field(default=5, ge=1)
    """Consecutive failed tries that open this provider's circuit breaker."""
    breaker_reset_s: float = Field(default=30.0, ge=0)
    """How long an open breaker refuses before one probe is let through."""

    @model_validator(mode="after")
    def _defaults(self) -> WebProviderSettings:
        self.name = self.name or self.kind
        if not self.base_url:
            if self.kind == "searxng":
                raise ValueError("a searxng provider needs base_url (the instance's URL)")
            self.base_url = _DEFAULT_BASE_URL[self.kind]
        if not self.api_key_env and self.kind in _DEFAULT_KEY_ENV:
            self.api_key_env = _DEFAULT_KEY_ENV[self.kind]
        return self

    @property
    def needs_api_key(self) -> bool:
        return self.kind in _DEFAULT_KEY_ENV

    def api_key(self) -> str:
        """The key from the environment; `ValueError` naming the variable when it is unset."""
        if not self.needs_api_key:
            return ""
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"web_search provider {self.name!r} needs an API key in the environment "
                f"variable {self.api_key_env} (keys are read from the environment only)"
            )
        return key


class WebSearchSettings(BaseModel):
    """Web search (`WebSearch` RPC, the agent's `web_search` tool): off unless `providers`
    lists one. Results are never stored in a collection."""

    model_config = ConfigDict(extra="forbid")

    providers: list[WebProviderSettings] = Field(default_factory=list)
    """Tried in order: a provider whose breaker is open or whose tries all failed gives way to
    the next. Empty: web search is off (WebSearch answers FAILED_PRECONDITION)."""
    default_limit: int = Field(default=5, ge=1, le=20)
    """Results when a request does not say."""
    max_query_chars: int = Field(default=400, ge=1, le=2000)
    """Longest query accepted."""
    cache_entries: int = Field(default=256, ge=0)
    """Recent (query, limit) answers kept; 0: no cache."""
    cache_ttl_s: float = Field(default=300.0, ge=0)
    """How long a cached answer is served."""

    @model_validator(mode="after")
    def _unique_names_and_keys(self) -> WebSearchSettings:
        names = [p.name for p in self.providers]
        if len(names) != len(set(names)):
            raise ValueError("two web_search providers share a name")
        for provider in self.providers:
            provider.api_key()
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.providers)
