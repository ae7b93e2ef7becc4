"""The search tool as the loop's `SearchClient`, over gRPC, with deadlines passed downstream.

Failed calls become `services.common.errors` exceptions of the same status code, so the loop never
sees grpc; a call waits briefly for the channel to connect, then names the search tool as
unreachable (`services.agent.dependencies`). The agent sends the caller's filter and the model's
filter side by side; the search tool validates and combines them.
"""

from __future__ import annotations

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent import convert
from services.agent.dependencies import call_options, dependency_error
from services.agent.search import (
    CollectionInfo,
    CountRequest,
    DocumentChunks,
    DocumentCount,
    ReadRequest,
    SearchPage,
    SearchRequest,
    WebPage,
)


class SearchToolClient:
    """`SearchClient` over `quarry.searchtool.v1.SearchToolService`."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        try:
            reply = await self._stub.Search(
                convert.search_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return SearchPage(
            hits=[convert.search_hit(r) for r in reply.results],
            total_count=reply.total_count,
            took_ms=reply.took_ms,
        )

    async def get_collection(
        self,
        name: str,
        *,
        caller_filter: search_pb2.Filter | None = None,
        remaining_s: float | None,
    ) -> CollectionInfo:
        request = search_tool_pb2.GetCollectionRequest(collection=name, caller_filter=caller_filter)
        try:
            reply = await self._stub.GetCollection(
                request, **await call_options(self._channel, "search tool", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return convert.collection_info(reply.collection)

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        try:
            reply = await self._stub.ReadDocument(
                convert.read_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return DocumentChunks(
            chunks=[convert.chunk_hit(c) for c in reply.chunks], chunk_count=reply.chunk_count
        )

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        try:
            reply = await self._stub.CountDocuments(
                convert.count_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return convert.document_count(reply)

    async def web_search(self, query: str, limit: int, *, remaining_s: float | None) -> WebPage:
        request = search_tool_pb2.WebSearchRequest(query=query, limit=limit)
        try:
            reply = await self._stub.WebSearch(
                request, **await call_options(self._channel, "search tool", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return WebPage(
            hits=[convert.web_hit(r) for r in reply.results],
            provider=reply.provider,
            cached=reply.cached,
            took_ms=reply.took_ms,
        )
