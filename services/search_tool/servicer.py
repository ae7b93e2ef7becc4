"""The gRPC edge of the search tool: protobuf in, domain call, protobuf out.

Errors are domain exceptions; the shared interceptor maps them to statuses. Until the embedder
and the engine are loaded, every call is UNAVAILABLE with a retry hint.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from opentelemetry import trace
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.auth import (
    AUTHENTICATED,
    READ,
    WEB_SEARCH,
    WRITE,
    MethodRule,
    visible_collections,
)
from services.common.errors import Unavailable
from services.search_tool.convert import (
    chunk_to_proto,
    collection_to_proto,
    count_request_from_proto,
    count_to_proto,
    coverage_to_proto,
    document_from_proto,
    document_summary_to_proto,
    filter_from_proto,
    hit_to_proto,
    strategy_from_proto,
    web_search_to_proto,
)
from services.search_tool.engine.base import Coverage
from services.search_tool.reading import ReadRequest
from services.search_tool.service import SearchRequest, SearchService
from services.search_tool.web import WebSearchService, WebSearchSettings

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = search_tool_pb2.DESCRIPTOR.services_by_name["SearchToolService"].full_name
ACCESS_RULES: dict[str, MethodRule] = {
    "UpsertDocuments": WRITE,
    "DeleteDocuments": WRITE,
    "DeleteCollection": WRITE,
    "Search": READ,
    "GetCollection": READ,
    "ListDocuments": READ,
    "ListCollections": AUTHENTICATED,
    "Embed": AUTHENTICATED,
    "ReadDocument": READ,
    "CountDocuments": READ,
    "WebSearch": WEB_SEARCH,
}
"""What each RPC requires of an API key (enforced by the shared auth interceptor on the request;
`ListCollections` answers only the collections the key may read; `WebSearch` needs a key whose
`web_search` is true)."""


class SearchToolServicer(search_tool_pb2_grpc.SearchToolServiceServicer):  # type: ignore[misc]
    """Implements `quarry.searchtool.v1.SearchToolService` on a `SearchService`."""

    def __init__(
        self, service: SearchService | None = None, *, web: WebSearchService | None = None
    ) -> None:
        self._service = service
        self._web = web or WebSearchService([], WebSearchSettings())

    @property
    def web(self) -> WebSearchService:
        return self._web

    def attach(self, service: SearchService) -> None:
        """Start answering with `service` (once the embedder and engine are loaded)."""
        self._service = service

    def _ready(self) -> SearchService:
        if self._service is None:
            raise Unavailable("the search tool is still loading its model", retry_after_s=1.0)
        return self._service

    async def UpsertDocuments(
        self, request: search_tool_pb2.UpsertDocumentsRequest, context: Context
    ) -> search_tool_pb2.UpsertDocumentsResponse:
        service = self._ready()
        documents = [
            document_from_proto(d, f"documents[{i}]") for i, d in enumerate(request.documents)
        ]
        with service.faults.on(request.collection):
            result = await service.upsert_documents(
                request.collection, documents, building=request.building
            )
        return search_tool_pb2.UpsertDocumentsResponse(
            documents_upserted=result.documents_upserted,
            chunks_upserted=result.chunks_upserted,
            chunks_deleted=result.chunks_deleted,
        )

    async def DeleteDocuments(
        self, request: search_tool_pb2.DeleteDocumentsRequest, context: Context
    ) -> search_tool_pb2.DeleteDocumentsResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            deleted = await service.delete_documents(
                request.collection,
                list(request.document_ids),
                filter_from_proto(request.filter),
                filter_from_proto(request.caller_filter),
            )
        return search_tool_pb2.DeleteDocumentsResponse(chunks_deleted=deleted)

    async def Search(
        self, request: search_tool_pb2.SearchRequest, context: Context
    ) -> search_tool_pb2.SearchResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            outcome = await service.search(
                SearchRequest(
                    collection=request.collection,
                    primary=request.query.primary,
                    variations=tuple(request.query.variations),
                    keyword_expansion=request.query.keyword_expansion,
                    strategy=strategy_from_proto(request.strategy),
                    filter=filter_from_proto(request.filter),
                    caller_filter=filter_from_proto(request.caller_filter),
                    limit=request.limit,
                    offset=request.offset,
                    deadline_s=context.time_remaining(),
                    validate_only=request.validate_only,
                )
            )
        coverage = outcome.page.coverage
        if coverage.degraded:
            _report_degraded(request.collection, coverage)
        return search_tool_pb2.SearchResponse(
            results=[hit_to_proto(hit) for hit in outcome.page.hits],
            total_count=outcome.page.total_count,
            took_ms=outcome.took_ms,
            coverage=coverage_to_proto(coverage),
        )

    async def ReadDocument(
        self, request: search_tool_pb2.ReadDocumentRequest, context: Context
    ) -> search_tool_pb2.ReadDocumentResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            read = await service.read_document(
                ReadRequest(
                    collection=request.collection,
                    document_id=request.document_id,
                    first_chunk=request.first_chunk,
                    max_chunks=request.max_chunks,
                    caller_filter=filter_from_proto(request.caller_filter),
                )
            )
        return search_tool_pb2.ReadDocumentResponse(
            chunks=[chunk_to_proto(c) for c in read.chunks], chunk_count=read.chunk_count
        )

    async def CountDocuments(
        self, request: search_tool_pb2.CountDocumentsRequest, context: Context
    ) -> search_tool_pb2.CountDocumentsResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            count = await service.count_documents(count_request_from_proto(request))
        return count_to_proto(count)

    async def GetCollection(
        self, request: search_tool_pb2.GetCollectionRequest, context: Context
    ) -> search_tool_pb2.GetCollectionResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            stats = await service.get_collection(
                request.collection, filter_from_proto(request.caller_filter)
            )
        message = collection_to_proto(stats)
        message.building = service.is_building(request.collection)
        message.keyword_language = service.keyword_language(request.collection)
        return search_tool_pb2.GetCollectionResponse(collection=message)

    async def ListCollections(
        self, request: search_tool_pb2.ListCollectionsRequest, context: Context
    ) -> search_tool_pb2.ListCollectionsResponse:
        service = self._ready()
        collections = await service.list_collections()
        visible = set(visible_collections([c.name for c in collections]))
        messages = [collection_to_proto(c, full=False) for c in collections if c.name in visible]
        for message in messages:
            message.building = service.is_building(message.name)
            message.keyword_language = service.keyword_language(message.name)
        return search_tool_pb2.ListCollectionsResponse(collections=messages)

    async def DeleteCollection(
        self, request: search_tool_pb2.DeleteCollectionRequest, context: Context
    ) -> search_tool_pb2.DeleteCollectionResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            await service.delete_collection(request.collection)
        return search_tool_pb2.DeleteCollectionResponse()

    async def Embed(
        self, request: search_tool_pb2.EmbedRequest, context: Context
    ) -> search_tool_pb2.EmbedResponse:
        result = await self._ready().embed(list(request.texts))
        return search_tool_pb2.EmbedResponse(
            embeddings=[search_tool_pb2.Embedding(values=row.tolist()) for row in result.vectors],
            model=result.model,
            dimensions=result.dimensions,
        )

    async def WebSearch(
        self, request: search_tool_pb2.WebSearchRequest, context: Context
    ) -> search_tool_pb2.WebSearchResponse:
        """Needs neither the embedder nor the engine: answers while they load."""
        outcome = await self._web.search(
            request.query, request.limit, deadline_s=context.time_remaining()
        )
        return web_search_to_proto(outcome)

    async def ListDocuments(
        self, request: search_tool_pb2.ListDocumentsRequest, context: Context
    ) -> search_tool_pb2.ListDocumentsResponse:
        service = self._ready()
        with service.faults.on(request.collection):
            page = await service.list_documents(
                request.collection,
                filter_from_proto(request.filter),
                caller_filter=filter_from_proto(request.caller_filter),
                page_size=request.page_size,
                page_token=request.page_token,
            )
        return search_tool_pb2.ListDocumentsResponse(
            documents=[document_summary_to_proto(d) for d in page.documents],
            next_page_token=page.next_page_token,
        )


def _report_degraded(collection: str, coverage: Coverage) -> None:
    """A search that covered part of the collection: a warning and attributes on the RPC's span
    (`quarry.search.coverage.*`), so partial answers are visible in logs and traces."""
    reasons = sorted(r.value for r in coverage.reasons)
    log.warning(
        "search covered part of the collection",
        extra={
            "collection": collection,
            "coverage_percent": coverage.percent,
            "documents_searched": coverage.documents_searched,
            "reasons": reasons,
        },
    )
    span = trace.get_current_span()
    span.set_attribute("quarry.search.coverage.degraded", True)
    span.set_attribute("quarry.search.coverage.percent", coverage.percent)
    span.set_attribute("quarry.search.coverage.documents_searched", coverage.documents_searched)
    span.set_attribute("quarry.search.coverage.reasons", reasons)
