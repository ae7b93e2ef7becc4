"""Concurrent ingest and search on one collection: writes serialise, reads keep answering."""

from __future__ import annotations

import asyncio
import re
from typing import Any, TypeAlias

from quarry.searchtool.v1 import search_tool_pb2

from tests.search_tool.grpc_helpers import document, search

Stub: TypeAlias = Any


def _batch(writer: int, size: int) -> list[search_tool_pb2.Document]:
    return [
        document(f"w{writer}-{i}", f"Writer {writer} wrote note {i} about rivers and bridges.")
        for i in range(size)
    ]


async def test_concurrent_upserts_and_searches_all_succeed_and_nothing_is_lost(
    stub: Stub,
) -> None:
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="busy", documents=_batch(0, 5))
    )
    writers = [
        stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="busy", documents=_batch(w, 12))
        )
        for w in range(1, 5)
    ]
    readers = [stub.Search(search("busy", "rivers and bridges", limit=20)) for _ in range(12)]
    outcomes = await asyncio.gather(*writers, *readers)
    assert [o.documents_upserted for o in outcomes[: len(writers)]] == [12] * len(writers)
    for reply in outcomes[len(writers) :]:
        assert len(reply.results) >= 5
        assert len({r.chunk.id for r in reply.results}) == len(reply.results)
    collection = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="busy"))
    assert collection.collection.document_count == 5 + 4 * 12


async def test_concurrent_creation_of_one_new_collection_creates_it_once(stub: Stub) -> None:
    writes = [
        stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="new", documents=_batch(w, 2))
        )
        for w in range(4)
    ]
    await asyncio.gather(*writes)
    listed = await stub.ListCollections(search_tool_pb2.ListCollectionsRequest())
    assert [(c.name, c.document_count) for c in listed.collections] == [("new", 8)]


async def test_concurrent_rewrites_of_one_document_leave_exactly_one_version(stub: Stub) -> None:
    versions = [
        document("same", " ".join([f"Version {v} sentence about owls."] * (v * 15 + 1)))
        for v in range(4)
    ]
    await asyncio.gather(
        *(
            stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="one", documents=[d])
            )
            for d in versions
        )
    )
    reply = await stub.Search(search("one", "owls", limit=200))
    versions_seen = {v for r in reply.results for v in re.findall(r"Version (\d)", r.chunk.text)}
    assert len(versions_seen) == 1
    indices = sorted(r.chunk.chunk_index for r in reply.results)
    assert indices == list(range(len(indices)))
