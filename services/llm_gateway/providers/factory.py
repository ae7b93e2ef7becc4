"""Settings → provider instances. Adding a vendor adds a module and one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from services.llm_gateway.config import GatewaySettings, ProviderSettings, resolve_api_key
from services.llm_gateway.providers.anthropic import AnthropicProvider
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.extractive import CONTEXT_WINDOW_TOKENS as EXTRACTIVE_WINDOW
from services.llm_gateway.providers.extractive import ExtractiveProvider
from services.llm_gateway.providers.openai import ENDPOINT_PRESETS, OpenAIProvider, OpenAIQuirks
from services.llm_gateway.providers.recording import RecordingProvider
from services.llm_gateway.providers.scripted import ScriptedProvider
from services.llm_gateway.scripted_reply import ScriptedReplies

SCRIPTED_WINDOW = 1_000_000
DEFAULT_WINDOW = 128_000
"""Context window of a vendor model neither configured nor in the endpoint preset's table."""
ANTHROPIC_WINDOW = 200_000
"""Context window of current Claude models unless configured (some offer more on request)."""


def build_providers(settings: GatewaySettings) -> dict[str, Provider]:
    """Every configured provider, by entry name, wrapped for recording where asked."""
    providers: dict[str, Provider] = {}
    for entry in settings.providers:
        provider = build_provider(entry)
        if entry.record_to:
            provider = RecordingProvider(provider, entry.record_to)
        providers[entry.name] = provider
    return providers


def build_provider(entry: ProviderSettings) -> Provider:
    """One provider from its settings entry."""
    return _BUILDERS[entry.kind](entry)


def _extractive(entry: ProviderSettings) -> Provider:
    return ExtractiveProvider(
        name=entry.name,
        model=entry.model,
        context_window_tokens=entry.context_window_tokens or EXTRACTIVE_WINDOW,
    )


def _scripted(entry: ProviderSettings) -> Provider:
    return ScriptedProvider(
        ScriptedReplies.load(entry.script),
        name=entry.name,
        model=entry.model,
        context_window_tokens=entry.context_window_tokens or SCRIPTED_WINDOW,
    )


def _openai(entry: ProviderSettings) -> Provider:
    endpoint = entry.endpoint or "openai"
    preset = ENDPOINT_PRESETS.get(endpoint)
    if preset is None:
        raise ValueError(
            f"provider {entry.name!r}: unknown endpoint {endpoint!r} "
            f"(known: {', '.join(sorted(ENDPOINT_PRESETS))}); set base_url and omit endpoint for "
            "another OpenAI-compatible server"
        )
    custom_server = bool(entry.base_url) and not entry.endpoint
    quirks = replace(
        OpenAIQuirks() if custom_server else preset.quirks,
        tool_calls_in_text=entry.tool_calls == "json_in_text",
        tool_calls_by_schema=entry.tool_calls == "json_schema",
    )
    if quirks.tool_calls_by_schema and not (
        quirks.supports_json_schema_response or quirks.schema_in_json_object
    ):
        raise ValueError(
            f"provider {entry.name!r}: `tool_calls: json_schema` needs an endpoint that enforces "
            f"a JSON schema in `response_format`, and the {endpoint!r} preset sends none; use "
            "`json_in_text`, or `base_url` without `endpoint` for a server that takes OpenAI's "
            "json_schema response format"
        )
    return OpenAIProvider(
        name=entry.name,
        model=entry.model,
        api_key=resolve_api_key(entry),
        base_url=entry.base_url or preset.base_url,
        context_window_tokens=(
            entry.context_window_tokens or preset.context_windows.get(entry.model, DEFAULT_WINDOW)
        ),
        default_max_output_tokens=entry.default_max_output_tokens,
        timeout_s=entry.timeout_s,
        quirks=quirks,
    )


def _anthropic(entry: ProviderSettings) -> Provider:
    return AnthropicProvider(
        name=entry.name,
        model=entry.model,
        api_key=resolve_api_key(entry),
        base_url=entry.base_url or None,
        context_window_tokens=entry.context_window_tokens or ANTHROPIC_WINDOW,
        default_max_output_tokens=entry.default_max_output_tokens,
        timeout_s=entry.timeout_s,
        prompt_caching=entry.prompt_caching,
    )


_BUILDERS: dict[str, Callable[[ProviderSettings], Provider]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "extractive": _extractive,
    "scripted": _scripted,
}
