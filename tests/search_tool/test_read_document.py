"""ReadDocument: a document's chunks by index range, through the real server and embedded engine,
always inside the caller's filter (a document outside it is NOT_FOUND, like a missing one)."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from tests.search_tool.grpc_helpers import condition, document, fails, fields_of, where

Stub: TypeAlias = Any
COLLECTION = "reads"
EQUALS = search_pb2.FILTER_OPERATOR_EQUALS
LONG = " ".join(
    f"Sentence number {n} of the long manual explains step {n} in detail." for n in range(40)
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def _load(stub: Stub) -> int:
    reply = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection=COLLECTION,
            documents=[
                document("manual", LONG, title="Manual", source="public"),
                document("secret", "The launch code is 1234.", title="Secret", source="private"),
            ],
        )
    )
    return int(reply.chunks_upserted) - 1


def _read(**fields: Any) -> search_tool_pb2.ReadDocumentRequest:
    return search_tool_pb2.ReadDocumentRequest(collection=COLLECTION, **fields)


async def test_a_range_of_chunks_comes_back_in_order_with_the_documents_chunk_count(
    stub: Stub,
) -> None:
    chunks = await _load(stub)
    assert chunks > 4
    reply = await stub.ReadDocument(_read(document_id="manual", first_chunk=2, max_chunks=3))

    assert [c.chunk_index for c in reply.chunks] == [2, 3, 4]
    assert [c.id for c in reply.chunks] == [f"manual__chunk_{i}" for i in (2, 3, 4)]
    assert reply.chunk_count == chunks
    assert reply.chunks[0].title == "Manual"
    whole = await stub.ReadDocument(_read(document_id="manual", max_chunks=200))
    assert [c.chunk_index for c in whole.chunks] == list(range(chunks))
    assert "Sentence number 0" in whole.chunks[0].text


async def test_a_document_outside_the_caller_filter_is_not_found_like_a_missing_one(
    stub: Stub,
) -> None:
    await _load(stub)
    public = where([condition("source", EQUALS, "public")])
    hidden = await fails(
        stub.ReadDocument(_read(document_id="secret", caller_filter=public)),
        grpc.StatusCode.NOT_FOUND,
    )
    missing = await fails(
        stub.ReadDocument(_read(document_id="nothing", caller_filter=public)),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "1234" not in hidden.message
    assert hidden.message.replace("secret", "X") == missing.message.replace("nothing", "X")
    visible = await stub.ReadDocument(_read(document_id="manual", caller_filter=public))
    assert visible.chunks


async def test_bad_reads_are_invalid_argument_naming_each_field(stub: Stub) -> None:
    await _load(stub)
    details = await fails(
        stub.ReadDocument(
            _read(
                document_id="",
                first_chunk=-1,
                max_chunks=201,
                caller_filter=where([condition("colour", EQUALS, "red")]),
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert fields_of(details) == ["document_id", "first_chunk", "max_chunks"]
    details = await fails(
        stub.ReadDocument(
            _read(document_id="manual", caller_filter=where([condition("colour", EQUALS, "x")]))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert fields_of(details) == ["caller_filter.groups[0].conditions[0].field"]


async def test_reading_an_unknown_collection_is_not_found(stub: Stub) -> None:
    await fails(
        stub.ReadDocument(
            search_tool_pb2.ReadDocumentRequest(collection="nope", document_id="manual")
        ),
        grpc.StatusCode.NOT_FOUND,
    )


async def test_a_document_id_is_refused_by_the_same_rule_on_every_rpc(stub: Stub) -> None:
    """ReadDocument had its own rule (1 to 1,024 characters) beside the ingest one."""
    await _load(stub)
    for bad in ["", "tab\there", "é" * 600]:  # empty, a control character, 1,200 bytes of UTF-8
        read = await fails(stub.ReadDocument(_read(document_id=bad)), INVALID)
        upsert = await fails(
            stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(
                    collection="reads", documents=[{"id": bad, "text": "text"}]
                )
            ),
            INVALID,
        )
        assert fields_of(read) == ["document_id"]
        assert fields_of(upsert) == ["documents[0].id"]
        assert read.violations[0].description == upsert.violations[0].description
