"""The agent over real gRPC clients against in-process fake gateway and search servicers:
wire translation, overflow mapping, the route's window read once, and one trace end to end."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from services.agent import convert, filter_wire
from services.agent.client import AgentClient, RunOptions
from services.agent.config import AgentSettings
from services.agent.dependencies import CONNECT_WAIT_S, RETRY_AFTER_S
from services.agent.server import build_agent_server
from services.agent.tools import TOOL_NAMES
from services.common.errors import DeadlineExceeded, InvalidArgument, QuarryError
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.telemetry import Telemetry, setup_telemetry
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch

Context = grpc.aio.ServicerContext[Any, Any]


def _reply(text: str, *calls: tuple[str, str, dict[str, Any]]) -> gw.GenerateResponse:
    return gw.GenerateResponse(
        message=gw.Message(
            role=gw.ROLE_ASSISTANT,
            text=text,
            tool_calls=[
                gw.ToolCall(id=i, name=n, arguments_json=json.dumps(a)) for i, n, a in calls
            ],
        ),
        usage=gw.Usage(input_tokens=120, output_tokens=30, cache_read_tokens=100),
        provider="fake/model",
        model="model",
    )


class FakeGateway(gw_grpc.LlmGatewayServiceServicer):  # type: ignore[misc]
    def __init__(self, replies: list[gw.GenerateResponse | QuarryError], window: int) -> None:
        self.replies = deque(replies)
        self.window = window
        self.requests: list[gw.GenerateRequest] = []
        self.structured: list[gw.GenerateStructuredRequest] = []
        self.status_calls = 0

    async def Generate(self, request: gw.GenerateRequest, context: Context) -> gw.GenerateResponse:
        self.requests.append(request)
        reply = self.replies.popleft()
        if isinstance(reply, QuarryError):
            raise reply
        return reply

    async def GenerateStructured(
        self, request: gw.GenerateStructuredRequest, context: Context
    ) -> gw.GenerateStructuredResponse:
        self.structured.append(request)
        return gw.GenerateStructuredResponse(json=json.dumps({"summary": "searched tempfile"}))

    async def GetStatus(
        self, request: gw.GetStatusRequest, context: Context
    ) -> gw.GetStatusResponse:
        self.status_calls += 1
        return gw.GetStatusResponse(
            providers=[gw.ProviderStatus(name="fake/model", context_window_tokens=self.window)],
            routes=[gw.RouteStatus(name="agent", chain=["fake/model"])],
            default_route="agent",
        )


class FakeSearchService(st_grpc.SearchToolServiceServicer):  # type: ignore[misc]
    def __init__(self, search: FakeSearch) -> None:
        self.search = search
        self.requests: list[st.SearchRequest] = []

    async def Search(self, request: st.SearchRequest, context: Context) -> st.SearchResponse:
        self.requests.append(request)
        if request.validate_only:
            self.search.validate_message(request)
            return st.SearchResponse()
        page = self.search.search_message(request)
        return st.SearchResponse(
            results=[convert.search_result(h) for h in page.hits], total_count=page.total_count
        )

    async def GetCollection(
        self, request: st.GetCollectionRequest, context: Context
    ) -> st.GetCollectionResponse:
        info = await self.search.get_collection(
            request.collection,
            caller_filter=filter_wire.caller_filter(request.caller_filter),
            remaining_s=None,
        )
        return st.GetCollectionResponse(
            collection=st.Collection(
                name=info.name,
                document_count=info.document_count,
                chunk_count=info.chunk_count,
                sources=[st.FacetCount(value=f.value, count=f.count) for f in info.sources],
                fields=[st.FieldInfo(name="source", type=st.FIELD_TYPE_STRING)],
            )
        )


Stack = Callable[..., Any]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def telemetry(exporter: InMemorySpanExporter) -> Telemetry:
    return setup_telemetry("test", span_exporter=exporter)


@pytest.fixture
async def stack(telemetry: Telemetry) -> AsyncIterator[Stack]:
    servers: list[QuarryServer] = []

    async def start(gateway: FakeGateway, search: FakeSearchService) -> AgentClient:
        def serve_gateway(server: grpc.aio.Server) -> None:
            gw_grpc.add_LlmGatewayServiceServicer_to_server(gateway, server)

        def serve_search(server: grpc.aio.Server) -> None:
            st_grpc.add_SearchToolServiceServicer_to_server(search, server)

        settings = ServerSettings(port=0, grace_s=0)
        gateway_server = build_server(
            [ServiceRegistration("gw", serve_gateway)], settings, telemetry
        )
        search_server = build_server([ServiceRegistration("st", serve_search)], settings, telemetry)
        for server in (gateway_server, search_server):
            await server.start()
            servers.append(server)
        agent = build_agent_server(
            AgentSettings(
                server=settings,
                llm_gateway_address=gateway_server.address,
                search_tool_address=search_server.address,
            ),
            telemetry,
        )
        await agent.start()
        servers.append(agent)
        return AgentClient(agent.address)

    yield start
    for server in reversed(servers):
        await server.stop(0)


SEARCH_ARGS = {"query": {"primary": "temporary directory"}, "limit": 5}
ANSWER_ARGS = {"text": "TemporaryDirectory [1]", "citations": [{"result_id": "tempfile__chunk_0"}]}


async def test_one_stream_run_is_one_trace_across_agent_gateway_and_search(
    stack: Stack, exporter: InMemorySpanExporter
) -> None:
    gateway = FakeGateway(
        [
            _reply("search first", ("c1", "search", SEARCH_ARGS)),
            _reply("", ("c2", "submit_answer", ANSWER_ARGS)),
        ],
        window=50_000,
    )
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    async with await stack(gateway, search) as agent:
        events = [
            e
            async for e in agent.stream_run(
                "temporary directory", RunOptions(collection="python-docs")
            )
        ]
    assert events[-1].done.response.answer.citations[0].title.startswith("tempfile")
    assert events[-1].done.response.usage.cache_read_tokens == 200

    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    invoke = next(s for s in spans if s.name == "invoke_agent")
    assert invoke.attributes is not None
    assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert invoke.attributes["gen_ai.conversation.id"] == events[0].started.run_id
    tool = next(s for s in spans if s.name == "execute_tool search")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert "execute_tool submit_answer" in names
    trace_ids = {s.context.trace_id for s in spans if s.context is not None}
    assert len(trace_ids) == 1
    server_spans = [s.name for s in spans if s.name.startswith("/quarry")]
    assert "/quarry.llmgateway.v1.LlmGatewayService/Generate" in server_spans
    assert "/quarry.searchtool.v1.SearchToolService/Search" in server_spans
    search_span = next(
        s for s in spans if s.name == "/quarry.searchtool.v1.SearchToolService/Search"
    )
    parents = {s.context.span_id: s for s in spans if s.context is not None}
    chain = []
    span = search_span
    while span.parent is not None and span.parent.span_id in parents:
        span = parents[span.parent.span_id]
        chain.append(span.name)
    assert "execute_tool search" in chain
    assert "invoke_agent" in chain


async def test_requests_carry_schemas_tool_choice_and_pairs_over_the_wire(stack: Stack) -> None:
    gateway = FakeGateway(
        [
            _reply("", ("c1", "search", SEARCH_ARGS)),
            _reply("", ("c2", "submit_answer", ANSWER_ARGS)),
        ],
        window=50_000,
    )
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    async with await stack(gateway, search) as agent:
        await agent.run("temporary directory", RunOptions(collection="python-docs"))
    first, second = gateway.requests
    assert [t.name for t in first.tools] == list(TOOL_NAMES)
    assert json.loads(first.tools[0].parameters_json)["properties"]["limit"]["type"] == "integer"
    assert first.messages[0].role == gw.ROLE_SYSTEM
    assert second.tool_choice.mode == gw.TOOL_CHOICE_MODE_NAMED
    assert second.tool_choice.name == "submit_answer"
    tool = second.messages[-1]
    assert (tool.role, tool.tool_call_id) == (gw.ROLE_TOOL, "c1")
    assert tool.text.startswith("Found ")
    assert search.requests[0].limit == 10  # the model asked 5; a search fetches the run's 10


async def test_window_is_read_once_per_route_and_bounds_tool_results(stack: Stack) -> None:
    replies: list[gw.GenerateResponse | QuarryError] = []
    for _ in range(2):
        replies += [
            _reply("", ("c1", "search", SEARCH_ARGS)),
            _reply("", ("c2", "submit_answer", {"text": "nothing fits"})),
        ]
    gateway = FakeGateway(replies, window=100)
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    async with await stack(gateway, search) as agent:
        for _ in range(2):
            response = await agent.run("temporary directory", RunOptions(collection="python-docs"))
    assert gateway.status_calls == 1
    assert gateway.requests[1].messages[-1].text.startswith("Found 3 results; showing 0.")
    assert list(response.answer.citations) == []


async def test_gateway_overflow_is_compacted_through_generate_structured(stack: Stack) -> None:
    overflow = InvalidArgument("prompt is too long", reason="CONTEXT_WINDOW_EXCEEDED")
    gateway = FakeGateway(
        [
            _reply("a", ("c1", "search", SEARCH_ARGS)),
            _reply("b", ("c2", "search", {"query": {"primary": "shutil"}})),
            overflow,
            _reply("", ("c3", "submit_answer", ANSWER_ARGS)),
        ],
        window=50_000,
    )
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    async with await stack(gateway, search) as agent:
        response = await agent.run(
            "temporary directory", RunOptions(collection="python-docs", mode="thinking")
        )
    assert response.answer.citations[0].result_id == "tempfile__chunk_0"
    assert gateway.structured[0].schema_name == "ConversationSummary"
    assert "searched tempfile" in gateway.requests[-1].messages[1].text


async def test_search_tool_rejection_reaches_the_model_as_a_tool_error(stack: Stack) -> None:
    colour = {
        "query": {"primary": "q"},
        "filter_groups": [
            {"conditions": [{"field": "colour", "operator": "equals", "value": "r"}]}
        ],
    }
    gateway = FakeGateway(
        [
            _reply("", ("c1", "search", colour)),
            _reply("", ("c2", "submit_answer", {"text": "none"})),
        ],
        window=50_000,
    )
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    async with await stack(gateway, search) as agent:
        await agent.run("q", RunOptions(collection="python-docs", mode="thinking"))
    tool = gateway.requests[1].messages[-1]
    assert tool.is_error
    assert "unknown field 'colour'" in tool.text


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_unreachable_gateway_ends_the_stream_with_a_retryable_error() -> None:
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    settings = ServerSettings(port=0, grace_s=0)

    def serve_search(server: grpc.aio.Server) -> None:
        st_grpc.add_SearchToolServiceServicer_to_server(search, server)

    search_server = build_server([ServiceRegistration("st", serve_search)], settings)
    await search_server.start()
    lonely = build_agent_server(
        AgentSettings(
            server=settings,
            llm_gateway_address=f"127.0.0.1:{_closed_port()}",
            search_tool_address=search_server.address,
        )
    )
    await lonely.start()
    try:
        async with AgentClient(lonely.address) as agent:
            events = [e async for e in agent.stream_run("q", RunOptions(collection="python-docs"))]
        assert [e.WhichOneof("event") for e in events] == ["started", "error"]
        assert (events[-1].error.code, events[-1].error.retryable) == ("UNAVAILABLE", True)
        assert "llm gateway" in events[-1].error.message
    finally:
        await lonely.stop(0)
        await search_server.stop(0)


@pytest.mark.slow
async def test_the_trace_reaches_the_real_gateways_provider_attempt(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    from services.llm_gateway.config import GatewaySettings
    from services.llm_gateway.server import build_gateway_server

    settings = ServerSettings(port=0, grace_s=0)
    gateway = build_gateway_server(GatewaySettings(server=settings), telemetry)
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))

    def serve_search(server: grpc.aio.Server) -> None:
        st_grpc.add_SearchToolServiceServicer_to_server(search, server)

    search_server = build_server([ServiceRegistration("st", serve_search)], settings, telemetry)
    agent_server = build_agent_server(
        AgentSettings(
            server=settings,
            llm_gateway_address=gateway.address,
            search_tool_address=search_server.address,
        ),
        telemetry,
    )
    servers = [gateway, search_server, agent_server]
    for server in servers:
        await server.start()
    try:
        async with AgentClient(agent_server.address) as agent:
            events = [
                e
                async for e in agent.stream_run(
                    "temporary directory", RunOptions(collection="python-docs")
                )
            ]
    finally:
        for server in reversed(servers):
            await server.stop(0)
    assert events[-1].WhichOneof("event") == "done"
    assert events[-1].done.response.answer.citations
    spans = exporter.get_finished_spans()
    names = {s.name for s in spans}
    assert {"invoke_agent", "execute_tool search"} <= names
    assert any(n.startswith("chat") for n in names), names
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1


class _Refuser:
    """A port that takes connections and closes them at once (a dependency not serving yet);
    `tried` is set when the first connection comes."""

    def __init__(self) -> None:
        self.tried = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._refuse, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tried.set()
        writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


def _serve_on(
    port: int, servicer: Any, add: Callable[[Any, grpc.aio.Server], None]
) -> QuarryServer:
    def register(server: grpc.aio.Server) -> None:
        add(servicer, server)

    return build_server(
        [ServiceRegistration("dep", register)], ServerSettings(port=port, grace_s=0)
    )


def _gateway_replies() -> FakeGateway:
    return FakeGateway(
        [
            _reply("", ("c1", "search", SEARCH_ARGS)),
            _reply("", ("c2", "submit_answer", ANSWER_ARGS)),
        ],
        window=50_000,
    )


@pytest.mark.parametrize("late", ["search_tool", "llm_gateway"])
async def test_a_question_asked_before_a_dependency_listens_is_answered_once_it_comes_up(
    late: str,
) -> None:
    """Services started separately: the agent is asked while its search tool (or gateway) still
    refuses connections; the dependency comes up within the question's deadline."""
    refuser = _Refuser()
    port = await refuser.start()
    search = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
    gateway = _gateway_replies()
    dependencies = {
        "search_tool": (search, st_grpc.add_SearchToolServiceServicer_to_server),
        "llm_gateway": (gateway, gw_grpc.add_LlmGatewayServiceServicer_to_server),
    }
    early_name = "llm_gateway" if late == "search_tool" else "search_tool"
    early = _serve_on(0, *dependencies[early_name])
    await early.start()
    addresses = {late: f"127.0.0.1:{port}", early_name: early.address}
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(port=0, grace_s=0),
            search_tool_address=addresses["search_tool"],
            llm_gateway_address=addresses["llm_gateway"],
        )
    )
    await agent.start()
    servers = [early, agent]
    try:
        async with AgentClient(agent.address) as client:
            options = RunOptions(collection="python-docs", timeout_s=60)
            question = asyncio.create_task(client.run("temporary directory", options))
            await refuser.tried.wait()
            await refuser.stop()
            dependency = _serve_on(port, *dependencies[late])
            await dependency.start()
            servers.append(dependency)
            response = await question
        assert response.answer.citations[0].result_id == "tempfile__chunk_0"
    finally:
        for server in reversed(servers):
            await server.stop(0)


