"""Issue §5 over gRPC: every bad request is refused with the field named, and nothing is written."""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.server import SearchToolServer
from tests.search_tool.grpc_helpers import Op, condition, document, fails, fields_of, search, where

Stub: TypeAlias = Any
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


@pytest.fixture
async def loaded(stub: Stub) -> Stub:
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection="docs",
            documents=[
                document("a", "alpha text", source="s1", metadata={"year": 2024}),
                document("b", "beta text", source="s2", metadata={"year": 2023}),
            ],
        )
    )
    return stub


async def _chunk_count(stub: Stub, collection: str) -> int:
    reply = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection=collection))
    return int(reply.collection.chunk_count)


async def test_unknown_collection_is_not_found_for_every_read_and_delete(loaded: Stub) -> None:
    details = await fails(loaded.Search(search("missing", "x")), NOT_FOUND)
    assert details.metadata == {"collection": "missing"}
    await fails(
        loaded.GetCollection(search_tool_pb2.GetCollectionRequest(collection="missing")), NOT_FOUND
    )
    await fails(
        loaded.DeleteCollection(search_tool_pb2.DeleteCollectionRequest(collection="missing")),
        NOT_FOUND,
    )
    request = search_tool_pb2.DeleteDocumentsRequest(collection="missing", document_ids=["a"])
    await fails(loaded.DeleteDocuments(request), NOT_FOUND)


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "has space", "a" * 65, "semi;colon"])
async def test_bad_collection_name_is_invalid(loaded: Stub, name: str) -> None:
    details = await fails(loaded.Search(search(name, "x")), INVALID)
    assert "collection" in fields_of(details)
    upsert = search_tool_pb2.UpsertDocumentsRequest(collection=name, documents=[document("d", "t")])
    assert fields_of(await fails(loaded.UpsertDocuments(upsert), INVALID)) == ["collection"]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"primary": ""}, "query.primary"),
        ({"primary": "   "}, "query.primary"),
        ({"variations": ["v"] * 10}, "query.variations"),
        ({"variations": ["ok", ""]}, "query.variations[1]"),
        ({"limit": 201}, "limit"),
        ({"limit": -1}, "limit"),
        ({"offset": -5}, "offset"),
        ({"offset": 1_001}, "offset"),
        ({"offset": 2**31 - 1}, "offset"),
    ],
)
async def test_bad_search_fields_are_invalid_and_named(
    loaded: Stub, request_fields: dict[str, Any], field: str
) -> None:
    primary = request_fields.pop("primary", "text")
    details = await fails(loaded.Search(search("docs", primary, **request_fields)), INVALID)
    assert fields_of(details) == [field]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (condition("nope", Op.FILTER_OPERATOR_EQUALS, "x"), "field"),
        (condition("", Op.FILTER_OPERATOR_EQUALS, "x"), "field"),
        (condition("metadata.unknown_key", Op.FILTER_OPERATOR_EQUALS, "x"), "field"),
        (condition("source", Op.FILTER_OPERATOR_UNSPECIFIED, "x"), "operator"),
        (condition("source", Op.FILTER_OPERATOR_GREATER_THAN, "m"), "operator"),
        (condition("metadata.year", Op.FILTER_OPERATOR_CONTAINS, "20"), "operator"),
        (condition("created_at", Op.FILTER_OPERATOR_CONTAINS, "2024"), "operator"),
        (condition("source", Op.FILTER_OPERATOR_IN, "s1"), "value"),
        (condition("source", Op.FILTER_OPERATOR_NOT_IN, []), "value"),
        (condition("source", Op.FILTER_OPERATOR_EQUALS, ["s1"]), "value"),
        (condition("created_at", Op.FILTER_OPERATOR_GREATER_THAN, "yesterday"), "value"),
        (condition("created_at", Op.FILTER_OPERATOR_GREATER_THAN, "2024-13-45"), "value"),
        (condition("metadata.year", Op.FILTER_OPERATOR_EQUALS, "2024"), "value"),
        (condition("source", Op.FILTER_OPERATOR_EQUALS, None), "value"),
    ],
)
async def test_invalid_filter_is_refused_naming_the_condition_part(
    loaded: Stub, bad: search_pb2.FilterCondition, field: str
) -> None:
    ok = condition("source", Op.FILTER_OPERATOR_EQUALS, "s1")
    request = search("docs", "text", filter=where([ok], [ok, bad]))
    details = await fails(loaded.Search(request), INVALID)
    assert fields_of(details) == [f"filter.groups[1].conditions[1].{field}"]


async def test_every_bad_condition_is_reported_at_once(loaded: Stub) -> None:
    request = search(
        "docs",
        "text",
        filter=where(
            [condition("nope", Op.FILTER_OPERATOR_EQUALS, "x")],
            [condition("source", Op.FILTER_OPERATOR_IN, "x")],
        ),
    )
    details = await fails(loaded.Search(request), INVALID)
    assert fields_of(details) == [
        "filter.groups[0].conditions[0].field",
        "filter.groups[1].conditions[0].value",
    ]


