"""A caller who goes away takes the work in flight with it: through real servers, a cancelled
StreamRun (or a unary Run whose deadline expires) cancels the agent's in-flight gateway call — the
real gateway then closes its upstream HTTP request to the (fake) vendor — and its in-flight search
call, instead of letting either run to completion for nobody."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from services.agent.config import AgentSettings
from services.agent.server import build_agent_server
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.telemetry import Telemetry, setup_telemetry
from services.llm_gateway.config import GatewaySettings, ProviderSettings
from services.llm_gateway.server import build_gateway_server
from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer, FakeServer, Reply
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch
from tests.agent.test_dependency_clients import FakeGateway, FakeSearchService, _reply

KEY_ENV = "QUARRY_TEST_VENDOR_KEY"
HOLD_S = 60.0
"""How long a fake holds its answer: far longer than any test waits for the cancellation."""
SAFETY_S = 30.0
"""Upper bound on waiting for something that must happen; never a performance threshold."""
SERVER = ServerSettings(port=0, grace_s=0)
SEARCH_ARGS = {"query": {"primary": "temporary directory"}, "limit": 5}

Context = grpc.aio.ServicerContext[Any, Any]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-cancellation")


@pytest.fixture
def telemetry() -> Telemetry:
    """What a service without an OTLP endpoint runs with: the tracing interceptors are there."""
    return setup_telemetry("test")


class HeldSearch(FakeSearchService):
    """Answers GetCollection; holds every Search until cancelled, and says so."""

    def __init__(self) -> None:
        super().__init__(FakeSearch(DOCUMENTS, collection="python-docs"))
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.completed = False

    async def Search(self, request: st.SearchRequest, context: Context) -> st.SearchResponse:
        if request.validate_only:
            return await super().Search(request, context)
        self.entered.set()
        try:
            await asyncio.sleep(HOLD_S)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.completed = True
        return st.SearchResponse()


def _vendor(kind: str, fake: FakeServer) -> ProviderSettings:
    return ProviderSettings.model_validate(
        {
            "kind": kind,
            "model": "m",
            "base_url": fake.base_url,
            "api_key_env": KEY_ENV,
            "context_window_tokens": 16_000,
            "timeout_s": HOLD_S * 2,
            "retry": {"max_attempts": 1},
        }
    )


@asynccontextmanager
async def _servers(
    telemetry: Telemetry,
    search: st_grpc.SearchToolServiceServicer,
    *,
    gateway: GatewaySettings | gw_grpc.LlmGatewayServiceServicer,
    window_tokens: int | None = 16_000,
) -> AsyncIterator[agent_pb2_grpc.AgentServiceStub]:
    """A started agent (its real server and clients) in front of `gateway` (real settings or a
    fake servicer) and `search`; a stub to the agent (`window_tokens`: the model's window as
    configured; None: as the gateway reports the route's)."""

    def register(servicer: Any, add: Callable[[Any, grpc.aio.Server], None]) -> Any:
        return lambda server: add(servicer, server)

    servers: list[QuarryServer] = []
    try:
        if isinstance(gateway, GatewaySettings):
            gateway_server = build_gateway_server(gateway, telemetry)
        else:
            add_gateway = gw_grpc.add_LlmGatewayServiceServicer_to_server
            gateway_server = build_server(
                [ServiceRegistration("gw", register(gateway, add_gateway))], SERVER, telemetry
            )
        add_search = st_grpc.add_SearchToolServiceServicer_to_server
        search_server = build_server(
            [ServiceRegistration("st", register(search, add_search))], SERVER, telemetry
        )
        for server in (gateway_server, search_server):
            await server.start()
            servers.append(server)
        agent = build_agent_server(
            AgentSettings(
                server=SERVER,
                llm_gateway_address=gateway_server.address,
                search_tool_address=search_server.address,
                context_window_tokens=window_tokens,
            ),
            telemetry,
        )
        await agent.start()
        servers.append(agent)
        async with grpc.aio.insecure_channel(agent.address) as channel:
            yield agent_pb2_grpc.AgentServiceStub(channel)
    finally:
        for server in reversed(servers):
            await server.stop(0)


def _routed_to(kind: str, fake: FakeServer) -> GatewaySettings:
    return GatewaySettings(
        providers=[_vendor(kind, fake)],
        routes={"agent": [f"{kind}/m"]},
        default_route="agent",
        server=SERVER,
    )


async def _until(condition: Callable[[], bool]) -> None:
    """Wait (bounded by `SAFETY_S`) until `condition` holds."""
    async with asyncio.timeout(SAFETY_S):
        while not condition():  # noqa: ASYNC110 - the fakes record in their own thread
            await asyncio.sleep(0.01)


def _question() -> agent_pb2.StreamRunRequest:
    return agent_pb2.StreamRunRequest(query="temporary directory", collection="python-docs")


@pytest.mark.parametrize("vendor", [FakeOpenAIServer, FakeAnthropicServer], ids=lambda v: v.kind)
async def test_cancelling_a_stream_run_closes_the_vendor_request_the_gateway_has_in_flight(
    telemetry: Telemetry, vendor: type[FakeServer]
) -> None:
    with vendor() as fake:
        fake.reset(default=Reply(text="never sent", delay_s=HOLD_S))
        search = HeldSearch()
        async with _servers(telemetry, search, gateway=_routed_to(vendor.kind, fake)) as agent:
            call = agent.StreamRun(_question())
            first = await call.read()
            assert first.HasField("started")
            await _until(lambda: len(fake.requests) == 1)
            call.cancel()
            (upstream,) = fake.requests
            closed = await asyncio.to_thread(upstream.disconnected.wait, SAFETY_S)
        assert closed, "the vendor request was still open after the run was cancelled"
        assert not upstream.finished.is_set()
        assert call.cancelled()


async def test_cancelling_a_stream_run_cancels_the_search_in_flight(telemetry: Telemetry) -> None:
    gateway = FakeGateway([_reply("searching", ("c1", "search", SEARCH_ARGS))], window=16_000)
    search = HeldSearch()
    async with _servers(telemetry, search, gateway=gateway) as agent:
        call = agent.StreamRun(_question())
        assert (await call.read()).HasField("started")
        await asyncio.wait_for(search.entered.wait(), SAFETY_S)
        call.cancel()
        await asyncio.wait_for(search.cancelled.wait(), SAFETY_S)
    assert not search.completed


async def test_a_unary_run_whose_deadline_expires_closes_the_vendor_request(
    telemetry: Telemetry,
) -> None:
    """The caller's deadline cuts the run: DEADLINE_EXCEEDED for the caller, and the gateway's
    upstream request is closed rather than left generating."""
    with FakeOpenAIServer() as fake:
        fake.reset(default=Reply(text="never sent", delay_s=HOLD_S))
        async with _servers(telemetry, HeldSearch(), gateway=_routed_to("openai", fake)) as agent:
            request = agent_pb2.RunRequest(query="temporary directory", collection="python-docs")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await agent.Run(request, timeout=3.0)
            (upstream,) = fake.requests
            closed = await asyncio.to_thread(upstream.disconnected.wait, SAFETY_S)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert closed
    assert not upstream.finished.is_set()


async def test_a_cancelled_gateway_generate_closes_its_upstream_request(
    telemetry: Telemetry,
) -> None:
    """The gateway alone: a unary Generate cancelled by its caller closes the vendor request."""
    with FakeOpenAIServer() as fake:
        fake.reset(default=Reply(text="never sent", delay_s=HOLD_S))
        server = build_gateway_server(_routed_to("openai", fake), telemetry)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = gw_grpc.LlmGatewayServiceStub(channel)
                message = gw.Message(role=gw.ROLE_USER, text="hi")
                call = stub.Generate(gw.GenerateRequest(messages=[message]))
                await _until(lambda: len(fake.requests) == 1)
                call.cancel()
                (upstream,) = fake.requests
                closed = await asyncio.to_thread(upstream.disconnected.wait, SAFETY_S)
        finally:
            await server.stop(0)
    assert closed
    assert not upstream.finished.is_set()
    assert upstream.body["messages"][-1]["content"] == "hi"
