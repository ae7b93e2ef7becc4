"""SIGTERM to a real agent process: readiness NOT_SERVING while new calls are still served for the
drain window, then new calls refused, and a run still going when the grace period ends gets the
documented `error {code, message, retryable, retry_after}` event instead of a bare status.

The agent runs as `python -m services.agent`; its gateway and search tool are in-process fakes,
the gateway's Generate waiting until the test ends, so every run stays in flight. A second signal
ends the drain window early: the test moves on by signals, never by sleeping."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from bench.ports import free_port
from services.agent.server import SERVICE_NAME
from services.common.server import LIVENESS_SERVICE, QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch
from tests.agent.test_dependency_clients import FakeGateway, FakeSearchService

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
REPO = Path(__file__).resolve().parents[2]
EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]


class StalledGateway(FakeGateway):
    """Every Generate waits until the test releases it (a model that takes forever)."""

    def __init__(self) -> None:
        super().__init__([], window=50_000)
        self.release = asyncio.Event()

    async def Generate(self, request: gw.GenerateRequest, context: Any) -> gw.GenerateResponse:
        await self.release.wait()
        raise AssertionError("released only at teardown")


@pytest.fixture
async def dependencies() -> AsyncIterator[tuple[str, str]]:
    gateway = StalledGateway()
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    settings = ServerSettings(port=0, grace_s=0)
    servers: list[QuarryServer] = [
        build_server(
            [
                ServiceRegistration(
                    "gw", lambda s: gw_grpc.add_LlmGatewayServiceServicer_to_server(gateway, s)
                )
            ],
            settings,
        ),
        build_server(
            [
                ServiceRegistration(
                    "st", lambda s: st_grpc.add_SearchToolServiceServicer_to_server(search, s)
                )
            ],
            settings,
        ),
    ]
    for server in servers:
        await server.start()
    yield servers[0].address, servers[1].address
    gateway.release.set()
    for server in servers:
        await server.stop(0)


async def _start_agent(
    gateway: str, search: str, tmp_path: Path, **server: str
) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    env = {**os.environ, **{f"QUARRY_AGENT_SERVER__{k.upper()}": v for k, v in server.items()}}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    with (tmp_path / "agent.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "services.agent", "--port", str(port)),
            *("--llm-gateway", gateway, "--search-tool", search),
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    address = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(600):
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
                if reply.status == SERVING:
                    return process, address
            except grpc.aio.AioRpcError:
                pass
            assert process.returncode is None, (tmp_path / "agent.log").read_text()
            await asyncio.sleep(0.1)
    process.kill()
    raise AssertionError("the agent did not start")


def _run() -> agent_pb2.StreamRunRequest:
    return agent_pb2.StreamRunRequest(query="temporary directory", collection="python-docs")


async def _until_not_serving(health: health_pb2_grpc.HealthStub) -> None:
    async for reply in health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME)):
        if reply.status == NOT_SERVING:
            return


async def _refused(agent: agent_pb2_grpc.AgentServiceStub) -> grpc.StatusCode:
    """Start runs until one is refused (the server stops accepting shortly after the signal)."""
    for _ in range(200):
        call = agent.StreamRun(_run(), timeout=30)
        try:
            await call.read()
        except grpc.aio.AioRpcError as error:
            return error.code()
        call.cancel()
        await asyncio.sleep(0.05)
    raise AssertionError("new runs were still accepted after the drain window")


async def _rest(call: Any) -> tuple[list[agent_pb2.StreamRunResponse], grpc.StatusCode]:
    events = []
    try:
        while (message := await call.read()) is not EOF:
            events.append(message)
    except grpc.aio.AioRpcError as error:
        return events, error.code()
    return events, grpc.StatusCode.OK


async def test_sigterm_drains_then_refuses_then_cuts_runs_with_an_error_event(
    dependencies: tuple[str, str], tmp_path: Path
) -> None:
    gateway, search = dependencies
    process, address = await _start_agent(
        gateway, search, tmp_path, drain_window_s="600", grace_s="1", max_concurrent_rpcs="1000"
    )
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            agent = agent_pb2_grpc.AgentServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            before = agent.StreamRun(_run(), timeout=120)
            first = await before.read()

            process.send_signal(signal.SIGTERM)
            await _until_not_serving(health)
            liveness = await health.Check(health_pb2.HealthCheckRequest(service=LIVENESS_SERVICE))
            during = agent.StreamRun(_run(), timeout=120)
            started_during_window = await during.read()

            process.send_signal(signal.SIGTERM)  # a second signal ends the window early
            refused = await _refused(agent)
            cut = [await _rest(before), await _rest(during)]
        exit_code = await asyncio.wait_for(process.wait(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert first.WhichOneof("event") == "started"
    assert liveness.status == SERVING
    assert started_during_window.WhichOneof("event") == "started"
    assert refused == grpc.StatusCode.UNAVAILABLE
    for events, status in cut:
        error = events[-1].error
        assert events[-1].WhichOneof("event") == "error"
        assert (error.code, error.retryable) == ("UNAVAILABLE", True)
        assert "shutting down" in error.message
        assert error.retry_after.ToMilliseconds() == 1000
        assert status == grpc.StatusCode.UNAVAILABLE
    assert exit_code == 0
