"""The search tool as the loop's `SearchClient`, over gRPC, with deadlines passed downstream.

Failed calls become `services.common.errors` exceptions of the same status code, so the loop never
sees grpc; a call waits briefly for the channel to connect, then names the search tool as
unreachable (`services.agent.dependencies`). The agent sends the caller's filter and the model's
filter side by side; the search tool validates and combines them.

The search tool's protobuf shapes (`quarry.searchtool.v1`) convert to and from the domain's
(`services.agent.search`) here, below the client, and nowhere else.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent.dependencies import call_options, dependency_error
from services.agent.filter_wire import caller_filter_message, filter_message
from services.agent.filters import CallerFilter, Scalar
from services.agent.search import (
    WEB_SOURCE,
    Breadcrumb,
    Breakdown,
    CollectionInfo,
    CountRequest,
    DocumentChunks,
    DocumentCount,
    Facet,
    ReadRequest,
    SearchHit,
    SearchPage,
    SearchRequest,
    WebOrigin,
    WebPage,
)

_STRATEGIES: dict[str, int] = {
    "semantic": search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
    "keyword": search_pb2.RETRIEVAL_STRATEGY_KEYWORD,
    "hybrid": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
}
_FIELD_TYPES = {
    search_tool_pb2.FIELD_TYPE_STRING: "string",
    search_tool_pb2.FIELD_TYPE_INTEGER: "integer",
    search_tool_pb2.FIELD_TYPE_DOUBLE: "double",
    search_tool_pb2.FIELD_TYPE_BOOL: "bool",
    search_tool_pb2.FIELD_TYPE_TIMESTAMP: "timestamp",
}


class SearchToolClient:
    """`SearchClient` over `quarry.searchtool.v1.SearchToolService`."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        try:
            reply = await self._stub.Search(
                search_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return SearchPage(
            hits=[search_hit(r) for r in reply.results],
            total_count=reply.total_count,
            took_ms=reply.took_ms,
        )

    async def get_collection(
        self,
        name: str,
        *,
        caller_filter: CallerFilter | None = None,
        remaining_s: float | None,
    ) -> CollectionInfo:
        request = search_tool_pb2.GetCollectionRequest(
            collection=name,
            caller_filter=None if caller_filter is None else caller_filter_message(caller_filter),
        )
        try:
            reply = await self._stub.GetCollection(
                request, **await call_options(self._channel, "search tool", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return collection_info(reply.collection)

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        try:
            reply = await self._stub.ReadDocument(
                read_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return DocumentChunks(
            chunks=[chunk_hit(c) for c in reply.chunks], chunk_count=reply.chunk_count
        )

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        try:
            reply = await self._stub.CountDocuments(
                count_request(request),
                **await call_options(self._channel, "search tool", remaining_s),
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return document_count(reply)

    async def web_search(self, query: str, limit: int, *, remaining_s: float | None) -> WebPage:
        request = search_tool_pb2.WebSearchRequest(query=query, limit=limit)
        try:
            reply = await self._stub.WebSearch(
                request, **await call_options(self._channel, "search tool", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise dependency_error(error, self._channel, "search tool") from error
        return WebPage(
            hits=[web_hit(r) for r in reply.results],
            provider=reply.provider,
            cached=reply.cached,
            took_ms=reply.took_ms,
        )


# --- the search tool's messages <-> domain ----------------------------------------------------


def search_request(request: SearchRequest) -> search_tool_pb2.SearchRequest:
    return search_tool_pb2.SearchRequest(
        collection=request.collection,
        query=search_pb2.SearchQuery(
            primary=request.primary,
            variations=request.variations,
            keyword_expansion=request.keyword_expansion,
        ),
        strategy=_STRATEGIES[request.strategy],  # type: ignore[arg-type]
        filter=filter_message(request.filter_groups),
        caller_filter=caller_filter_message(request.caller_filter),
        limit=request.limit,
        offset=request.offset,
    )


def read_request(request: ReadRequest) -> search_tool_pb2.ReadDocumentRequest:
    return search_tool_pb2.ReadDocumentRequest(
        collection=request.collection,
        document_id=request.document_id,
        first_chunk=request.first_chunk,
        max_chunks=request.max_chunks,
        caller_filter=caller_filter_message(request.caller_filter),
    )


_INTERVALS = {
    "year": search_tool_pb2.DATE_INTERVAL_YEAR,
    "month": search_tool_pb2.DATE_INTERVAL_MONTH,
    "day": search_tool_pb2.DATE_INTERVAL_DAY,
}


def count_request(request: CountRequest) -> search_tool_pb2.CountDocumentsRequest:
    return search_tool_pb2.CountDocumentsRequest(
        collection=request.collection,
        filter=filter_message(request.filter_groups),
        caller_filter=caller_filter_message(request.caller_filter),
        group_by=request.group_by,
        date_interval=_INTERVALS[request.date_interval],
        max_buckets=request.max_buckets,
    )


def document_count(message: search_tool_pb2.CountDocumentsResponse) -> DocumentCount:
    return DocumentCount(
        document_count=message.document_count,
        chunk_count=message.chunk_count,
        breakdowns=tuple(
            Breakdown(
                field=b.field,
                buckets=tuple(Facet(f.value, f.count) for f in b.buckets),
                omitted=b.omitted_buckets,
            )
            for b in message.breakdowns
        ),
        exact=message.exact,
    )


def search_hit(result: search_pb2.SearchResult) -> SearchHit:
    hit = chunk_hit(
        result.chunk,
        score=result.score,
        dense_score=result.dense_score if result.HasField("dense_score") else None,
        keyword_score=result.keyword_score if result.HasField("keyword_score") else None,
    )
    if not result.HasField("web"):
        return hit
    fetched_at = _datetime(result.web.fetched_at) if result.web.HasField("fetched_at") else None
    return replace(hit, web=WebOrigin(result.web.provider, fetched_at))


def web_hit(result: search_tool_pb2.WebResult) -> SearchHit:
    """A web page as a result the model can read and cite, marked as web."""
    fetched_at = _datetime(result.fetched_at) if result.HasField("fetched_at") else None
    return SearchHit(
        id=result.id,
        document_id=result.url,
        title=result.title,
        text=result.snippet,
        score=0.0,
        source=WEB_SOURCE,
        url=result.url,
        web=WebOrigin(result.provider, fetched_at),
    )


def chunk_hit(
    chunk: search_pb2.Chunk,
    *,
    score: float = 0.0,
    dense_score: float | None = None,
    keyword_score: float | None = None,
) -> SearchHit:
    return SearchHit(
        id=chunk.id,
        document_id=chunk.document_id,
        chunk_index=chunk.chunk_index,
        title=chunk.title,
        text=chunk.text,
        score=score,
        source=chunk.source,
        entity_type=chunk.entity_type,
        url=chunk.url,
        created_at=_datetime(chunk.created_at) if chunk.HasField("created_at") else None,
        updated_at=_datetime(chunk.updated_at) if chunk.HasField("updated_at") else None,
        breadcrumbs=tuple(Breadcrumb(b.id, b.name, b.entity_type) for b in chunk.breadcrumbs),
        metadata={k: _metadata_value(v) for k, v in chunk.metadata.items()},
        dense_score=dense_score,
        keyword_score=keyword_score,
    )


def _metadata_value(value: search_pb2.MetadataValue) -> Scalar:
    kind = value.WhichOneof("kind")
    return getattr(value, kind) if kind else ""


def collection_info(message: search_tool_pb2.Collection) -> CollectionInfo:
    return CollectionInfo(
        name=message.name,
        document_count=message.document_count,
        chunk_count=message.chunk_count,
        sources=tuple(Facet(f.value, f.count) for f in message.sources),
        entity_types=tuple(Facet(f.value, f.count) for f in message.entity_types),
        fields=tuple((f.name, _FIELD_TYPES.get(f.type, "unknown")) for f in message.fields),
        earliest_created_at=_datetime(message.earliest_created_at)
        if message.HasField("earliest_created_at")
        else None,
        latest_created_at=_datetime(message.latest_created_at)
        if message.HasField("latest_created_at")
        else None,
        keyword_language=message.keyword_language,
    )


def _datetime(stamp: timestamp_pb2.Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)
