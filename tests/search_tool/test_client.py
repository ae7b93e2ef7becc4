"""The public SearchToolClient against a real search tool; failures come back as domain errors."""

from __future__ import annotations

import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.common.errors import InvalidArgument, NotFound
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