async def test_a_dependency_that_never_comes_up_fails_the_question_at_its_deadline() -> None:
    gateway = _serve_on(0, _gateway_replies(), gw_grpc.add_LlmGatewayServiceServicer_to_server)
    await gateway.start()
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(port=0, grace_s=0),
            search_tool_address=f"127.0.0.1:{_closed_port()}",
            llm_gateway_address=gateway.address,
        )
    )
    await agent.start()
    try:
        async with AgentClient(agent.address) as client:
            options = RunOptions(collection="python-docs", timeout_s=1.0)
            try:
                events = [e async for e in client.stream_run("q", options)]
            except QuarryError as error:
                code, message = error.code, error.message
            else:
                assert events[-1].WhichOneof("event") == "error"
                code, message = events[-1].error.code, events[-1].error.message
                assert "search tool: not reachable within the caller's deadline" in message
        assert code == "DEADLINE_EXCEEDED", message
    finally:
        await agent.stop(0)
        await gateway.stop(0)


async def test_the_agents_search_client_names_a_dependency_it_could_not_reach_in_time() -> None:
    from services.agent.search_tool_client import SearchToolClient as AgentSearchClient

    channel = grpc.aio.insecure_channel(f"127.0.0.1:{_closed_port()}")
    try:
        with pytest.raises(DeadlineExceeded) as raised:
            await AgentSearchClient(channel).get_collection("python-docs", remaining_s=0.5)
    finally:
        await channel.close(None)
    assert raised.value.message.startswith(
        "search tool: not reachable within the caller's deadline (connection "
    )


