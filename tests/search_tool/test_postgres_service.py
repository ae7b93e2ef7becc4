"""The search tool served over `engine.kind: postgres`, live: ingest and search through gRPC, and
the database going away — readiness NOT_SERVING and UNAVAILABLE with RetryInfo — and coming
back, SERVING again by itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.errors import InvalidArgument
from services.common.postgres import DATABASE_UNAVAILABLE, PostgresSettings
from services.common.settings import ServerSettings
from services.search_tool.config import ChunkingSettings, EngineSettings, SearchToolSettings
from services.search_tool.documents import Document
from services.search_tool.embedding import Embedder
from services.search_tool.engine.postgres import PostgresEngine
from services.search_tool.filters import FieldType, Operator, RawCondition, RawFilter
from services.search_tool.server import SearchToolServer, build_search_tool_server
from services.search_tool.service import SearchRequest, SearchService
from services.search_tool.servicer import SERVICE_NAME
from tests.postgres_server import PostgresServer
from tests.search_tool.grpc_helpers import document, fails, search

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def server(
    postgres_dsn: str, embedder: Embedder, tmp_path: Path
) -> AsyncIterator[SearchToolServer]:
    """A search tool whose DSN comes from a mounted Secret file, as in Kubernetes."""
    secret = tmp_path / "dsn"
    secret.write_text(postgres_dsn)
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5),
        data_dir=tmp_path / "unused",
        chunking=ChunkingSettings(chunk_tokens=32, overlap_tokens=8),
        engine=EngineSettings(
            kind="postgres",
            postgres=PostgresSettings(
                dsn_file=secret, pool_min_size=0, pool_timeout_s=0.5, connect_timeout_s=1
            ),
        ),
        log_format="text",
    )
    built = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await built.start()
    yield built
    await built.stop(0)


async def _status_becomes(health: health_pb2_grpc.HealthStub, wanted: int) -> None:
    """Wait (on the health Watch stream, not a clock) until readiness reads `wanted`."""
    request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
    async with asyncio.timeout(20):
        async for reply in health.Watch(request):
            if reply.status == wanted:
                return


async def test_readiness_follows_the_database_and_recovers_by_itself(
    server: SearchToolServer, postgres_server: PostgresServer
) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await _status_becomes(health, SERVING)
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection="notes",
                documents=[document("a", "PostgreSQL keeps the search tool stateless.")],
            )
        )
        found = await stub.Search(search("notes", "stateless search tool"))
        assert [r.chunk.document_id for r in found.results] == ["a"]

        postgres_server.stop(immediate=True)
        try:
            details = await fails(
                stub.Search(search("notes", "stateless")), grpc.StatusCode.UNAVAILABLE
            )
            assert details.reason == DATABASE_UNAVAILABLE
            assert details.retry_after_s is not None
            await _status_becomes(health, NOT_SERVING)
        finally:
            postgres_server.start()
        await _status_becomes(health, SERVING)
        again = await stub.Search(search("notes", "stateless search tool"))
        assert [r.chunk.document_id for r in again.results] == ["a"]


async def test_searches_validate_filters_with_remembered_fields_and_reread_them_for_a_new_key(
    postgres_dsn: str, embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas on one database. A search validates its filter with the fields its engine
    last read (no round trip) when they name every field the filter uses; a key another replica
    added since is read afresh and filters, and a key no replica added is still refused."""
    settings = SearchToolSettings(
        data_dir=tmp_path / "unused",
        engine=EngineSettings(kind="postgres", postgres=PostgresSettings(pool_min_size=0)),
    )
    first = await PostgresEngine.open(settings.engine.postgres, dsn=postgres_dsn)
    second = await PostgresEngine.open(settings.engine.postgres, dsn=postgres_dsn)
    reads: list[str] = []
    read_fields = second.fields

    async def counted(name: str) -> Mapping[str, FieldType]:
        reads.append(name)
        return await read_fields(name)

    monkeypatch.setattr(second, "fields", counted)
    writer = SearchService(first, embedder, settings)
    reader = SearchService(second, embedder, settings)

    def on(key: str, value: str) -> SearchRequest:
        condition = RawCondition(f"metadata.{key}", Operator.EQUALS, value)
        return SearchRequest("notes", "stateless search", filter=RawFilter(((condition,),)))

    try:
        text = "PostgreSQL keeps the search tool stateless."
        await writer.upsert_documents("notes", [Document("a", text, metadata={"lang": "en"})])
        for _ in range(2):
            found = await reader.search(on("lang", "en"))
            assert [h.chunk.document_id for h in found.page.hits] == ["a"]
        assert reads == ["notes"]  # the second search used the remembered fields

        await writer.upsert_documents("notes", [Document("b", text, metadata={"team": "eng"})])
        found = await reader.search(on("team", "eng"))
        assert [h.chunk.document_id for h in found.page.hits] == ["b"]
        assert reads == ["notes", "notes"]

        with pytest.raises(InvalidArgument, match="unknown metadata key 'nobody'"):
            await reader.search(on("nobody", "x"))
        assert len(reads) == 3
    finally:
        await first.close()
        await second.close()
