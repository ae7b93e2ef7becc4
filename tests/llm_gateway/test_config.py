"""Gateway settings: defaults with and without keys, and clear start-up errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import load_settings
from services.llm_gateway.config import DEFAULT_PORT, GatewaySettings, ProviderSettings


def _settings(**values: object) -> GatewaySettings:
    return GatewaySettings(**values)  # type: ignore[arg-type]


def test_without_keys_or_config_the_agent_route_is_extractive_only() -> None:
    settings = _settings()
    assert settings.routes == {"agent": ["extractive"]}
    assert settings.default_route == "agent"
    assert settings.server.port == DEFAULT_PORT


def test_an_openai_key_in_the_environment_puts_openai_before_extractive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    assert _settings().routes == {"agent": ["openai/gpt-4o-mini", "extractive"]}


def test_an_anthropic_key_alone_puts_anthropic_before_extractive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    assert _settings().routes == {"agent": ["anthropic/claude-sonnet-4-5", "extractive"]}


def test_entries_are_named_kind_or_endpoint_slash_model_and_read_the_presets_key_variable() -> None:
    groq = ProviderSettings(kind="openai", endpoint="groq", model="llama-3.3-70b-versatile")
    assert groq.name == "groq/llama-3.3-70b-versatile"
    assert groq.api_key_env == "GROQ_API_KEY"
    claude = ProviderSettings(kind="anthropic", model="claude-sonnet-4-5")
    assert (claude.name, claude.api_key_env) == ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY")


def test_a_route_naming_an_unknown_provider_is_rejected_with_its_name() -> None:
    with pytest.raises(ValidationError, match="unknown provider 'groq/x'"):
        _settings(routes={"agent": ["groq/x", "extractive"]})


def test_an_empty_route_is_rejected() -> None:
    with pytest.raises(ValidationError, match="route 'agent' is empty"):
        _settings(routes={"agent": []})


def test_a_default_route_that_does_not_exist_is_rejected() -> None:
    with pytest.raises(ValidationError, match="default_route 'chat'"):
        _settings(routes={"agent": ["extractive"]}, default_route="chat")


def test_a_routed_provider_without_its_key_in_the_environment_is_rejected() -> None:
    with pytest.raises(ValidationError, match="GROQ_API_KEY"):
        _settings(
            providers=[{"kind": "openai", "endpoint": "groq", "model": "llama-3.3-70b-versatile"}],
            routes={"agent": ["groq/llama-3.3-70b-versatile", "extractive"]},
        )


def test_keys_are_never_read_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "quarry.yaml"
    config.write_text(
        "llm_gateway:\n  providers:\n    - kind: openai\n      model: m\n      api_key: sk-x\n"
    )
    with pytest.raises(ValidationError, match="api_key"):
        load_settings(GatewaySettings, config)


def test_extractive_before_other_providers_is_allowed_with_a_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    script = tmp_path / "s.json"
    script.write_text("[]")
    with caplog.at_level(logging.WARNING):
        settings = _settings(
            providers=[{"kind": "scripted", "name": "s", "script": str(script)}],
            routes={"agent": ["extractive", "s"]},
        )
    assert settings.routes["agent"] == ["extractive", "s"]
    assert "extractive is not the last provider" in caplog.text


def test_yaml_section_and_environment_are_both_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "quarry.yaml"
    config.write_text(
        "llm_gateway:\n"
        "  routes:\n    agent: [extractive]\n    summary: [extractive]\n"
        "  providers:\n    - kind: extractive\n      breaker: {fail_max: 2}\n"
    )
    monkeypatch.setenv("QUARRY_LLM_GATEWAY_DEFAULT_ROUTE", "summary")
    settings = load_settings(GatewaySettings, config)
    assert settings.default_route == "summary"
    assert settings.provider("extractive").breaker.fail_max == 2
