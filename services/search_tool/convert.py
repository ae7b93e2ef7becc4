"""Protobuf ⇄ domain translation for the search tool (the servicer's only helper)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from google.protobuf import struct_pb2, timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.common.errors import InvalidArgument
from services.search_tool.counting import CountRequest, DateInterval, DocumentCount
from services.search_tool.documents import (
    Breadcrumb,
    Chunk,
    Document,
    MetadataValue,
    epoch_microseconds,
)
from services.search_tool.engine.base import (
    CollectionStats,
    Coverage,
    Degradation,
    DocumentSummary,
    Hit,
    Strategy,
)
from services.search_tool.filters import FieldType, Operator, RawCondition, RawFilter, RawValue
from services.search_tool.web import WebSearchOutcome

_STRATEGIES: dict[int, Strategy] = {
    search_pb2.RETRIEVAL_STRATEGY_UNSPECIFIED: Strategy.HYBRID,
    search_pb2.RETRIEVAL_STRATEGY_SEMANTIC: Strategy.SEMANTIC,
    search_pb2.RETRIEVAL_STRATEGY_KEYWORD: Strategy.KEYWORD,
    search_pb2.RETRIEVAL_STRATEGY_HYBRID: Strategy.HYBRID,
}
_OPERATORS: dict[int, Operator] = {
    search_pb2.FILTER_OPERATOR_EQUALS: Operator.EQUALS,
    search_pb2.FILTER_OPERATOR_NOT_EQUALS: Operator.NOT_EQUALS,
    search_pb2.FILTER_OPERATOR_CONTAINS: Operator.CONTAINS,
    search_pb2.FILTER_OPERATOR_GREATER_THAN: Operator.GREATER_THAN,
    search_pb2.FILTER_OPERATOR_GREATER_THAN_OR_EQUAL: Operator.GREATER_THAN_OR_EQUAL,
    search_pb2.FILTER_OPERATOR_LESS_THAN: Operator.LESS_THAN,
    search_pb2.FILTER_OPERATOR_LESS_THAN_OR_EQUAL: Operator.LESS_THAN_OR_EQUAL,
    search_pb2.FILTER_OPERATOR_IN: Operator.IN,
    search_pb2.FILTER_OPERATOR_NOT_IN: Operator.NOT_IN,
}
_FIELD_TYPES = {
    FieldType.STRING: search_tool_pb2.FIELD_TYPE_STRING,
    FieldType.INTEGER: search_tool_pb2.FIELD_TYPE_INTEGER,
    FieldType.DOUBLE: search_tool_pb2.FIELD_TYPE_DOUBLE,
    FieldType.BOOL: search_tool_pb2.FIELD_TYPE_BOOL,
    FieldType.TIMESTAMP: search_tool_pb2.FIELD_TYPE_TIMESTAMP,
}


def strategy_from_proto(value: int) -> Strategy:
    """UNSPECIFIED (and unknown numbers) mean HYBRID."""
    return _STRATEGIES.get(value, Strategy.HYBRID)


def document_from_proto(document: search_tool_pb2.Document, path: str) -> Document:
    """A domain document; `path` (e.g. `documents[3]`) names it in errors."""
    return Document(
        id=document.id,
        text=document.text,
        title=document.title,
        source=document.source,
        entity_type=document.entity_type,
        created_at=_time(document, "created_at", path),
        updated_at=_time(document, "updated_at", path),
        url=document.url,
        breadcrumbs=tuple(Breadcrumb(b.id, b.name, b.entity_type) for b in document.breadcrumbs),
        metadata={
            key: _metadata_value(value, f'{path}.metadata["{key}"]')
            for key, value in sorted(document.metadata.items())
        },
    )


def document_to_proto(document: Document) -> search_tool_pb2.Document:
    """The wire form of a domain document."""
    message = search_tool_pb2.Document(
        id=document.id,
        title=document.title,
        text=document.text,
        source=document.source,
        entity_type=document.entity_type,
        url=document.url,
        breadcrumbs=[
            search_pb2.Breadcrumb(id=b.id, name=b.name, entity_type=b.entity_type)
            for b in document.breadcrumbs
        ],
        metadata={key: metadata_value_to_proto(value) for key, value in document.metadata.items()},
    )
    if document.created_at is not None:
        _set_time(message.created_at, document.created_at)
    if document.updated_at is not None:
        _set_time(message.updated_at, document.updated_at)
    return message


def filter_from_proto(message: search_pb2.Filter) -> RawFilter:
    """The filter as sent; validation happens in the domain."""
    return RawFilter(
        tuple(
            tuple(
                RawCondition(
                    field=c.field,
                    operator=_OPERATORS.get(c.operator),
                    value=_value(c.value) if c.HasField("value") else None,
                )
                for c in group.conditions
            )
            for group in message.groups
        )
    )


def chunk_to_proto(chunk: Chunk) -> search_pb2.Chunk:
    message = search_pb2.Chunk(
        id=chunk.id,
        document_id=chunk.document_id,
        chunk_index=chunk.chunk_index,
        title=chunk.title,
        text=chunk.text,
        source=chunk.source,
        entity_type=chunk.entity_type,
        url=chunk.url,
        breadcrumbs=[
            search_pb2.Breadcrumb(id=b.id, name=b.name, entity_type=b.entity_type)
            for b in chunk.breadcrumbs
        ],
    )
    if chunk.created_at is not None:
        _set_time(message.created_at, chunk.created_at)
    if chunk.updated_at is not None:
        _set_time(message.updated_at, chunk.updated_at)
    for key, value in chunk.metadata.items():
        message.metadata[key].CopyFrom(metadata_value_to_proto(value))
    return message


_DEGRADATIONS = {
    Degradation.MATCH_PHASE: search_tool_pb2.COVERAGE_DEGRADATION_MATCH_PHASE,
    Degradation.TIMEOUT: search_tool_pb2.COVERAGE_DEGRADATION_TIMEOUT,
    Degradation.ADAPTIVE_TIMEOUT: search_tool_pb2.COVERAGE_DEGRADATION_ADAPTIVE_TIMEOUT,
    Degradation.ANN_TIMEOUT: search_tool_pb2.COVERAGE_DEGRADATION_ANN_TIMEOUT,
    Degradation.NON_IDEAL_STATE: search_tool_pb2.COVERAGE_DEGRADATION_NON_IDEAL_STATE,
    Degradation.PARTIAL: search_tool_pb2.COVERAGE_DEGRADATION_PARTIAL,
}


def coverage_to_proto(coverage: Coverage) -> search_tool_pb2.Coverage:
    """How much of the collection answered; reasons in a fixed order."""
    return search_tool_pb2.Coverage(
        percent=coverage.percent,
        documents_searched=coverage.documents_searched,
        degraded=coverage.degraded,
        reasons=sorted(_DEGRADATIONS[r] for r in coverage.reasons),
    )


def hit_to_proto(hit: Hit) -> search_pb2.SearchResult:
    result = search_pb2.SearchResult(chunk=chunk_to_proto(hit.chunk), score=hit.score)
    if hit.dense_score is not None:
        result.dense_score = hit.dense_score
    if hit.keyword_score is not None:
        result.keyword_score = hit.keyword_score
    return result


def collection_to_proto(stats: CollectionStats, *, full: bool = True) -> search_tool_pb2.Collection:
    """`full=False` keeps name and counts only (ListCollections)."""
    message = search_tool_pb2.Collection(
        name=stats.name,
        document_count=stats.document_count,
        chunk_count=stats.chunk_count,
        damage=stats.damage,
    )
    if not full:
        return message
    message.sources.extend(_facets(stats.sources))
    message.entity_types.extend(_facets(stats.entity_types))
    message.fields.extend(
        search_tool_pb2.FieldInfo(name=name, type=_FIELD_TYPES[field_type])
        for name, field_type in stats.fields.items()
    )
    if stats.earliest_created_at is not None:
        _set_time(message.earliest_created_at, stats.earliest_created_at)
    if stats.latest_created_at is not None:
        _set_time(message.latest_created_at, stats.latest_created_at)
    message.embedding_model = stats.embedding_model
    message.embedding_dimensions = stats.embedding_dimensions
    return message


def document_summary_to_proto(summary: DocumentSummary) -> search_tool_pb2.DocumentInfo:
    return search_tool_pb2.DocumentInfo(
        id=summary.id,
        source=summary.source,
        chunk_count=summary.chunk_count,
        metadata={k: metadata_value_to_proto(v) for k, v in summary.metadata.items()},
    )


def metadata_value_to_proto(value: MetadataValue) -> search_pb2.MetadataValue:
    if isinstance(value, bool):
        return search_pb2.MetadataValue(bool_value=value)
    if isinstance(value, int):
        return search_pb2.MetadataValue(int_value=value)
    if isinstance(value, float):
        return search_pb2.MetadataValue(double_value=value)
    return search_pb2.MetadataValue(string_value=value)


def _facets(counts: Mapping[str, int]) -> list[search_tool_pb2.FacetCount]:
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [search_tool_pb2.FacetCount(value=value, count=count) for value, count in ordered]


def _metadata_value(value: search_pb2.MetadataValue, path: str) -> MetadataValue:
    kind = value.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument.for_field(path, "metadata values must set one of their kinds")
    scalar: MetadataValue = getattr(value, kind)
    return scalar


def _value(value: struct_pb2.Value) -> RawValue:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    return None


_FIRST_SECOND = -62_135_596_800
"""0001-01-01T00:00:00Z, the start of protobuf's Timestamp range."""
_LAST_SECOND = 253_402_300_799
"""9999-12-31T23:59:59Z, its end."""


