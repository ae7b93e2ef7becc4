"""The public SearchToolClient against a real search tool; failures come back as domain errors."""

from __future__ import annotations

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.errors import InvalidArgument, NotFound
from services.common.status import details_of_rpc_error
from services.search_tool.client import SearchToolClient
from services.search_tool.server import SearchToolServer
from tests.search_tool.grpc_helpers import document, search

KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD


async def test_upserted_documents_are_described_and_found(server: SearchToolServer) -> None:
    async with SearchToolClient(server.address, timeout_s=30) as client:
        upserted = await client.upsert_documents(
            "notes",
            [
                document("a", "TemporaryDirectory removes itself on exit.", title="tempfile"),
                document("b", "shutil.rmtree deletes a whole directory tree.", title="shutil"),
            ],
        )
        collection = await client.get_collection("notes")
        found = await client.search(search("notes", "TemporaryDirectory", KEYWORD))
    assert upserted.documents_upserted == 2
    assert collection.document_count == 2
    assert [r.chunk.document_id for r in found.results] == ["a"]


async def test_a_missing_collection_is_not_found_naming_the_service(
    server: SearchToolServer,
) -> None:
    async with SearchToolClient(server.address) as client:
        with pytest.raises(NotFound, match=r"^search tool: "):
            await client.get_collection("nope")


async def test_a_refused_document_names_the_offending_field(server: SearchToolServer) -> None:
    async with SearchToolClient(server.address) as client:
        with pytest.raises(InvalidArgument) as caught:
            await client.upsert_documents("notes", [search_tool_pb2.Document(id="a\tb", text="x")])
    assert [v.field for v in caught.value.violations] == ["documents[0].id"]


async def test_a_collection_reports_building_until_a_request_without_the_flag(
    server: SearchToolServer,
) -> None:
    async with SearchToolClient(server.address, timeout_s=30) as client:
        await client.upsert_documents("notes", [document("a", "first part")], building=True)
        during = await client.get_collection("notes")
        [listed] = await client.list_collections()
        await client.upsert_documents("notes", [document("b", "last part")])
        after = await client.get_collection("notes")
    assert during.building
    assert listed.building
    assert not after.building


async def test_list_documents_pages_by_id_and_filters_with_the_search_filter(
    server: SearchToolServer, stub: search_tool_pb2_grpc.SearchToolServiceStub
) -> None:
    documents = [
        document(f"doc-{n:02}", f"text {n}", metadata={"even": n % 2 == 0}) for n in range(25)
    ]
    even = search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[
                    search_pb2.FilterCondition(
                        field="metadata.even",
                        operator=search_pb2.FILTER_OPERATOR_EQUALS,
                        value={"bool_value": True},
                    )
                ]
            )
        ]
    )
    async with SearchToolClient(server.address, timeout_s=30) as client:
        await client.upsert_documents("notes", documents)
        first = await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(collection="notes", page_size=10)
        )
        everything = await client.list_documents("notes")
        evens = await client.list_documents("notes", filter=even)
    assert [d.id for d in first.documents] == [f"doc-{n:02}" for n in range(10)]
    second = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(
            collection="notes", page_size=10, page_token=first.next_page_token
        )
    )
    assert [d.id for d in second.documents] == [f"doc-{n:02}" for n in range(10, 20)]
    assert [d.id for d in everything] == [f"doc-{n:02}" for n in range(25)]
    assert [d.id for d in evens] == [f"doc-{n:02}" for n in range(0, 25, 2)]
    assert everything[3].chunk_count == 1
    assert everything[3].metadata["even"].bool_value is False


@pytest.mark.parametrize("token", ["garbage", "doc-09", "eyJ4IjogMX0=", "%%%", "x" * 100_000])
async def test_list_documents_refuses_a_page_token_it_did_not_issue(
    server: SearchToolServer, stub: search_tool_pb2_grpc.SearchToolServiceStub, token: str
) -> None:
    """A garbage token used to return the first page (ListRuns refused the same token)."""
    async with SearchToolClient(server.address, timeout_s=30) as client:
        await client.upsert_documents("notes", [document("doc-01", "text")])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(collection="notes", page_token=token)
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details_of_rpc_error(refused.value).violations] == ["page_token"]


async def test_list_documents_refuses_a_page_token_issued_for_another_filter(
    server: SearchToolServer, stub: search_tool_pb2_grpc.SearchToolServiceStub
) -> None:
    """A token names a position in one listing: carried to another filter (or collection) it
    would page that listing from the wrong place, silently."""
    wiki = search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[
                    search_pb2.FilterCondition(
                        field="source",
                        operator=search_pb2.FILTER_OPERATOR_EQUALS,
                        value={"string_value": "wiki"},
                    )
                ]
            )
        ]
    )
    async with SearchToolClient(server.address, timeout_s=30) as client:
        await client.upsert_documents(
            "notes", [document(f"doc-{n:02}", f"text {n}", source="wiki") for n in range(5)]
        )
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="notes", page_size=2, filter=wiki)
    )
    same = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(
            collection="notes", page_size=2, filter=wiki, page_token=first.next_page_token
        )
    )
    assert [d.id for d in same.documents] == ["doc-02", "doc-03"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(
                collection="notes", page_size=2, page_token=first.next_page_token
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    (violation,) = details_of_rpc_error(refused.value).violations
    assert violation.field == "page_token"
    assert "another collection or filter" in violation.description
