"""Admission control through real servers: over a bound a call is refused at once with
RESOURCE_EXHAUSTED + RetryInfo naming the limit; under it calls are served; health is never
refused; the agent turns a dependency's refusal into a retryable `error` event with its delay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2, llm_gateway_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent.config import AgentServerSettings, AgentSettings
from services.agent.loop import AgentLoop
from services.agent.ports import ModelRequest, ModelResponse
from services.agent.server import SERVICE_NAME, build_agent_server
from services.agent.servicer import AgentServicer
from services.agent.testing import FunctionModel, search_then_answer
from services.common.admission import OVERLOADED, WorkQueue
from services.common.errors import ResourceExhausted
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.config import SearchToolSettings, WorkQueueSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import SearchToolServer, build_search_tool_server
from tests.agent.fake_search import FakeSearch
from tests.search_tool.grpc_helpers import document, search

EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
HELD = "held query"
"""A search for this text waits in the embedder until the test lets it go."""


class GatedModel(FunctionModel):
    """Searches then answers; every model turn waits until `gate` is set."""

    def __init__(self) -> None:
        super().__init__(search_then_answer(1))
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.entered.set()
        await self.gate.wait()
        return await super().generate(request, remaining_s=remaining_s)


class GatedEmbedder:
    """The real embedder, except that embedding `HELD` waits until `gate` is set."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.gate = asyncio.Event()
        self.held = asyncio.Event()
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.tokenizer = inner.tokenizer
        self.scripts = inner.scripts

    async def embed(self, texts: Any) -> Any:
        if HELD in texts:
            self.held.set()
            await self.gate.wait()
        return await self._inner.embed(texts)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())


async def _agent_server(model: FunctionModel, limit: int) -> QuarryServer:
    server_settings = AgentServerSettings(port=0, grace_s=0, max_concurrent_rpcs=limit)
    settings = AgentSettings(server=server_settings)  # the agent's own defaults otherwise
    search = FakeSearch([], collection="docs")
    servicer = AgentServicer(AgentLoop(model, search), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server)
    await server.start()
    return server


async def _first_event(stream: Any) -> str:
    message = await stream.read()
    return str(message.WhichOneof("event"))


async def _kinds(stream: Any) -> list[str]:
    """The rest of a stream read with `read()` (a call read once with `read()` cannot be
    iterated)."""
    kinds = []
    while (message := await stream.read()) is not EOF:
        kinds.append(str(message.WhichOneof("event")))
    return kinds


async def test_a_stream_run_over_the_agents_limit_is_refused_with_retry_info_naming_it() -> None:
    model = GatedModel()
    server = await _agent_server(model, limit=2)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            agent = agent_pb2_grpc.AgentServiceStub(channel)
            request = agent_pb2.StreamRunRequest(query="temporary directory", collection="docs")
            admitted = [agent.StreamRun(request, timeout=60) for _ in range(2)]
            assert [await _first_event(s) for s in admitted] == ["started", "started"]

            refused = agent.StreamRun(request, timeout=60)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await refused.read()
            health = health_pb2_grpc.HealthStub(channel)
            probe = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)

            model.gate.set()
            finished = [await _kinds(s) for s in admitted]
            after = [m.WhichOneof("event") async for m in agent.StreamRun(request, timeout=60)]
    finally:
        await server.stop(0)
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.retry_after_s == 4.0  # the agent's default: runs stay refused longer than 1 s
    assert details.reason == OVERLOADED
    assert details.metadata == {"limit": "2", "setting": "server.max_concurrent_rpcs"}
    assert "limit of 2 (server.max_concurrent_rpcs)" in details.message
    assert probe.status == health_pb2.HealthCheckResponse.SERVING
    assert [kinds[-1] for kinds in finished] == ["done", "done"]
    assert after[-1] == "done"


async def test_the_refusal_delay_is_the_configured_overload_retry_after() -> None:
    model = GatedModel()
    settings = ServerSettings(port=0, grace_s=0, max_concurrent_rpcs=1, overload_retry_after_s=3)
    servicer = AgentServicer(AgentLoop(model, FakeSearch([], collection="docs")), AgentSettings())

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server([ServiceRegistration(SERVICE_NAME, register)], settings)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            agent = agent_pb2_grpc.AgentServiceStub(channel)
            run = agent_pb2.RunRequest(query="q", collection="docs")
            held = asyncio.ensure_future(agent.Run(run, timeout=60))
            await model.entered.wait()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await agent.Run(run, timeout=60)
            model.gate.set()
            await held
    finally:
        await server.stop(0)
    assert details_of_rpc_error(caught.value).retry_after_s == 3.0


async def test_work_queue_serves_workers_queues_waiting_and_refuses_the_next() -> None:
    queue = WorkQueue("the queue", workers=1, waiting=1, retry_after_s=0.5, setting="q.size")
    order: list[str] = []
    release = asyncio.Event()

    async def use(name: str) -> None:
        async with queue.slot():
            order.append(name)
            await release.wait()

    first = asyncio.ensure_future(use("first"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(use("second"))
    await asyncio.sleep(0)
    assert (queue.busy, queue.queued) == (1, 1)
    with pytest.raises(ResourceExhausted) as caught:
        await use("third")
    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert (queue.busy, queue.queued) == (0, 0)
    assert caught.value.retry_after_s == 0.5
    assert caught.value.metadata == {"limit": "2", "setting": "q.size"}


async def test_a_caller_that_gives_up_while_queued_leaves_the_queue() -> None:
    queue = WorkQueue("the queue", workers=1, waiting=1, retry_after_s=0.5, setting="q.size")
    release = asyncio.Event()

    async def use() -> None:
        async with queue.slot():
            await release.wait()

    holder = asyncio.ensure_future(use())
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(use())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert queue.queued == 0
    late = asyncio.ensure_future(use())  # the freed place in the queue is usable again
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(holder, late)
    assert (queue.busy, queue.queued) == (0, 0)


@pytest.fixture
async def search_server(tmp_path: Path, embedder: Embedder) -> AsyncIterator[SearchToolServer]:
    gated = GatedEmbedder(embedder)
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0),
        data_dir=tmp_path / "data",
        work_queue=WorkQueueSettings(workers=1, waiting=0, retry_after_s=0.5),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=lambda: gated)
    await server.start()
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection="docs",
                documents=[document("tempfile", "tempfile makes a temporary directory.")],
            )
        )
    try:
        yield server
    finally:
        gated.gate.set()
        await server.stop(0)


