"""The example configuration in docs/ loads for every service, and the environment overrides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.agent.config import AgentSettings
from services.common.settings import load_settings
from services.llm_gateway.config import GatewaySettings
from services.search_tool.config import SearchToolSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "quarry.example.yaml"


def test_example_config_loads_for_every_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    search = load_settings(SearchToolSettings, EXAMPLE)
    gateway = load_settings(GatewaySettings, EXAMPLE)
    agent = load_settings(AgentSettings, EXAMPLE)
    assert search.server.port == 50051
    assert search.fusion.method == "linear"
    assert search.fusion.alpha == 0.7
    assert search.chunking.keyword_context_chunks == 1
    assert gateway.routes["agent"][-1] == "extractive"
    assert [p.name for p in gateway.providers][:2] == [
        "groq/llama-3.3-70b-versatile",
        "anthropic/claude-sonnet-4-5",
    ]
    assert agent.llm_gateway_address == "127.0.0.1:50052"


def test_environment_overrides_the_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUARRY_SEARCH_TOOL_SERVER__PORT", "6000")
    monkeypatch.setenv("QUARRY_AGENT_ROUTE", "fast")
    assert load_settings(SearchToolSettings, EXAMPLE).server.port == 6000
    assert load_settings(AgentSettings, EXAMPLE).route == "fast"


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_settings(AgentSettings, tmp_path / "nope.yaml")


def test_unknown_key_in_the_config_file_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("agent:\n  serch_tool_address: 127.0.0.1:1\n")
    with pytest.raises(ValueError, match="serch_tool_address"):
        load_settings(AgentSettings, config)


def test_example_config_names_the_admission_and_drain_settings() -> None:
    search = load_settings(SearchToolSettings, EXAMPLE)
    assert search.server.max_concurrent_rpcs == SearchToolSettings().server.max_concurrent_rpcs
    assert search.server.drain_window_s == 0
    assert search.work_queue == SearchToolSettings().work_queue
    agent = load_settings(AgentSettings, EXAMPLE)
    assert agent.server.max_concurrent_rpcs == AgentSettings().server.max_concurrent_rpcs == 16


def test_the_example_keyword_languages_load_when_uncommented(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    start = lines.index("  # keyword:")
    block = [line.replace("  # ", "  ", 1) for line in lines[start : start + 3]]
    config = tmp_path / "keyword.yaml"
    config.write_text("search_tool:\n" + "\n".join(block) + "\n")
    keyword = load_settings(SearchToolSettings, config).keyword
    assert keyword.language_of("handbuch") == "german"
    assert keyword.language_of("manuel") == "french"
    assert keyword.language_of("anything else") == "english"
