"""The async Python client of `quarry.searchtool.v1.SearchToolService`.

    async with SearchToolClient("127.0.0.1:50051") as search_tool:
        await search_tool.upsert_documents("notes", [search_tool_pb2.Document(id="a", text="...")])
        info = await search_tool.get_collection("notes")

Every call has a deadline (`timeout_s`, else the client's default). A failed call raises the
`services.common.errors` exception of its status code, details included (`NotFound` for a missing
collection, `InvalidArgument` with the offending fields, `Unavailable` with its retry delay), read
by the one shared mapping in `services.common.status`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.auth import StaticKey
from services.common.channels import open_channel
from services.common.status import domain_error
from services.common.telemetry import Telemetry
from services.common.tls import ChannelTls

DEFAULT_TIMEOUT_S = 30.0
SERVICE = "search tool"

T = TypeVar("T")


class SearchToolClient:
    """One channel to the search tool; use as an async context manager or call `close`."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        telemetry: Telemetry | None = None,
        api_key: str = "",
        tls: ChannelTls | None = None,
    ) -> None:
        """`api_key` is sent as `authorization: Bearer <key>`; `tls` secures the channel."""
        self._channel = open_channel(address, telemetry, interceptors=[StaticKey(api_key)], tls=tls)
        self._stub = search_tool_pb2_grpc.SearchToolServiceStub(self._channel)
        self._timeout_s = timeout_s

    async def __aenter__(self) -> SearchToolClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(None)

    async def upsert_documents(
        self,
        collection: str,
        documents: Sequence[search_tool_pb2.Document],
        *,
        building: bool = False,
        timeout_s: float | None = None,
    ) -> search_tool_pb2.UpsertDocumentsResponse:
        """Chunk, embed and store `documents` (idempotent by id); creates the collection.

        `building`: more requests of this build follow, so the collection reports `building`."""
        request = search_tool_pb2.UpsertDocumentsRequest(
            collection=collection, documents=documents, building=building
        )
        return await self._call(self._stub.UpsertDocuments(request, timeout=self._t(timeout_s)))

    async def delete_documents(
        self,
        collection: str,
        document_ids: Sequence[str],
        *,
        timeout_s: float | None = None,
    ) -> search_tool_pb2.DeleteDocumentsResponse:
        """Delete these documents and all their chunks."""
        request = search_tool_pb2.DeleteDocumentsRequest(
            collection=collection, document_ids=document_ids
        )
        return await self._call(self._stub.DeleteDocuments(request, timeout=self._t(timeout_s)))

    async def list_documents(
        self,
        collection: str,
        *,
        filter: search_pb2.Filter | None = None,
        timeout_s: float | None = None,
    ) -> list[search_tool_pb2.DocumentInfo]:
        """Every document of `collection` (matching `filter`), page after page: ordered by id,
        or in the engine's own order where it pages the listing itself (Vespa)."""
        documents: list[search_tool_pb2.DocumentInfo] = []
        token = ""
        while True:
            request = search_tool_pb2.ListDocumentsRequest(
                collection=collection, filter=filter, page_token=token
            )
            reply: search_tool_pb2.ListDocumentsResponse = await self._call(
                self._stub.ListDocuments(request, timeout=self._t(timeout_s))
            )
            documents.extend(reply.documents)
            token = reply.next_page_token
            if not token:
                return documents

    async def list_collections(
        self, *, timeout_s: float | None = None
    ) -> list[search_tool_pb2.Collection]:
        """Every collection with its counts (GetCollection gives the rest)."""
        request = search_tool_pb2.ListCollectionsRequest()
        reply: search_tool_pb2.ListCollectionsResponse = await self._call(
            self._stub.ListCollections(request, timeout=self._t(timeout_s))
        )
        return list(reply.collections)

    async def delete_collection(self, collection: str, *, timeout_s: float | None = None) -> None:
        """Remove a collection and everything in it; `NotFound` if missing."""
        request = search_tool_pb2.DeleteCollectionRequest(collection=collection)
        await self._call(self._stub.DeleteCollection(request, timeout=self._t(timeout_s)))

    async def get_collection(
        self, collection: str, *, timeout_s: float | None = None
    ) -> search_tool_pb2.Collection:
        """Counts, filterable fields and date range of one collection; `NotFound` if missing."""
        request = search_tool_pb2.GetCollectionRequest(collection=collection)
        reply: search_tool_pb2.GetCollectionResponse = await self._call(
            self._stub.GetCollection(request, timeout=self._t(timeout_s))
        )
        return reply.collection

    async def search(
        self, request: search_tool_pb2.SearchRequest, *, timeout_s: float | None = None
    ) -> search_tool_pb2.SearchResponse:
        """One search of one collection."""
        return await self._call(self._stub.Search(request, timeout=self._t(timeout_s)))

    async def web_search(
        self, query: str, *, limit: int = 0, timeout_s: float | None = None
    ) -> search_tool_pb2.WebSearchResponse:
        """Search the web through the configured provider (not a collection)."""
        request = search_tool_pb2.WebSearchRequest(query=query, limit=limit)
        return await self._call(self._stub.WebSearch(request, timeout=self._t(timeout_s)))

    def _t(self, timeout_s: float | None) -> float:
        return self._timeout_s if timeout_s is None else timeout_s

    @staticmethod
    async def _call(call: Awaitable[T]) -> T:
        try:
            return await call
        except grpc.aio.AioRpcError as error:
            raise domain_error(error, SERVICE) from error
