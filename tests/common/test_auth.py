"""API-key auth through the three real servers in-process: who may call what, and what leaks.

The search tool, the LLM gateway (offline extractive provider) and the agent run on port 0 with
auth on. The agent's own table is deliberately wider than the search tool's for one key, so the
agent path proves that the search tool checks the *caller's* key, not the agent's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from services.agent.config import AgentSettings
from services.agent.server import build_agent_server
from services.common.auth import READ, ApiKey, AuthSettings, key_digest
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.common.telemetry import setup_telemetry
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server

ADMIN, READER, WIDE_READER, AGENT = (
    "qk-admin-6f1c2d",
    "qk-reader-9a8b7c",
    "qk-wide-reader-55aa",
    "qk-agent-0d0e0f",
)
KEYS = (ADMIN, READER, WIDE_READER, AGENT)
SEARCH_TOOL_KEYS = [
    ApiKey(name="admin", sha256=key_digest(ADMIN), write=["*"]),
    ApiKey(name="reader", sha256=key_digest(READER), read=["docs"]),
    ApiKey(name="wide-reader", sha256=key_digest(WIDE_READER), read=["docs"]),
    ApiKey(name="agent", sha256=key_digest(AGENT), gateway=True),
]
AGENT_KEYS = [
    ApiKey(name="reader", sha256=key_digest(READER), read=["docs"]),
    # wider here than at the search tool: only the search tool's own check can stop it
    ApiKey(name="wide-reader", sha256=key_digest(WIDE_READER), read=["*"]),
]
GATEWAY_KEYS = [
    ApiKey(name="agent", sha256=key_digest(AGENT), gateway=True),
    ApiKey(name="reader", sha256=key_digest(READER), read=["*"]),
]


def _server(keys: list[ApiKey]) -> ServerSettings:
    return ServerSettings(port=0, grace_s=0, auth=AuthSettings(enabled=True, keys=keys))


def _bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@dataclass
class Stack:
    search: str
    gateway: str
    agent: str


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def stack(
    tmp_path: Path,
    embedder: Embedder,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Stack]:
    telemetry = setup_telemetry("quarry-test", span_exporter=spans)
    monkeypatch.setenv("TEST_AGENT_KEY", AGENT)
    search = build_search_tool_server(
        SearchToolSettings(server=_server(SEARCH_TOOL_KEYS), data_dir=tmp_path, log_format="text"),
        telemetry,
        embedder_factory=lambda: embedder,
    )
    gateway = build_gateway_server(
        GatewaySettings(server=_server(GATEWAY_KEYS), log_format="text"), telemetry
    )
    servers: list[QuarryServer] = [search, gateway]
    for server in servers:
        await server.start()
    agent = build_agent_server(
        AgentSettings(
            server=_server(AGENT_KEYS),
            search_tool_address=search.address,
            llm_gateway_address=gateway.address,
            gateway_api_key_env="TEST_AGENT_KEY",
            log_format="text",
        ),
        telemetry,
    )
    await agent.start()
    servers.append(agent)
    async with grpc.aio.insecure_channel(search.address) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        for collection in ("docs", "secret"):
            document = st.Document(
                id=f"{collection}-1",
                title="Temporary directories",
                text="tempfile.TemporaryDirectory creates a directory removed on exit.",
            )
            await stub.UpsertDocuments(
                st.UpsertDocumentsRequest(collection=collection, documents=[document]),
                metadata=_bearer(ADMIN),
            )
    yield Stack(search.address, gateway.address, agent.address)
    for server in reversed(servers):
        await server.stop(0)
    telemetry.shutdown()


async def _search_error(
    address: str, collection: str, *metadata: tuple[str, str]
) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        request = st.SearchRequest(collection=collection, query={"primary": "temporary"}, limit=3)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Search(request, metadata=metadata)
    return caught.value


async def test_a_call_without_a_key_is_unauthenticated(stack: Stack) -> None:
    error = await _search_error(stack.search, "docs")
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in (error.details() or "")


async def test_an_unknown_key_is_unauthenticated(stack: Stack) -> None:
    error = await _search_error(stack.search, "docs", *_bearer("qk-made-up"))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    error = await _search_error(stack.search, "docs", ("authorization", READER))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_collection_outside_the_grant_is_denied_naming_the_collection(
    stack: Stack,
) -> None:
    error = await _search_error(stack.search, "secret", *_bearer(READER))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'secret'" in (error.details() or "")
    assert details_of_rpc_error(error).metadata["collection"] == "secret"


async def test_a_read_only_key_cannot_write_its_own_collection(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.search) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        found = await stub.Search(
            st.SearchRequest(collection="docs", query={"primary": "temporary"}, limit=3),
            metadata=_bearer(READER),
        )
        assert found.results
        for call in (
            stub.UpsertDocuments(
                st.UpsertDocumentsRequest(
                    collection="docs", documents=[st.Document(id="x", text="x")]
                ),
                metadata=_bearer(READER),
            ),
            stub.DeleteCollection(
                st.DeleteCollectionRequest(collection="docs"), metadata=_bearer(READER)
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "may not write collection 'docs'" in (caught.value.details() or "")


async def test_list_collections_shows_only_the_collections_a_key_may_read(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.search) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        request = st.ListCollectionsRequest()
        as_reader = await stub.ListCollections(request, metadata=_bearer(READER))
        as_admin = await stub.ListCollections(request, metadata=_bearer(ADMIN))
    assert [c.name for c in as_reader.collections] == ["docs"]
    assert sorted(c.name for c in as_admin.collections) == ["docs", "secret"]


async def test_health_and_reflection_stay_open_without_a_key(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.agent) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="quarry.agent.v1.AgentService")
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

        async def one() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        names = [
            s.name
            async for reply in stub.ServerReflectionInfo(one())
            for s in reply.list_services_response.service
        ]
    assert "quarry.agent.v1.AgentService" in names


async def test_only_a_gateway_key_may_call_the_gateway_directly(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.gateway) as channel:
        stub = gw_grpc.LlmGatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetStatus(gw.GetStatusRequest(), metadata=_bearer(READER))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "LLM gateway" in (caught.value.details() or "")
        status = await stub.GetStatus(gw.GetStatusRequest(), metadata=_bearer(AGENT))
    assert status.routes


async def _stream_run(address: str, collection: str, key: str) -> list[agent_pb2.StreamRunResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        call = stub.StreamRun(
            agent_pb2.StreamRunRequest(query="temporary directory", collection=collection),
            metadata=_bearer(key),
            timeout=60,
        )
        return [event async for event in call]


async def test_the_agent_answers_a_caller_about_a_granted_collection(stack: Stack) -> None:
    events = await _stream_run(stack.agent, "docs", READER)
    assert events[-1].WhichOneof("event") == "done"
    assert events[-1].done.response.results[0].chunk.document_id == "docs-1"


async def test_the_agent_refuses_a_collection_outside_the_callers_grant(stack: Stack) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stream_run(stack.agent, "secret", READER)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'secret'" in (caught.value.details() or "")


async def test_the_agent_forwards_the_callers_key_so_the_search_tool_checks_it(
    stack: Stack,
) -> None:
    # the agent's table lets wide-reader read every collection; the search tool's does not
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stream_run(stack.agent, "secret", WIDE_READER)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "search tool" in (caught.value.details() or "")
    assert "'secret'" in (caught.value.details() or "")


async def test_keys_never_appear_in_logs_spans_or_errors(
    stack: Stack, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    errors = [
        await _search_error(stack.search, "secret", *_bearer(READER)),
        await _search_error(stack.search, "docs", *_bearer("qk-made-up")),
    ]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stream_run(stack.agent, "secret", WIDE_READER)
    errors.append(caught.value)
    await _stream_run(stack.agent, "docs", READER)
    texts = [r.getMessage() + repr(r.__dict__) for r in caplog.records]
    texts += [f"{e.details()} {e.trailing_metadata()}" for e in errors]
    texts += [repr(dict(s.attributes or {})) + repr(s.events) for s in spans.get_finished_spans()]
    assert spans.get_finished_spans()
    assert caplog.records
    for secret in (*KEYS, "qk-made-up"):
        assert not [t for t in texts if secret in t], secret


def test_a_key_must_be_configured_by_its_digest_not_in_plain_text() -> None:
    with pytest.raises(ValidationError, match="SHA-256"):
        ApiKey(name="oops", sha256=READER)


def test_a_proto_service_without_a_rule_for_every_method_is_refused() -> None:
    def register(server: grpc.aio.Server) -> None:
        st_grpc.add_SearchToolServiceServicer_to_server(st_grpc.SearchToolServiceServicer(), server)

    registration = ServiceRegistration(
        "quarry.searchtool.v1.SearchToolService", register, {"Search": READ}
    )
    with pytest.raises(ValueError, match="no access rule for UpsertDocuments"):
        build_server([registration], _server([]))
