"""SIGKILL mid-ingest: the collection reopens with earlier data intact; re-ingest completes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from tests.search_tool.grpc_helpers import document, search
from tests.search_tool.subprocess_server import SubprocessServer

pytestmark = pytest.mark.slow

EARLIER = [
    document(f"early-{i}", f"Early note {i} about lighthouses and tides.") for i in range(20)
]
BULK = [
    document(f"bulk-{i}", f"Bulk record {i}: harbours, ferries and timetables, entry {i}.")
    for i in range(120)
]
SMALL_BATCHES = {"QUARRY_SEARCH_TOOL_WRITE_BATCH_DOCUMENTS": "8"}


@pytest.fixture
async def servers() -> AsyncIterator[list[SubprocessServer]]:
    started: list[SubprocessServer] = []
    yield started
    for server in started:
        await server.kill()


async def _documents(stub: Any) -> int:
    request = search_tool_pb2.GetCollectionRequest(collection="harbour")
    return int((await stub.GetCollection(request)).collection.document_count)


async def test_sigkill_mid_ingest_keeps_earlier_data_and_reingest_completes(
    tmp_path: Path, servers: list[SubprocessServer]
) -> None:
    data = tmp_path / "data"
    first = await SubprocessServer.start(data, SMALL_BATCHES)
    servers.append(first)
    async with grpc.aio.insecure_channel(first.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="harbour", documents=EARLIER)
        )
        bulk = stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="harbour", documents=BULK)
        )
        async with grpc.aio.insecure_channel(first.address) as watcher:
            observer = search_tool_pb2_grpc.SearchToolServiceStub(watcher)
            while await _documents(observer) <= len(EARLIER):
                pass
        await first.kill()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await bulk
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

    second = await SubprocessServer.start(data, SMALL_BATCHES)
    servers.append(second)
    async with grpc.aio.insecure_channel(second.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        partial = await _documents(stub)
        assert len(EARLIER) < partial < len(EARLIER) + len(BULK)
        keyword = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
        found = await stub.Search(search("harbour", "lighthouses", keyword, limit=50))
        assert {r.chunk.document_id for r in found.results} == {d.id for d in EARLIER}

        again = await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="harbour", documents=BULK)
        )
        assert again.documents_upserted == len(BULK)
        assert again.chunks_upserted < len(BULK)
        assert await _documents(stub) == len(EARLIER) + len(BULK)
        last = await stub.Search(search("harbour", "entry 119", keyword, limit=1))
        assert last.results[0].chunk.document_id == "bulk-119"
    assert await second.terminate() == 0
