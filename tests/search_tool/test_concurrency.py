"""Concurrent ingest and search on one collection: writes serialise, reads keep answering."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any, TypeAlias

import pytest
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.chunking import Chunker
from services.search_tool.engine.lancedb import engine as lancedb_engine
from services.search_tool.engine.lancedb.rows import to_chunk
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


async def test_a_search_is_answered_while_a_large_upsert_is_still_being_chunked(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokenising a megabyte of text takes seconds: the chunking of the large upsert is held
    until the search has its answer. Were chunking on the event loop, the loop could not answer
    the search until the chunking was released, and the order below would be reversed."""
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="busy", documents=_batch(0, 3))
    )
    held_s = 60.0
    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []
    """Whether the held chunking was released (True) or gave up waiting (False)."""
    split = Chunker.split

    def held_split(self: Chunker, text: str) -> Any:
        if text.startswith("LARGE"):
            entered.set()
            released.append(release.wait(held_s))
        return split(self, text)

    monkeypatch.setattr(Chunker, "split", held_split)
    finished: list[str] = []

    async def large() -> None:
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection="busy", documents=[document("large", "LARGE " + "words " * 2_000)]
            )
        )
        finished.append("upsert")

    upsert = asyncio.create_task(large())
    assert await asyncio.to_thread(entered.wait, held_s)
    reply = await stub.Search(search("busy", "rivers and bridges", limit=5))
    finished.append("search")
    release.set()
    await upsert
    assert released == [True], "the search was answered only after the chunking gave up"
    assert finished == ["search", "upsert"]
    assert len(reply.results) == 3


async def test_a_search_is_answered_while_a_count_is_still_reading_its_chunks(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count reads up to 100,000 stored chunks (seconds of JSON parsing): that reading is held
    until the search has its answer, which it could not get were the reading on the loop."""
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="busy", documents=_batch(0, 3))
    )
    held_s = 60.0
    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []

    def held_to_chunk(text: str) -> Any:
        if not entered.is_set():
            entered.set()
            released.append(release.wait(held_s))
        return to_chunk(text)

    monkeypatch.setattr(lancedb_engine, "to_chunk", held_to_chunk)
    finished: list[str] = []

    async def count() -> Any:
        reply = await stub.CountDocuments(
            search_tool_pb2.CountDocumentsRequest(collection="busy", group_by=["source"])
        )
        finished.append("count")
        return reply

    counting = asyncio.create_task(count())
    assert await asyncio.to_thread(entered.wait, held_s)
    reply = await stub.Search(search("busy", "rivers and bridges", limit=5))
    finished.append("search")
    release.set()
    counted = await counting
    assert released == [True], "the search was answered only after the reading gave up"
    assert finished == ["search", "count"]
    assert len(reply.results) == 3
    assert counted.document_count == 3