def _time(message: search_tool_pb2.Document, name: str, path: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    if not _FIRST_SECOND <= stamp.seconds <= _LAST_SECOND:
        raise InvalidArgument.for_field(
            f"{path}.{name}.seconds",
            "outside 0001-01-01 to 9999-12-31 (protobuf's Timestamp range)",
        )
    if not 0 <= stamp.nanos <= 999_999_999:
        raise InvalidArgument.for_field(f"{path}.{name}.nanos", "must be 0 to 999,999,999")
    return stamp.ToDatetime(tzinfo=UTC)


def _set_time(stamp: timestamp_pb2.Timestamp, moment: datetime) -> None:
    """`stamp` set to `moment` (naive means UTC), by integer arithmetic: `Timestamp.FromDatetime`
    is several times slower."""
    seconds, micros = divmod(epoch_microseconds(moment), 1_000_000)
    stamp.seconds = seconds
    stamp.nanos = micros * 1000


_INTERVALS = {
    search_tool_pb2.DATE_INTERVAL_UNSPECIFIED: DateInterval.MONTH,
    search_tool_pb2.DATE_INTERVAL_YEAR: DateInterval.YEAR,
    search_tool_pb2.DATE_INTERVAL_MONTH: DateInterval.MONTH,
    search_tool_pb2.DATE_INTERVAL_DAY: DateInterval.DAY,
}


def count_request_from_proto(message: search_tool_pb2.CountDocumentsRequest) -> CountRequest:
    if message.date_interval not in _INTERVALS:
        raise InvalidArgument.for_field(
            "date_interval", f"unknown interval {message.date_interval}"
        )
    return CountRequest(
        collection=message.collection,
        filter=filter_from_proto(message.filter),
        caller_filter=filter_from_proto(message.caller_filter),
        group_by=tuple(message.group_by),
        date_interval=_INTERVALS[message.date_interval],
        max_buckets=message.max_buckets,
    )


def count_to_proto(count: DocumentCount) -> search_tool_pb2.CountDocumentsResponse:
    return search_tool_pb2.CountDocumentsResponse(
        document_count=count.document_count,
        chunk_count=count.chunk_count,
        breakdowns=[
            search_tool_pb2.CountBreakdown(
                field=b.field,
                buckets=[search_tool_pb2.FacetCount(value=v, count=n) for v, n in b.buckets],
                omitted_buckets=b.omitted,
            )
            for b in count.breakdowns
        ],
        exact=count.exact,
    )


def web_search_to_proto(outcome: WebSearchOutcome) -> search_tool_pb2.WebSearchResponse:
    message = search_tool_pb2.WebSearchResponse(
        provider=outcome.provider, cached=outcome.cached, took_ms=outcome.took_ms
    )
    for result in outcome.results:
        item = message.results.add(
            id=result.id,
            title=result.title,
            url=result.url,
            snippet=result.snippet,
            provider=result.provider,
        )
        _set_time(item.fetched_at, result.fetched_at)
    return message