async def test_a_down_gateway_is_named_at_once_and_reached_within_seconds_of_coming_back() -> None:
    """The gateway is down while the question has a long deadline: the run fails within the
    connect wait, UNAVAILABLE naming the gateway with a RetryInfo delay, instead of hanging until
    the deadline; started again, the gateway is reached at the next question within seconds."""
    port = _closed_port()
    search = _serve_on(0, FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs")),
                       st_grpc.add_SearchToolServiceServicer_to_server)  # fmt: skip
    await search.start()
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(port=0, grace_s=0),
            search_tool_address=search.address,
            llm_gateway_address=f"127.0.0.1:{port}",
        )
    )
    await agent.start()
    servers = [search, agent]
    try:
        async with AgentClient(agent.address) as client:
            options = RunOptions(collection="python-docs", timeout_s=120)
            started = time.monotonic()
            events = [e async for e in client.stream_run("temporary directory", options)]
            failed_after_s = time.monotonic() - started
            error = events[-1].error
            assert events[-1].WhichOneof("event") == "error"
            assert (error.code, error.retryable) == ("UNAVAILABLE", True)
            assert error.message.startswith("llm gateway: not reachable"), error.message
            assert error.retry_after.ToMilliseconds() == RETRY_AFTER_S * 1000
            assert failed_after_s < CONNECT_WAIT_S + 3

            gateway = _serve_on(
                port, _gateway_replies(), gw_grpc.add_LlmGatewayServiceServicer_to_server
            )
            await gateway.start()
            servers.append(gateway)
            came_back = time.monotonic()
            response = await client.run("temporary directory", options)
            assert response.answer.citations[0].result_id == "tempfile__chunk_0"
            assert time.monotonic() - came_back < CONNECT_WAIT_S + 2
    finally:
        for server in reversed(servers):
            await server.stop(0)
