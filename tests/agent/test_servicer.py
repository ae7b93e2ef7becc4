"""AgentService through gRPC (port 0) with the scripted model and the in-memory search tool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent.client import AgentClient, AgentError, RunOptions, parse_filter
from services.agent.config import AgentSettings
from services.agent.dependencies import RETRY_AFTER_S
from services.agent.loop import AgentLoop
from services.agent.server import SERVICE_NAME, build_agent_server
from services.agent.servicer import AgentServicer
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from services.common.errors import NotFound, QuarryError, Unavailable, Unimplemented
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.search_tool.client import SearchToolClient
from tests.agent.fake_search import FakeSearch

Start = Callable[[ScriptedModel, FakeSearch], Awaitable[AgentClient]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    servers: list[QuarryServer] = []
    clients: list[AgentClient] = []

    async def start(model: ScriptedModel, search: FakeSearch) -> AgentClient:
        settings = AgentSettings(server=ServerSettings(port=0, grace_s=0))
        servicer = AgentServicer(AgentLoop(model, search), settings)

        def register(server: grpc.aio.Server) -> None:
            agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

        server = build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server)
        await server.start()
        servers.append(server)
        client = AgentClient(server.address)
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()
    for server in servers:
        await server.stop(0)


def _kinds(events: list[agent_pb2.StreamRunResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


async def test_stream_run_streams_every_step_and_ends_with_the_response(
    serve: Start, search: FakeSearch
) -> None:
    model = ScriptedModel(
        [
            turn("Search tempfile.", search_call("temporary directory")),
            turn("", answer_call("TemporaryDirectory [1]", ["tempfile__chunk_0"])),
        ]
    )
    agent = await serve(model, search)
    events = [
        e
        async for e in agent.stream_run("temporary directory", RunOptions(collection="python-docs"))
    ]

    assert _kinds(events) == ["started", "thinking", "searching", "done"]
    searching = events[2].searching
    assert searching.query.primary == "temporary directory"
    assert searching.result_count > 0
    response = events[-1].done.response
    assert response.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert response.answer.citations[0].result_id == "tempfile__chunk_0"
    assert response.answer.citations[0].title.startswith("tempfile")
    assert response.results[0].chunk.id == "tempfile__chunk_0"
    assert response.usage.model_calls == 2
    assert response.run_id == events[0].started.run_id


async def test_run_returns_the_same_final_response(serve: Start, search: FakeSearch) -> None:
    model = ScriptedModel(
        [turn("", search_call("shutil")), turn("", answer_call("rmtree [1]", ["shutil__chunk_0"]))]
    )
    agent = await serve(model, search)
    response = await agent.run(
        "delete a tree", RunOptions(collection="python-docs", mode="thinking")
    )
    assert response.answer.text == "rmtree [1]"
    assert response.iterations == 1


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"query": "  "}, "query"),
        ({"mode": 7}, "mode"),
        ({"limit": 201}, "limit"),
        ({"limit": -1}, "limit"),
        ({"collection": ""}, "collection"),
        ({"budget": agent_pb2.Budget(max_tokens=-5)}, "budget.max_tokens"),
        (
            {
                "filter": parse_filter(
                    '[{"conditions": [{"field": "source", "operator": "in", "value": "x"}]}]'
                )
            },
            "filter.groups[0].conditions[0].value",
        ),
        (
            {
                "filter": parse_filter(
                    '[{"conditions": [{"field": "colour", "operator": "equals", "value": "x"}]}]'
                )
            },
            "filter.groups[0].conditions[0].field",
        ),
    ],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(
    serve: Start,
    search: FakeSearch,
    request_fields: dict[str, Any],
    field: str,
) -> None:
    agent = await serve(ScriptedModel(), search)
    fields: dict[str, Any] = {"collection": "python-docs", "query": "q", **request_fields}
    stub = agent_pb2_grpc.AgentServiceStub(agent._channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Run(agent_pb2.RunRequest(**fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in [v.field for v in details_of_rpc_error(caught.value).violations]


async def test_the_agent_and_search_tool_clients_raise_one_error_tree(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(ScriptedModel(), search)
    with pytest.raises(NotFound) as missing:
        await agent.run("q", RunOptions(collection="nope"))
    assert (missing.value.code, missing.value.retryable) == ("NOT_FOUND", False)
    assert AgentError is QuarryError  # the old name still catches every failure
    # A server with neither service: both clients say UNIMPLEMENTED with the same class.
    settings = ServerSettings(port=0, grace_s=0)
    server = build_server([], settings)
    await server.start()
    try:
        async with AgentClient(server.address) as wrong:
            with pytest.raises(Unimplemented) as from_agent:
                await wrong.run("q", RunOptions(collection="python-docs", timeout_s=10))
        async with SearchToolClient(server.address) as wrong_tool:
            with pytest.raises(Unimplemented) as from_search_tool:
                await wrong_tool.get_collection("python-docs")
    finally:
        await server.stop(0)
    assert from_agent.value.code == from_search_tool.value.code == "UNIMPLEMENTED"
    assert from_search_tool.value.message.startswith("search tool: ")
    assert not from_agent.value.message.startswith("agent")


async def test_unknown_collection_is_not_found(serve: Start, search: FakeSearch) -> None:
    agent = await serve(ScriptedModel(), search)
    with pytest.raises(QuarryError) as caught:
        await agent.run("q", RunOptions(collection="nope"))
    assert caught.value.code == "NOT_FOUND"
    events = [e async for e in agent.stream_run("q", RunOptions(collection="nope"))]
    assert _kinds(events) == ["started", "error"]
    assert (events[1].error.code, events[1].error.retryable) == ("NOT_FOUND", False)


async def test_search_outage_ends_the_stream_with_a_retryable_error_event(
    serve: Start, search: FakeSearch
) -> None:
    search.errors.append(Unavailable("search tool is down"))
    model = ScriptedModel([turn("", search_call("x"))])
    agent = await serve(model, search)
    events = [e async for e in agent.stream_run("q", RunOptions(collection="python-docs"))]
    assert _kinds(events) == ["started", "error"]
    assert events[-1].error.code == "UNAVAILABLE"
    assert events[-1].error.retryable


async def test_client_cancel_stops_the_run_with_no_further_calls(
    serve: Start, search: FakeSearch
) -> None:
    search.gate = asyncio.Event()
    model = ScriptedModel([turn("", search_call("x")), turn("", answer_call("never"))])
    agent = await serve(model, search)
    stub = agent_pb2_grpc.AgentServiceStub(agent._channel)
    call = stub.StreamRun(agent_pb2.StreamRunRequest(collection="python-docs", query="q"))
    await search.called.wait()
    call.cancel()
    await search.cancelled.wait()
    search.gate.set()
    assert len(model.requests) == 1
    assert len(search.requests) == 1


async def test_caller_deadline_is_passed_downstream_and_stops_the_run(
    serve: Start, search: FakeSearch
) -> None:
    search.gate = asyncio.Event()
    model = ScriptedModel([turn("", search_call("x")), turn("", answer_call("never"))])
    agent = await serve(model, search)
    with pytest.raises(QuarryError) as caught:
        await agent.run("q", RunOptions(collection="python-docs", timeout_s=1.0))
    assert caught.value.code == "DEADLINE_EXCEEDED"
    await search.cancelled.wait()
    # gRPC sends a deadline as a timeout in a lossy wire format that may round it up by a few ms
    # (1.008 s seen): what matters is that the caller's second, not a default, reached both
    assert 0 < (model.remaining_s[0] or 0) <= 1.05
    assert 0 < (search.remaining_s[0] or 0) <= 1.05
    assert len(model.requests) == 1


async def test_unreachable_dependencies_end_the_stream_with_unavailable() -> None:
    settings = AgentSettings(
        server=ServerSettings(port=0, grace_s=0),
        search_tool_address="127.0.0.1:1",
        llm_gateway_address="127.0.0.1:1",
    )
    server = build_agent_server(settings)
    await server.start()
    try:
        async with AgentClient(server.address) as agent:
            events = [e async for e in agent.stream_run("q", RunOptions(collection="python-docs"))]
            assert _kinds(events) == ["started", "error"]
            assert events[-1].error.code == "UNAVAILABLE"
            assert events[-1].error.retryable
            with pytest.raises(QuarryError) as caught:
                await agent.run("q", RunOptions(collection="python-docs"))
            assert caught.value.code == "UNAVAILABLE"
            assert caught.value.retryable
    finally:
        await server.stop(0)


async def test_an_unreachable_dependency_fails_the_run_with_a_retry_delay() -> None:
    settings = AgentSettings(
        server=ServerSettings(port=0, grace_s=0),
        search_tool_address="127.0.0.1:1",
        llm_gateway_address="127.0.0.1:1",
    )
    server = build_agent_server(settings)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Run(agent_pb2.RunRequest(query="q", collection="python-docs"))
        details = details_of_rpc_error(caught.value)
        assert details.code == grpc.StatusCode.UNAVAILABLE
        assert details.retry_after_s == pytest.approx(RETRY_AFTER_S)
    finally:
        await server.stop(0)
