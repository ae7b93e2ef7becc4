"""The one service entry point: settings precedence, configuration errors, tracing names."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.agent.__main__ import FLAGS as AGENT_FLAGS
from services.agent.config import AgentSettings
from services.common.entrypoint import run_service, settings_from_args, tracing_name
from services.common.server import QuarryServer
from services.common.telemetry import Telemetry
from services.search_tool.__main__ import FLAGS as SEARCH_FLAGS
from services.search_tool.config import SearchToolSettings


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "quarry.yaml"
    path.write_text(
        "agent:\n"
        "  search_tool_address: yaml:1\n"
        "  llm_gateway_address: yaml:2\n"
        "  route: from-yaml\n"
        "  server: {port: 7000, grace_s: 3}\n"
    )
    return path


def test_flags_beat_the_environment_which_beats_the_config_file(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUARRY_AGENT_SEARCH_TOOL_ADDRESS", "env:1")
    monkeypatch.setenv("QUARRY_AGENT_LLM_GATEWAY_ADDRESS", "env:2")
    argv = ["--config", str(config), "--llm-gateway", "flag:2", "--port", "7001"]
    settings = settings_from_args("agent", AgentSettings, argv, flags=AGENT_FLAGS)
    assert settings.route == "from-yaml"
    assert settings.search_tool_address == "env:1"
    assert settings.llm_gateway_address == "flag:2"
    assert (settings.server.port, settings.server.grace_s) == (7001, 3)


def test_a_config_file_without_the_services_section_leaves_its_defaults(config: Path) -> None:
    argv = ["--config", str(config), "--data-dir", "/srv/quarry"]
    settings = settings_from_args("search_tool", SearchToolSettings, argv, flags=SEARCH_FLAGS)
    assert settings.data_dir == Path("/srv/quarry")
    assert settings.server.port == SearchToolSettings().server.port


@pytest.mark.parametrize(
    ("text", "expected"),
    [("agent:\n  serch_tool_address: x\n", "serch_tool_address"), ("agent: 3\n", "mapping")],
)
def test_an_invalid_config_file_exits_2_and_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code = run_service(
        "agent", AgentSettings, _never_built, flags=AGENT_FLAGS, argv=["--config", str(path)]
    )
    assert code == 2
    assert expected in capsys.readouterr().err


def test_every_service_traces_under_one_quarry_name_scheme() -> None:
    names = [tracing_name(s) for s in ("agent", "llm_gateway", "search_tool")]
    assert names == ["quarry-agent", "quarry-llm-gateway", "quarry-search-tool"]


def _never_built(settings: AgentSettings, telemetry: Telemetry) -> QuarryServer:
    raise AssertionError("a server was built from an invalid configuration")
