"""The one service entry point: settings precedence, configuration errors, tracing names."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc

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


def test_host_and_port_flags_keep_the_config_files_keys_file_and_health_port(
    tmp_path: Path,
) -> None:
    """The image's `--host 0.0.0.0` over a config with `auth.keys_file` (the k8s shape): the
    keys are read once, not twice (which failed with "two keys share a name")."""
    keys = tmp_path / "keys.yaml"
    keys.write_text("- {name: billing, sha256: " + "ab" * 32 + ", read: [docs]}\n")
    path = tmp_path / "quarry.yaml"
    path.write_text(
        "agent:\n  server: {port: 7000, health_port: 7060, auth: {enabled: true, keys_file: "
        f"{keys}}}}}\n"
    )
    argv = ["--config", str(path), "--host", "0.0.0.0", "--port", "7001"]
    settings = settings_from_args("agent", AgentSettings, argv, flags=AGENT_FLAGS)
    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 7001)
    assert settings.server.health_port == 7060
    assert [k.name for k in settings.server.auth.keys] == ["billing"]


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


@pytest.mark.parametrize(
    ("setting", "loop_type"),
    [("uvloop", uvloop.Loop), ("asyncio", asyncio.SelectorEventLoop), (None, uvloop.Loop)],
)
def test_a_service_is_built_and_served_on_the_event_loop_its_settings_name(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, loop_type: type
) -> None:
    if setting is not None:
        monkeypatch.setenv("QUARRY_AGENT_SERVER__EVENT_LOOP", setting)
    loops: list[asyncio.AbstractEventLoop] = []

    def build(settings: AgentSettings, telemetry: Telemetry) -> QuarryServer:
        loops.append(asyncio.get_running_loop())
        raise OSError("cannot bind 127.0.0.1:1")  # stops run_service: exit status 1

    assert run_service("agent", AgentSettings, build, flags=AGENT_FLAGS, argv=[]) == 1
    assert [type(loop) for loop in loops] == [loop_type]
    assert loops[0].is_closed()  # the service's loop ends with it


def test_an_unknown_event_loop_exits_2_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QUARRY_AGENT_SERVER__EVENT_LOOP", "trio")
    assert run_service("agent", AgentSettings, _never_built, flags=AGENT_FLAGS, argv=[]) == 2
    err = capsys.readouterr().err
    assert "event_loop" in err
    assert "uvloop" in err


@pytest.mark.parametrize(("loop", "gc_freeze"), [("uvloop", "true"), ("asyncio", "false")])
def test_a_service_process_runs_on_its_loop_freezes_its_startup_heap_when_set_and_stops_on_sigterm(
    loop: str, gc_freeze: str
) -> None:
    env = {
        **os.environ,
        "QUARRY_LLM_GATEWAY_SERVER__EVENT_LOOP": loop,
        "QUARRY_LLM_GATEWAY_SERVER__GC_FREEZE": gc_freeze,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.llm_gateway", "--port", "0"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        serving: dict[str, object] = {}
        frozen: list[dict[str, object]] = []
        for line in process.stderr:
            entry = json.loads(line)
            if entry.get("message") == "startup heap frozen":
                frozen.append(entry)
            if entry.get("message") == "serving":
                serving = entry
                break
        assert serving["event_loop"] == loop
        if gc_freeze == "true":  # the SDKs and descriptors: well over 10,000 objects
            assert [int(str(entry["objects"])) > 10_000 for entry in frozen] == [True]
        else:
            assert frozen == []
        with grpc.insecure_channel(str(serving["address"])) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert '"message": "stopped"' in rest


def test_every_service_traces_under_one_quarry_name_scheme() -> None:
    names = [tracing_name(s) for s in ("agent", "llm_gateway", "search_tool")]
    assert names == ["quarry-agent", "quarry-llm-gateway", "quarry-search-tool"]


def _never_built(settings: AgentSettings, telemetry: Telemetry) -> QuarryServer:
    raise AssertionError("a server was built from an invalid configuration")