def _gate(server: SearchToolServer) -> GatedEmbedder:
    assert server.embedder_factory is not None
    embedder = server.embedder_factory()
    assert isinstance(embedder, GatedEmbedder)
    return embedder


def _search(text: str) -> search_tool_pb2.SearchRequest:
    return search("docs", text)


async def test_a_search_beyond_the_work_queue_is_refused_and_the_next_is_served(
    search_server: SearchToolServer,
) -> None:
    gated = _gate(search_server)
    async with grpc.aio.insecure_channel(search_server.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        held = asyncio.ensure_future(stub.Search(_search(HELD), timeout=60))
        await gated.held.wait()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Search(_search("temporary directory"), timeout=60)
        gated.gate.set()
        await held
        served = await stub.Search(_search("temporary directory"), timeout=60)
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.retry_after_s == 0.5
    assert details.metadata["setting"] == "search_tool.work_queue.workers + waiting"
    assert "work queue is at its limit of 1" in details.message
    assert [r.chunk.document_id for r in served.results] == ["tempfile"]


async def test_the_agent_reports_a_refused_search_as_a_retryable_error_with_its_delay(
    search_server: SearchToolServer,
) -> None:
    gated = _gate(search_server)
    gateway = build_gateway_server(GatewaySettings(server=ServerSettings(port=0, grace_s=0)))
    await gateway.start()
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(port=0, grace_s=0),
            llm_gateway_address=gateway.address,
            search_tool_address=search_server.address,
        )
    )
    await agent.start()
    try:
        async with (
            grpc.aio.insecure_channel(search_server.address) as search_channel,
            grpc.aio.insecure_channel(agent.address) as agent_channel,
        ):
            search = search_tool_pb2_grpc.SearchToolServiceStub(search_channel)
            held = asyncio.ensure_future(search.Search(_search(HELD), timeout=60))
            await gated.held.wait()
            stub = agent_pb2_grpc.AgentServiceStub(agent_channel)
            request = agent_pb2.StreamRunRequest(query="temporary directory", collection="docs")
            events, status = await _events_and_status(stub.StreamRun(request, timeout=60))
            gated.gate.set()
            await held
    finally:
        await agent.stop(0)
        await gateway.stop(0)
    error = events[-1].error
    assert events[-1].WhichOneof("event") == "error"
    assert (error.code, error.retryable) == ("RESOURCE_EXHAUSTED", True)
    assert error.retry_after.ToMilliseconds() == 500
    assert "search tool" in error.message
    assert "work queue" in error.message
    assert status == grpc.StatusCode.RESOURCE_EXHAUSTED


async def _events_and_status(
    call: Any,
) -> tuple[list[agent_pb2.StreamRunResponse], grpc.StatusCode]:
    events = []
    try:
        async for event in call:
            events.append(event)
    except grpc.aio.AioRpcError as error:
        return events, error.code()
    return events, grpc.StatusCode.OK


async def test_calls_over_the_gateways_bound_are_refused_at_once_not_left_queued(
    tmp_path: Path,
) -> None:
    """The `llm gateway: CANCELLED` bursts at 500 concurrent runs: gRPC core cancels a call that
    waits longer than 30 s for the Python server to accept it (`grpc.server_max_unrequested_time_
    in_server`), and an unbounded agent offered the gateway more calls than its saturated event
    loop could accept. Now the agent admits a bounded number of runs and the gateway answers
    every call over its own bound at once, with a delay to retry after."""
    script = tmp_path / "slow.yaml"
    script.write_text("replies: []\ndefault: {text: slow answer, delay_s: 600}\n")
    settings = GatewaySettings(
        server=ServerSettings(port=0, grace_s=0, max_concurrent_rpcs=1),
        providers=[{"kind": "scripted", "name": "slow", "script": str(script)}],
        routes={"agent": ["slow"]},
    )
    gateway = build_gateway_server(settings)
    await gateway.start()
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            stub = llm_gateway_pb2_grpc.LlmGatewayServiceStub(channel)
            request = llm_gateway_pb2.GenerateRequest(
                messages=[llm_gateway_pb2.Message(role=llm_gateway_pb2.ROLE_USER, text="hi")]
            )
            held = stub.Generate(request, timeout=600)
            while gateway.admission.in_flight < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the counter has no event to wait on
            burst = await asyncio.gather(
                *(stub.Generate(request, timeout=600) for _ in range(20)), return_exceptions=True
            )
            held.cancel()
    finally:
        await gateway.stop(0)
    assert all(isinstance(outcome, grpc.aio.AioRpcError) for outcome in burst)
    details = [details_of_rpc_error(o) for o in burst if isinstance(o, grpc.aio.AioRpcError)]
    assert {d.code for d in details} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert {d.retry_after_s for d in details} == {1.0}