async def test_oversized_document_fails_the_whole_request_and_writes_nothing(
    loaded: Stub,
) -> None:
    before = await _chunk_count(loaded, "docs")
    request = search_tool_pb2.UpsertDocumentsRequest(
        collection="docs",
        documents=[document("new-ok", "fine text"), document("huge", "x " * 20_000)],
    )
    details = await fails(loaded.UpsertDocuments(request), INVALID)
    assert fields_of(details) == ["documents[1].text"]
    assert await _chunk_count(loaded, "docs") == before
    fresh = search_tool_pb2.UpsertDocumentsRequest(
        collection="fresh", documents=[document("huge", "x " * 20_000)]
    )
    await fails(loaded.UpsertDocuments(fresh), INVALID)
    await fails(
        loaded.GetCollection(search_tool_pb2.GetCollectionRequest(collection="fresh")), NOT_FOUND
    )


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (document("", "text"), "documents[1].id"),
        (document("bad\x00id", "text"), "documents[1].id"),
        (document("ok-1", "  "), "documents[1].text"),
        (document("ok-2", "t", metadata={"year": "2024"}), 'documents[1].metadata["year"]'),
        (document("ok-3", "t", metadata={"bad-key": 1}), 'documents[1].metadata["bad-key"]'),
        (document("a", "duplicate of the first"), "documents[1].id"),
    ],
)
async def test_invalid_document_is_refused_before_anything_is_written(
    loaded: Stub, bad: search_tool_pb2.Document, field: str
) -> None:
    before = await _chunk_count(loaded, "docs")
    request = search_tool_pb2.UpsertDocumentsRequest(
        collection="docs", documents=[document("a", "changed alpha"), bad]
    )
    assert fields_of(await fails(loaded.UpsertDocuments(request), INVALID)) == [field]
    assert await _chunk_count(loaded, "docs") == before
    reply = await loaded.Search(search("docs", "changed", search_pb2.RETRIEVAL_STRATEGY_KEYWORD))
    assert [r.chunk.text for r in reply.results] == []


async def test_empty_requests_are_invalid(loaded: Stub) -> None:
    empty_upsert = search_tool_pb2.UpsertDocumentsRequest(collection="docs")
    assert fields_of(await fails(loaded.UpsertDocuments(empty_upsert), INVALID)) == ["documents"]
    empty_delete = search_tool_pb2.DeleteDocumentsRequest(collection="docs")
    details = await fails(loaded.DeleteDocuments(empty_delete), INVALID)
    assert fields_of(details) == ["document_ids", "filter"]
    empty_embed = search_tool_pb2.EmbedRequest()
    assert fields_of(await fails(loaded.Embed(empty_embed), INVALID)) == ["texts"]
    blank = search_tool_pb2.EmbedRequest(texts=["ok", ""])
    assert fields_of(await fails(loaded.Embed(blank), INVALID)) == ["texts[1]"]


async def test_delete_with_an_invalid_filter_deletes_nothing(loaded: Stub) -> None:
    before = await _chunk_count(loaded, "docs")
    request = search_tool_pb2.DeleteDocumentsRequest(
        collection="docs",
        document_ids=["a"],
        filter=where([condition("source", Op.FILTER_OPERATOR_LESS_THAN, "s2")]),
    )
    details = await fails(loaded.DeleteDocuments(request), INVALID)
    assert fields_of(details) == ["filter.groups[0].conditions[0].operator"]
    assert await _chunk_count(loaded, "docs") == before


@pytest.mark.parametrize(
    ("stamp", "field"),
    [
        ({"seconds": 2**62}, "documents[1].created_at.seconds"),
        ({"seconds": -62_135_596_801}, "documents[1].created_at.seconds"),
        ({"seconds": 0, "nanos": 2_000_000_000}, "documents[1].created_at.nanos"),
        ({"seconds": 0, "nanos": -1}, "documents[1].created_at.nanos"),
    ],
)
async def test_a_timestamp_outside_protobufs_range_is_invalid_and_writes_nothing(
    loaded: Stub, stamp: dict[str, int], field: str
) -> None:
    bad = document("c", "gamma text")
    bad.created_at.seconds = stamp["seconds"]
    bad.created_at.nanos = stamp.get("nanos", 0)
    request = search_tool_pb2.UpsertDocumentsRequest(
        collection="docs", documents=[document("ok", "fine text"), bad]
    )
    details = await fails(loaded.UpsertDocuments(request), INVALID)
    assert fields_of(details) == [field]
    assert await _chunk_count(loaded, "docs") == 2


async def test_the_first_and_last_instants_of_the_calendar_are_stored_and_filtered(
    loaded: Stub,
) -> None:
    first, last = document("first", "first day"), document("last", "last second")
    first.created_at.seconds = -62_135_596_800
    last.created_at.seconds = 253_402_300_799
    await loaded.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=[first, last])
    )
    early = where([condition("created_at", Op.FILTER_OPERATOR_LESS_THAN, "0001-01-02")])
    late = where([condition("created_at", Op.FILTER_OPERATOR_GREATER_THAN, "9999-12-31")])
    for found, expected in ((early, "first"), (late, "last")):
        reply = await loaded.Search(search("docs", "day second", filter=found))
        assert [r.chunk.document_id for r in reply.results] == [expected]


async def test_a_search_tool_that_stops_accepting_refuses_new_calls_unavailable(
    server: SearchToolServer, stub: Stub
) -> None:
    """The search tool's server (built from the common one) closes the same gate: a call racing
    the listener's close is refused retryably, not cancelled."""
    stopping = asyncio.ensure_future(server.stop(0.5))
    while not stopping.done() and not server.admission.closed:  # noqa: ASYNC110
        await asyncio.sleep(0.005)  # the gate has no event to wait on
    details = await fails(
        stub.ListCollections(search_tool_pb2.ListCollectionsRequest()),
        grpc.StatusCode.UNAVAILABLE,
    )
    await stopping
    assert (details.reason, details.retry_after_s) == ("CLOSING", 1.0)
