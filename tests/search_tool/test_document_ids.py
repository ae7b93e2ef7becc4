"""Any document id a real source uses round-trips through the API: ingest, search, filters on
`document_id`, re-ingest, delete — and ids that are not ids (control characters, too long) are
refused as a whole request, each one named."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.documents import chunk_id, document_id_problem, parse_chunk_id
from services.search_tool.engine.vespa.documents import chunk_document_id
from services.search_tool.limits import DEFAULT_LIMITS
from tests.search_tool.grpc_helpers import Op, condition, document, fails, fields_of, where

Stub: TypeAlias = Any
KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
SEMANTIC = search_pb2.RETRIEVAL_STRATEGY_SEMANTIC
LONGEST = "é" * (DEFAULT_LIMITS.document_id_bytes // 2)

HOSTILE_IDS = [
    "https://example.com/a?b=1&c=%20#frag",
    "/home/user/My Documents/notes (1).txt",
    "C:\\Users\\x\\file.txt",
    "<dbpedia:Foo_(bar)>",
    "Ærø, Denmark",
    "<CAF=x+y.1@mail.gmail.com>",
    "' OR 1=1 --",
    "a\"b'c`d;",
    "%_\\%",
    "x__chunk_1",
    "x",
    "x__chunk_1__chunk_0",
    "日本語/ドキュメント",
    "🙂 doc",
    " padded id ",
    "id:quarry:chunk::docs.abc",
    "a\u200bb",
    LONGEST,
]


def _word(i: int) -> str:
    return f"zq{chr(ord('a') + i // 26)}{chr(ord('a') + i % 26)}"


@pytest.fixture
async def loaded(stub: Stub) -> Stub:
    documents = [
        document(doc_id, f"{_word(i)} a document whose id is hostile number {i}.")
        for i, doc_id in enumerate(HOSTILE_IDS)
    ]
    reply = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="ids", documents=documents)
    )
    assert reply.documents_upserted == len(HOSTILE_IDS)
    return stub


async def _document_ids(stub: Stub, *conditions: search_pb2.FilterCondition) -> list[str]:
    reply = await stub.Search(
        search_tool_pb2.SearchRequest(
            collection="ids",
            query=search_pb2.SearchQuery(primary="a document whose id is hostile"),
            strategy=SEMANTIC,
            filter=where(list(conditions)) if conditions else None,
            limit=200,
        )
    )
    return sorted({r.chunk.document_id for r in reply.results})


async def test_every_hostile_id_is_stored_found_and_filtered_on_exactly(loaded: Stub) -> None:
    described = await loaded.GetCollection(search_tool_pb2.GetCollectionRequest(collection="ids"))
    assert described.collection.document_count == len(HOSTILE_IDS)
    for i, doc_id in enumerate(HOSTILE_IDS):
        reply = await loaded.Search(
            search_tool_pb2.SearchRequest(
                collection="ids", query=search_pb2.SearchQuery(primary=_word(i)), strategy=KEYWORD
            )
        )
        assert [r.chunk.document_id for r in reply.results] == [doc_id]
        assert parse_chunk_id(reply.results[0].chunk.id) == (doc_id, 0)
        assert await _document_ids(
            loaded, condition("document_id", Op.FILTER_OPERATOR_EQUALS, doc_id)
        ) == [doc_id]


async def test_in_not_in_and_contains_on_hostile_ids(loaded: Stub) -> None:
    wanted = ["x", "x__chunk_1", "' OR 1=1 --", "%_\\%"]
    found = await _document_ids(loaded, condition("document_id", Op.FILTER_OPERATOR_IN, wanted))
    assert found == sorted(wanted)
    rest = await _document_ids(loaded, condition("document_id", Op.FILTER_OPERATOR_NOT_IN, wanted))
    assert rest == sorted(set(HOSTILE_IDS) - set(wanted))
    underscore = await _document_ids(
        loaded, condition("document_id", Op.FILTER_OPERATOR_CONTAINS, "%_\\")
    )
    assert underscore == ["%_\\%"]
    accented = await _document_ids(
        loaded, condition("document_id", Op.FILTER_OPERATOR_CONTAINS, "ærø")
    )
    assert accented == ["Ærø, Denmark"]


async def test_reingesting_hostile_ids_unchanged_writes_nothing(loaded: Stub) -> None:
    documents = [
        document(doc_id, f"{_word(i)} a document whose id is hostile number {i}.")
        for i, doc_id in enumerate(HOSTILE_IDS)
    ]
    reply = await loaded.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="ids", documents=documents)
    )
    assert (reply.documents_upserted, reply.chunks_upserted) == (len(HOSTILE_IDS), 0)


async def test_deleting_hostile_ids_removes_exactly_those_documents(loaded: Stub) -> None:
    doomed = ["x", "' OR 1=1 --", "%_\\%", "<dbpedia:Foo_(bar)>", LONGEST]
    reply = await loaded.DeleteDocuments(
        search_tool_pb2.DeleteDocumentsRequest(collection="ids", document_ids=doomed)
    )
    assert reply.chunks_deleted == len(doomed)
    left = await _document_ids(loaded)
    assert left == sorted(set(HOSTILE_IDS) - set(doomed))
    by_filter = await loaded.DeleteDocuments(
        search_tool_pb2.DeleteDocumentsRequest(
            collection="ids",
            filter=where([condition("document_id", Op.FILTER_OPERATOR_EQUALS, "x__chunk_1")]),
        )
    )
    assert by_filter.chunks_deleted == 1
    assert "x__chunk_1__chunk_0" in await _document_ids(loaded)


async def test_bad_ids_refuse_the_whole_request_naming_each_one(loaded: Stub) -> None:
    bad = ["nul\x00", "line\nbreak", "del\x7f", "c1\x85", "é" * (len(LONGEST) + 1), ""]
    documents = [document("fine new id", "zzfine text"), *(document(b, "text") for b in bad)]
    request = search_tool_pb2.UpsertDocumentsRequest(collection="ids", documents=documents)
    details = await fails(loaded.UpsertDocuments(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert fields_of(details) == [f"documents[{i}].id" for i in range(1, len(bad) + 1)]
    assert "fine new id" not in await _document_ids(loaded)
    delete = search_tool_pb2.DeleteDocumentsRequest(collection="ids", document_ids=["x", "a\tb"])
    details = await fails(loaded.DeleteDocuments(delete), grpc.StatusCode.INVALID_ARGUMENT)
    assert fields_of(details) == ["document_ids[1]"]
    assert "x" in await _document_ids(loaded)


@given(st.text(min_size=1, max_size=40), st.integers(min_value=0, max_value=10_000))
def test_chunk_ids_decode_to_their_document_and_index(document_id: str, index: int) -> None:
    assert parse_chunk_id(chunk_id(document_id, index)) == (document_id, index)


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, 50), st.integers(0, 50))
def test_distinct_chunks_get_distinct_ids(a: str, b: str, i: int, j: int) -> None:
    if (a, i) != (b, j):
        assert chunk_id(a, i) != chunk_id(b, j)


def test_vespa_document_ids_are_url_safe_and_distinct_for_hostile_ids() -> None:
    chunk_ids = [chunk_id(d, 0) for d in HOSTILE_IDS]
    vespa_ids = [chunk_document_id("ids", c) for c in chunk_ids]
    assert len(set(vespa_ids)) == len(vespa_ids)
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
    assert all(set(v) <= safe for v in vespa_ids)


@pytest.mark.parametrize("doc_id", HOSTILE_IDS)
def test_real_world_ids_are_accepted(doc_id: str) -> None:
    assert document_id_problem(doc_id, DEFAULT_LIMITS.document_id_bytes) is None
