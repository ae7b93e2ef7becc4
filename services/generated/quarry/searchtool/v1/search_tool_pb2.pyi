import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quarry.common.v1 import search_pb2 as _search_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CoverageDegradation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COVERAGE_DEGRADATION_UNSPECIFIED: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_MATCH_PHASE: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_TIMEOUT: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_ADAPTIVE_TIMEOUT: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_ANN_TIMEOUT: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_NON_IDEAL_STATE: _ClassVar[CoverageDegradation]
    COVERAGE_DEGRADATION_PARTIAL: _ClassVar[CoverageDegradation]

class FieldType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FIELD_TYPE_UNSPECIFIED: _ClassVar[FieldType]
    FIELD_TYPE_STRING: _ClassVar[FieldType]
    FIELD_TYPE_INTEGER: _ClassVar[FieldType]
    FIELD_TYPE_DOUBLE: _ClassVar[FieldType]
    FIELD_TYPE_BOOL: _ClassVar[FieldType]
    FIELD_TYPE_TIMESTAMP: _ClassVar[FieldType]

class DateInterval(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATE_INTERVAL_UNSPECIFIED: _ClassVar[DateInterval]
    DATE_INTERVAL_YEAR: _ClassVar[DateInterval]
    DATE_INTERVAL_MONTH: _ClassVar[DateInterval]
    DATE_INTERVAL_DAY: _ClassVar[DateInterval]
COVERAGE_DEGRADATION_UNSPECIFIED: CoverageDegradation
COVERAGE_DEGRADATION_MATCH_PHASE: CoverageDegradation
COVERAGE_DEGRADATION_TIMEOUT: CoverageDegradation
COVERAGE_DEGRADATION_ADAPTIVE_TIMEOUT: CoverageDegradation
COVERAGE_DEGRADATION_ANN_TIMEOUT: CoverageDegradation
COVERAGE_DEGRADATION_NON_IDEAL_STATE: CoverageDegradation
COVERAGE_DEGRADATION_PARTIAL: CoverageDegradation
FIELD_TYPE_UNSPECIFIED: FieldType
FIELD_TYPE_STRING: FieldType
FIELD_TYPE_INTEGER: FieldType
FIELD_TYPE_DOUBLE: FieldType
FIELD_TYPE_BOOL: FieldType
FIELD_TYPE_TIMESTAMP: FieldType
DATE_INTERVAL_UNSPECIFIED: DateInterval
DATE_INTERVAL_YEAR: DateInterval
DATE_INTERVAL_MONTH: DateInterval
DATE_INTERVAL_DAY: DateInterval

class Document(_message.Message):
    __slots__ = ("id", "title", "text", "source", "entity_type", "created_at", "updated_at", "url", "breadcrumbs", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _search_pb2.MetadataValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_search_pb2.MetadataValue, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    BREADCRUMBS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    text: str
    source: str
    entity_type: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    url: str
    breadcrumbs: _containers.RepeatedCompositeFieldContainer[_search_pb2.Breadcrumb]
    metadata: _containers.MessageMap[str, _search_pb2.MetadataValue]
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ..., entity_type: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., url: _Optional[str] = ..., breadcrumbs: _Optional[_Iterable[_Union[_search_pb2.Breadcrumb, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, _search_pb2.MetadataValue]] = ...) -> None: ...

class UpsertDocumentsRequest(_message.Message):
    __slots__ = ("collection", "documents", "building")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    BUILDING_FIELD_NUMBER: _ClassVar[int]
    collection: str
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    building: bool
    def __init__(self, collection: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., building: _Optional[bool] = ...) -> None: ...

class UpsertDocumentsResponse(_message.Message):
    __slots__ = ("documents_upserted", "chunks_upserted", "chunks_deleted")
    DOCUMENTS_UPSERTED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_UPSERTED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_DELETED_FIELD_NUMBER: _ClassVar[int]
    documents_upserted: int
    chunks_upserted: int
    chunks_deleted: int
    def __init__(self, documents_upserted: _Optional[int] = ..., chunks_upserted: _Optional[int] = ..., chunks_deleted: _Optional[int] = ...) -> None: ...

class DeleteDocumentsRequest(_message.Message):
    __slots__ = ("collection", "document_ids", "filter", "caller_filter")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    filter: _search_pb2.Filter
    caller_filter: _search_pb2.Filter
    def __init__(self, collection: _Optional[str] = ..., document_ids: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ...) -> None: ...

class DeleteDocumentsResponse(_message.Message):
    __slots__ = ("chunks_deleted",)
    CHUNKS_DELETED_FIELD_NUMBER: _ClassVar[int]
    chunks_deleted: int
    def __init__(self, chunks_deleted: _Optional[int] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("collection", "query", "strategy", "filter", "limit", "offset", "caller_filter", "validate_only")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: _search_pb2.SearchQuery
    strategy: _search_pb2.RetrievalStrategy
    filter: _search_pb2.Filter
    limit: int
    offset: int
    caller_filter: _search_pb2.Filter
    validate_only: bool
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[_Union[_search_pb2.SearchQuery, _Mapping]] = ..., strategy: _Optional[_Union[_search_pb2.RetrievalStrategy, str]] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("results", "total_count", "took_ms", "coverage")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOOK_MS_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_search_pb2.SearchResult]
    total_count: int
    took_ms: float
    coverage: Coverage
    def __init__(self, results: _Optional[_Iterable[_Union[_search_pb2.SearchResult, _Mapping]]] = ..., total_count: _Optional[int] = ..., took_ms: _Optional[float] = ..., coverage: _Optional[_Union[Coverage, _Mapping]] = ...) -> None: ...

class Coverage(_message.Message):
    __slots__ = ("percent", "documents_searched", "degraded", "reasons")
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    percent: float
    documents_searched: int
    degraded: bool
    reasons: _containers.RepeatedScalarFieldContainer[CoverageDegradation]
    def __init__(self, percent: _Optional[float] = ..., documents_searched: _Optional[int] = ..., degraded: _Optional[bool] = ..., reasons: _Optional[_Iterable[_Union[CoverageDegradation, str]]] = ...) -> None: ...

class GetCollectionRequest(_message.Message):
    __slots__ = ("collection", "caller_filter")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    caller_filter: _search_pb2.Filter
    def __init__(self, collection: _Optional[str] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ...) -> None: ...

class FacetCount(_message.Message):
    __slots__ = ("value", "count")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    value: str
    count: int
    def __init__(self, value: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class FieldInfo(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: FieldType
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[FieldType, str]] = ...) -> None: ...

class Collection(_message.Message):
    __slots__ = ("name", "document_count", "chunk_count", "sources", "entity_types", "fields", "earliest_created_at", "latest_created_at", "embedding_model", "embedding_dimensions", "building", "damage", "keyword_language")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LATEST_CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    BUILDING_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    document_count: int
    chunk_count: int
    sources: _containers.RepeatedCompositeFieldContainer[FacetCount]
    entity_types: _containers.RepeatedCompositeFieldContainer[FacetCount]
    fields: _containers.RepeatedCompositeFieldContainer[FieldInfo]
    earliest_created_at: _timestamp_pb2.Timestamp
    latest_created_at: _timestamp_pb2.Timestamp
    embedding_model: str
    embedding_dimensions: int
    building: bool
    damage: str
    keyword_language: str
    def __init__(self, name: _Optional[str] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[FacetCount, _Mapping]]] = ..., entity_types: _Optional[_Iterable[_Union[FacetCount, _Mapping]]] = ..., fields: _Optional[_Iterable[_Union[FieldInfo, _Mapping]]] = ..., earliest_created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., latest_created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., embedding_model: _Optional[str] = ..., embedding_dimensions: _Optional[int] = ..., building: _Optional[bool] = ..., damage: _Optional[str] = ..., keyword_language: _Optional[str] = ...) -> None: ...

