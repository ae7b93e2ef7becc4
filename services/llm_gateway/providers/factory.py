"""Settings → provider instances. Adding a vendor adds a module and one entry here."""

from __future__ import annotations

from collections.abc import Callable

from services.llm_gateway.config import GatewaySettings, ProviderSettings
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.extractive import CONTEXT_WINDOW_TOKENS as EXTRACTIVE_WINDOW
from services.llm_gateway.providers.extractive import ExtractiveProvider
from services.llm_gateway.providers.recording import RecordingProvider
from services.llm_gateway.providers.scripted import Conversation, ScriptedProvider

SCRIPTED_WINDOW = 1_000_000
DEFAULT_WINDOW = 128_000
"""Context window of a vendor model neither configured nor in the endpoint preset's table."""


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
        Conversation.load(entry.script),
        name=entry.name,
        model=entry.model,
        context_window_tokens=entry.context_window_tokens or SCRIPTED_WINDOW,
    )


_BUILDERS: dict[str, Callable[[ProviderSettings], Provider]] = {
    "extractive": _extractive,
    "scripted": _scripted,
}
