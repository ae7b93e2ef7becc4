"""`server.cpu_nice`: the whole process, every thread, runs at the configured CPU priority."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent.config import AgentSettings
from services.common.entrypoint import run_service
from services.common.server import QuarryServer
from services.common.telemetry import Telemetry
from services.llm_gateway.config import GatewaySettings
from services.search_tool.config import SearchToolSettings
from tests.search_tool.grpc_helpers import document, search
from tests.search_tool.subprocess_server import SubprocessServer

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="per-thread niceness is read from Linux /proc"
)

_THREADS_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from services.common.cpu import lower_cpu_priority
    os.nice(int(sys.argv[2]))
    hold = threading.Event()
    before = threading.Thread(target=hold.wait)
    before.start()
    lower_cpu_priority(int(sys.argv[1]))
    after = threading.Thread(target=hold.wait)
    after.start()
    print(sorted(os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")))
    hold.set()
    """
)


def _thread_niceness(nice: int, started_nicer_by: int = 0) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT, str(nice), str(started_nicer_by)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return [int(n) for n in done.stdout.strip("[]\n").split(",")]


# Relative to the niceness the tests run at (CI may run them under `nice`): lowering it needs
# privilege, so neither the tests nor the services ever do.
BASE = os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(BASE > 14, reason="the tests already run at niceness > 14")
def test_threads_started_before_and_after_all_run_at_the_configured_niceness() -> None:
    assert _thread_niceness(BASE + 5) == [BASE + 5] * 3


@pytest.mark.skipif(BASE > 9, reason="the tests already run at niceness > 9")
def test_a_process_already_started_nicer_is_never_given_more_priority() -> None:
    assert _thread_niceness(BASE + 5, started_nicer_by=10) == [BASE + 10] * 3


def test_only_the_search_tool_yields_the_cpu_by_default() -> None:
    assert SearchToolSettings().server.cpu_nice == 10
    assert AgentSettings().server.cpu_nice == 0
    assert GatewaySettings().server.cpu_nice == 0


@pytest.mark.parametrize("value", ["20", "-1"])
def test_a_niceness_outside_0_to_19_exits_2_naming_the_setting(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QUARRY_AGENT_SERVER__CPU_NICE", value)
    code = run_service("agent", AgentSettings, _never_built, argv=[])
    assert code == 2
    assert "cpu_nice" in capsys.readouterr().err


@pytest.fixture
async def search_tool(tmp_path: Path) -> AsyncIterator[SubprocessServer]:
    server = await SubprocessServer.start(tmp_path / "data")
    yield server
    await server.kill()


@pytest.mark.slow
async def test_every_thread_of_a_serving_search_tool_runs_at_niceness_10(
    search_tool: SubprocessServer,
) -> None:
    async with grpc.aio.insecure_channel(search_tool.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        documents = [document("a", "Lighthouses guide ships past the reef.")]
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="notes", documents=documents)
        )
        assert (await stub.Search(search("notes", "lighthouse"))).results
    niceness = _niceness_of_threads(search_tool.process.pid)
    assert len(niceness) > 5  # gRPC's, the engine's and the embedder's threads are there too
    assert set(niceness) == {max(BASE, 10)}


def _niceness_of_threads(pid: int) -> list[int]:
    # /proc/PID/task/TID/stat: after the command name (which may hold spaces) state is field 3,
    # nice field 19
    stats = (task / "stat" for task in Path(f"/proc/{pid}/task").iterdir())
    return [int(stat.read_text().rsplit(")", 1)[1].split()[16]) for stat in stats]


def _never_built(settings: AgentSettings, telemetry: Telemetry) -> QuarryServer:
    raise AssertionError("a server was built from an invalid configuration")
