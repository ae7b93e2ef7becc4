"""CountDocuments through the real server and embedded engine: documents (not chunks) counted
under (caller) AND (filter), breakdowns by field, metadata and date, and refusals naming fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeAlias

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from tests.search_tool.grpc_helpers import condition, document, fails, fields_of, where

Stub: TypeAlias = Any
COLLECTION = "counts"
EQUALS = search_pb2.FILTER_OPERATOR_EQUALS
LONG = " ".join(f"Paragraph {n} of the report covers quarter {n}." for n in range(30))


async def _load(stub: Stub) -> None:
    def dated(month: int) -> datetime:
        return datetime(2024, month, 5, tzinfo=UTC)

    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection=COLLECTION,
            documents=[
                document("r1", LONG, source="slack", created_at=dated(1), metadata={"kind": "pdf"}),
                document(
                    "r2",
                    "Short PDF.",
                    source="slack",
                    created_at=dated(1),
                    metadata={"kind": "pdf"},
                ),
                document(
                    "r3", "A page.", source="slack", created_at=dated(3), metadata={"kind": "html"}
                ),
                document(
                    "r4",
                    "Drive PDF.",
                    source="drive",
                    created_at=dated(3),
                    metadata={"kind": "pdf"},
                ),
                document("r5", "Secret PDF.", source="vault", metadata={"kind": "pdf"}),
            ],
        )
    )


def _count(**fields: Any) -> search_tool_pb2.CountDocumentsRequest:
    return search_tool_pb2.CountDocumentsRequest(collection=COLLECTION, **fields)


def _buckets(reply: Any, index: int) -> list[tuple[str, int]]:
    return [(b.value, b.count) for b in reply.breakdowns[index].buckets]


async def test_how_many_pdfs_from_slack_counts_documents_not_chunks(stub: Stub) -> None:
    await _load(stub)
    pdfs_from_slack = where(
        [condition("source", EQUALS, "slack"), condition("metadata.kind", EQUALS, "pdf")]
    )
    reply = await stub.CountDocuments(_count(filter=pdfs_from_slack))

    assert reply.document_count == 2
    assert reply.chunk_count > 2
    assert reply.exact


async def test_breakdowns_by_source_metadata_and_month_within_the_caller_filter(
    stub: Stub,
) -> None:
    await _load(stub)
    not_vault = where([condition("source", search_pb2.FILTER_OPERATOR_NOT_EQUALS, "vault")])
    reply = await stub.CountDocuments(
        _count(caller_filter=not_vault, group_by=["source", "metadata.kind", "created_at"])
    )

    assert reply.document_count == 4
    assert _buckets(reply, 0) == [("slack", 3), ("drive", 1)]
    assert _buckets(reply, 1) == [("pdf", 3), ("html", 1)]
    assert _buckets(reply, 2) == [("2024-01", 2), ("2024-03", 2)]
    widened = await stub.CountDocuments(
        _count(caller_filter=not_vault, filter=where([condition("source", EQUALS, "vault")]))
    )
    assert widened.document_count == 0


async def test_a_date_histogram_by_year_keeps_the_latest_buckets_and_names_the_rest(
    stub: Stub,
) -> None:
    await _load(stub)
    reply = await stub.CountDocuments(
        _count(
            group_by=["created_at", "source"],
            date_interval=search_tool_pb2.DATE_INTERVAL_YEAR,
            max_buckets=1,
        )
    )
    assert _buckets(reply, 0) == [("(none)", 1)]
    assert reply.breakdowns[0].omitted_buckets == 1
    assert _buckets(reply, 1) == [("slack", 3)]
    assert reply.breakdowns[1].omitted_buckets == 2


async def test_bad_counts_are_invalid_argument_naming_each_field(stub: Stub) -> None:
    await _load(stub)
    details = await fails(
        stub.CountDocuments(
            _count(group_by=["text", "metadata.nope", "source", "url"], max_buckets=101)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert fields_of(details) == ["group_by", "group_by[0]", "group_by[1]", "max_buckets"]
    details = await fails(
        stub.CountDocuments(
            _count(
                filter=where([condition("title", search_pb2.FILTER_OPERATOR_GREATER_THAN, "a")]),
                caller_filter=where([condition("colour", EQUALS, "x")]),
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert fields_of(details) == [
        "caller_filter.groups[0].conditions[0].field",
        "filter.groups[0].conditions[0].operator",
    ]
    await fails(
        stub.CountDocuments(search_tool_pb2.CountDocumentsRequest(collection="nope")),
        grpc.StatusCode.NOT_FOUND,
    )