class GetCollectionResponse(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: Collection
    def __init__(self, collection: _Optional[_Union[Collection, _Mapping]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[Collection]
    def __init__(self, collections: _Optional[_Iterable[_Union[Collection, _Mapping]]] = ...) -> None: ...

class DeleteCollectionRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class DeleteCollectionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("texts",)
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "model", "dimensions")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model: str
    dimensions: int
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model: _Optional[str] = ..., dimensions: _Optional[int] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("collection", "filter", "page_size", "page_token", "caller_filter")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    filter: _search_pb2.Filter
    page_size: int
    page_token: str
    caller_filter: _search_pb2.Filter
    def __init__(self, collection: _Optional[str] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ...) -> None: ...

class DocumentInfo(_message.Message):
    __slots__ = ("id", "source", "chunk_count", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _search_pb2.MetadataValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_search_pb2.MetadataValue, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    source: str
    chunk_count: int
    metadata: _containers.MessageMap[str, _search_pb2.MetadataValue]
    def __init__(self, id: _Optional[str] = ..., source: _Optional[str] = ..., chunk_count: _Optional[int] = ..., metadata: _Optional[_Mapping[str, _search_pb2.MetadataValue]] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInfo]
    next_page_token: str
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReadDocumentRequest(_message.Message):
    __slots__ = ("collection", "document_id", "first_chunk", "max_chunks", "caller_filter")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_CHUNK_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    document_id: str
    first_chunk: int
    max_chunks: int
    caller_filter: _search_pb2.Filter
    def __init__(self, collection: _Optional[str] = ..., document_id: _Optional[str] = ..., first_chunk: _Optional[int] = ..., max_chunks: _Optional[int] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ...) -> None: ...

class ReadDocumentResponse(_message.Message):
    __slots__ = ("chunks", "chunk_count")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[_search_pb2.Chunk]
    chunk_count: int
    def __init__(self, chunks: _Optional[_Iterable[_Union[_search_pb2.Chunk, _Mapping]]] = ..., chunk_count: _Optional[int] = ...) -> None: ...

class CountDocumentsRequest(_message.Message):
    __slots__ = ("collection", "filter", "caller_filter", "group_by", "date_interval", "max_buckets")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    CALLER_FILTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    DATE_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAX_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    filter: _search_pb2.Filter
    caller_filter: _search_pb2.Filter
    group_by: _containers.RepeatedScalarFieldContainer[str]
    date_interval: DateInterval
    max_buckets: int
    def __init__(self, collection: _Optional[str] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., caller_filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., group_by: _Optional[_Iterable[str]] = ..., date_interval: _Optional[_Union[DateInterval, str]] = ..., max_buckets: _Optional[int] = ...) -> None: ...

class CountBreakdown(_message.Message):
    __slots__ = ("field", "buckets", "omitted_buckets")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    field: str
    buckets: _containers.RepeatedCompositeFieldContainer[FacetCount]
    omitted_buckets: int
    def __init__(self, field: _Optional[str] = ..., buckets: _Optional[_Iterable[_Union[FacetCount, _Mapping]]] = ..., omitted_buckets: _Optional[int] = ...) -> None: ...

class CountDocumentsResponse(_message.Message):
    __slots__ = ("document_count", "chunk_count", "breakdowns", "exact")
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWNS_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    document_count: int
    chunk_count: int
    breakdowns: _containers.RepeatedCompositeFieldContainer[CountBreakdown]
    exact: bool
    def __init__(self, document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., breakdowns: _Optional[_Iterable[_Union[CountBreakdown, _Mapping]]] = ..., exact: _Optional[bool] = ...) -> None: ...

class WebSearchRequest(_message.Message):
    __slots__ = ("query", "limit")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    query: str
    limit: int
    def __init__(self, query: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class WebResult(_message.Message):
    __slots__ = ("id", "title", "url", "snippet", "provider", "fetched_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    url: str
    snippet: str
    provider: str
    fetched_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., url: _Optional[str] = ..., snippet: _Optional[str] = ..., provider: _Optional[str] = ..., fetched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WebSearchResponse(_message.Message):
    __slots__ = ("results", "provider", "cached", "took_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    TOOK_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WebResult]
    provider: str
    cached: bool
    took_ms: float
    def __init__(self, results: _Optional[_Iterable[_Union[WebResult, _Mapping]]] = ..., provider: _Optional[str] = ..., cached: _Optional[bool] = ..., took_ms: _Optional[float] = ...) -> None: ...
