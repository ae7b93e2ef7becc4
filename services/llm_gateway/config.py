"""Gateway settings: providers, routes, retries, breakers and prices, validated at start-up.

API keys are never part of the settings: an entry names the environment variable that holds its key
(`api_key_env`), and `resolve_api_key` reads it when the provider is built.
"""

from __future__ import annotations

import logging
import os
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import QuarrySettings, ServerSettings

log = logging.getLogger(__name__)

DEFAULT_PORT = 50052
DEFAULT_MAX_CONCURRENT_CALLS = 128
"""Calls the gateway serves at once by default (vendor calls wait on the network, not the CPU)."""


EXTRACTIVE = "extractive"
ProviderKind = Literal["openai", "anthropic", "extractive", "scripted"]

LOCAL_ENDPOINTS = frozenset({"vllm", "ollama", "llama-cpp-python", "llama-server"})
"""Endpoint presets of servers that run beside Quarry and need no API key."""
_DEFAULT_KEY_ENV: dict[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
_DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"


class GatewayServerSettings(ServerSettings):
    """`ServerSettings` with this service's port and admission bound as defaults (also when the
    YAML `server` section sets only some keys)."""

    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_concurrent_rpcs: int | None = Field(default=DEFAULT_MAX_CONCURRENT_CALLS, ge=1)


class RetrySettings(BaseModel):
    """Bounded retries against one provider before falling back."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=2, ge=1, le=10)
    """Tries against this provider per request, the first one included."""
    base_backoff_s: float = Field(default=0.25, ge=0)
    """Backoff before the first retry; doubles each retry (full jitter)."""
    max_backoff_s: float = Field(default=4.0, ge=0)
    """Upper bound of one backoff, also the cap applied to a server's Retry-After."""
    jitter: bool = True
    """Full jitter: sleep a uniform random fraction of the exponential backoff."""


class BreakerSettings(BaseModel):
    """The provider's circuit breaker."""

    model_config = ConfigDict(extra="forbid")

    fail_max: int = Field(default=5, ge=1)
    """Consecutive failures that open the breaker."""
    reset_timeout_s: float = Field(default=30.0, gt=0)
    """How long the breaker stays open before one half-open probe."""


class PriceSettings(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(default=0.0, ge=0)
    """Uncached input tokens."""
    output_per_mtok: float = Field(default=0.0, ge=0)
    cache_read_per_mtok: float | None = Field(default=None, ge=0)
    """Cached input tokens read; defaults to the input price."""
    cache_write_per_mtok: float | None = Field(default=None, ge=0)
    """Input tokens written to the cache; defaults to the input price."""


class ProviderSettings(BaseModel):
    """One configured model at one vendor, or an offline provider."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """Entry name used in routes; defaults to `kind/model` (`extractive` for the extractive one)."""
    kind: ProviderKind
    model: str = ""
    """Model id sent to the vendor; for `scripted`, free text."""
    endpoint: str = ""
    """OpenAI-compatible preset (`openai`, `groq`, `cerebras`, `vllm`, `ollama`, ...)."""
    base_url: str = ""
    """Overrides the preset's or SDK's base URL."""
    api_key_env: str = ""
    """Environment variable holding the API key; defaults per kind/preset."""
    context_window_tokens: int | None = Field(default=None, gt=0)
    """Tokens the model holds; default: the endpoint preset's table, else 128,000."""
    default_max_output_tokens: int = Field(default=4096, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    """Per-try timeout, a whole stream included."""
    retry: RetrySettings = Field(default_factory=RetrySettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    price: PriceSettings | None = None
    prompt_caching: bool = True
    """Anthropic: cache the static system prompt."""
    tool_calls: Literal["native", "json_in_text", "json_schema"] = "native"
    """OpenAI-compatible: `json_in_text` for models without native tool calls — the tools are
    described in a system message and calls are read from JSON in the reply's text;
    `json_schema` does the same and sends the tools as one JSON schema in `response_format`,
    which servers with grammar-constrained sampling (llama.cpp's) enforce: every reply is a call."""
    script: str = ""
    """Scripted: path of the script file to replay (`scripted_reply.ScriptedReplies`)."""
    record_to: str = ""
    """Write every reply and fault this provider answers to a script file (the one format the
    scripted provider replays and the fake servers serve)."""

    @model_validator(mode="after")
    def _fill_defaults(self) -> ProviderSettings:
        if self.kind == EXTRACTIVE:
            self.model = self.model or "extractive-v1"
            self.context_window_tokens = self.context_window_tokens or 1_000_000
        if self.kind == "scripted":
            self.model = self.model or "scripted"
            if not self.script:
                raise ValueError("a scripted provider needs `script` (path of its script file)")
        if not self.model:
            raise ValueError(f"a {self.kind} provider needs `model`")
        if self.tool_calls != "native" and self.kind != "openai":
            raise ValueError(f"`tool_calls: {self.tool_calls}` applies to openai providers only")
        if not self.name:
            prefix = self.endpoint or self.kind
            self.name = EXTRACTIVE if self.kind == EXTRACTIVE else f"{prefix}/{self.model}"
        if not self.api_key_env and self.kind in _DEFAULT_KEY_ENV:
            preset = self.endpoint.upper().replace("-", "_")
            default = _DEFAULT_KEY_ENV[self.kind]
            self.api_key_env = f"{preset}_API_KEY" if preset and preset != "OPENAI" else default
        return self

    @property
    def needs_api_key(self) -> bool:
        """Local OpenAI-compatible servers (vLLM, Ollama, llama.cpp's) usually run without a
        key."""
        return self.kind in _DEFAULT_KEY_ENV and self.endpoint not in LOCAL_ENDPOINTS


class GatewaySettings(QuarrySettings):
    """Settings of the LLM gateway service (`llm_gateway` section, `QUARRY_LLM_GATEWAY_*`)."""

    yaml_section: ClassVar[str] = "llm_gateway"
    model_config = SettingsConfigDict(
        env_nested_delimiter="__", extra="forbid", env_prefix="QUARRY_LLM_GATEWAY_"
    )

    server: GatewayServerSettings | ServerSettings = Field(default_factory=GatewayServerSettings)
    providers: list[ProviderSettings] = Field(default_factory=list)
    """Configured providers; `extractive` is always available even when not listed."""
    routes: dict[str, list[str]] = Field(default_factory=dict)
    """Route name → provider entry names in fallback order."""
    default_route: str = "agent"
    """Route used when a request names none."""
    max_structured_attempts: int = Field(default=3, ge=1, le=10)
    """GenerateStructured: asks (the first included) before giving up on invalid JSON."""

    @model_validator(mode="after")
    def _validate(self) -> GatewaySettings:
        if not self.providers and not self.routes:
            self.providers, self.routes = _environment_defaults()
        if not any(p.kind == EXTRACTIVE for p in self.providers):
            self.providers.append(ProviderSettings(kind=EXTRACTIVE))
        _check_unique_names(self.providers)
        names = {p.name for p in self.providers}
        for route, chain in self.routes.items():
            _check_route(route, chain, names)
        if self.default_route not in self.routes:
            raise ValueError(
                f"default_route {self.default_route!r} is not a configured route "
                f"(routes: {sorted(self.routes)})"
            )
        used = {name for chain in self.routes.values() for name in chain}
        for provider in self.providers:
            if provider.name in used:
                _check_api_key(provider)
        return self

    def provider(self, name: str) -> ProviderSettings:
        return next(p for p in self.providers if p.name == name)


def resolve_api_key(provider: ProviderSettings) -> str:
    """The provider's key from the environment; empty for keyless providers."""
    if not provider.api_key_env:
        return ""
    return os.environ.get(provider.api_key_env, "")


def _environment_defaults() -> tuple[list[ProviderSettings], dict[str, list[str]]]:
    """No explicit config: use a vendor whose key is in the environment, extractive last."""
    providers = [ProviderSettings(kind=EXTRACTIVE)]
    chain = [EXTRACTIVE]
    if os.environ.get(_DEFAULT_KEY_ENV["openai"]):
        providers.insert(0, ProviderSettings(kind="openai", model=_DEFAULT_OPENAI_MODEL))
    elif os.environ.get(_DEFAULT_KEY_ENV["anthropic"]):
        providers.insert(0, ProviderSettings(kind="anthropic", model=_DEFAULT_ANTHROPIC_MODEL))
    if len(providers) > 1:
        chain.insert(0, providers[0].name)
    return providers, {"agent": chain}


def _check_unique_names(providers: list[ProviderSettings]) -> None:
    seen: set[str] = set()
    for provider in providers:
        if provider.name in seen:
            raise ValueError(f"provider name {provider.name!r} is configured twice")
        seen.add(provider.name)


def _check_route(route: str, chain: list[str], names: set[str]) -> None:
    if not chain:
        raise ValueError(f"route {route!r} is empty: list at least one provider")
    for name in chain:
        if name not in names:
            raise ValueError(
                f"route {route!r} names unknown provider {name!r} (configured: {sorted(names)})"
            )
    if len(set(chain)) != len(chain):
        raise ValueError(f"route {route!r} lists a provider twice")
    if EXTRACTIVE in chain and chain[-1] != EXTRACTIVE:
        log.warning(
            "extractive is not the last provider of a route; providers after it are only reached "
            "when it fails",
            extra={"route": route},
        )


def _check_api_key(provider: ProviderSettings) -> None:
    if provider.needs_api_key and not os.environ.get(provider.api_key_env):
        raise ValueError(
            f"provider {provider.name!r} needs an API key in the environment variable "
            f"{provider.api_key_env} (keys are read from the environment only)"
        )
