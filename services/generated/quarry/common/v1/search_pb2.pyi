import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RetrievalStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRIEVAL_STRATEGY_UNSPECIFIED: _ClassVar[RetrievalStrategy]
    RETRIEVAL_STRATEGY_SEMANTIC: _ClassVar[RetrievalStrategy]
    RETRIEVAL_STRATEGY_KEYWORD: _ClassVar[RetrievalStrategy]
    RETRIEVAL_STRATEGY_HYBRID: _ClassVar[RetrievalStrategy]

class FilterOperator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILTER_OPERATOR_UNSPECIFIED: _ClassVar[FilterOperator]
    FILTER_OPERATOR_EQUALS: _ClassVar[FilterOperator]
    FILTER_OPERATOR_NOT_EQUALS: _ClassVar[FilterOperator]
    FILTER_OPERATOR_CONTAINS: _ClassVar[FilterOperator]
    FILTER_OPERATOR_GREATER_THAN: _ClassVar[FilterOperator]
    FILTER_OPERATOR_GREATER_THAN_OR_EQUAL: _ClassVar[FilterOperator]
    FILTER_OPERATOR_LESS_THAN: _ClassVar[FilterOperator]
    FILTER_OPERATOR_LESS_THAN_OR_EQUAL: _ClassVar[FilterOperator]
    FILTER_OPERATOR_IN: _ClassVar[FilterOperator]
    FILTER_OPERATOR_NOT_IN: _ClassVar[FilterOperator]
RETRIEVAL_STRATEGY_UNSPECIFIED: RetrievalStrategy
RETRIEVAL_STRATEGY_SEMANTIC: RetrievalStrategy
RETRIEVAL_STRATEGY_KEYWORD: RetrievalStrategy
RETRIEVAL_STRATEGY_HYBRID: RetrievalStrategy
FILTER_OPERATOR_UNSPECIFIED: FilterOperator
FILTER_OPERATOR_EQUALS: FilterOperator
FILTER_OPERATOR_NOT_EQUALS: FilterOperator
FILTER_OPERATOR_CONTAINS: FilterOperator
FILTER_OPERATOR_GREATER_THAN: FilterOperator
FILTER_OPERATOR_GREATER_THAN_OR_EQUAL: FilterOperator
FILTER_OPERATOR_LESS_THAN: FilterOperator
FILTER_OPERATOR_LESS_THAN_OR_EQUAL: FilterOperator
FILTER_OPERATOR_IN: FilterOperator
FILTER_OPERATOR_NOT_IN: FilterOperator

class FilterCondition(_message.Message):
    __slots__ = ("field", "operator", "value")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    field: str
    operator: FilterOperator
    value: _struct_pb2.Value
    def __init__(self, field: _Optional[str] = ..., operator: _Optional[_Union[FilterOperator, str]] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class FilterGroup(_message.Message):
    __slots__ = ("conditions",)
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    conditions: _containers.RepeatedCompositeFieldContainer[FilterCondition]
    def __init__(self, conditions: _Optional[_Iterable[_Union[FilterCondition, _Mapping]]] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[FilterGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[FilterGroup, _Mapping]]] = ...) -> None: ...

class SearchQuery(_message.Message):
    __slots__ = ("primary", "variations", "keyword_expansion")
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    VARIATIONS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_EXPANSION_FIELD_NUMBER: _ClassVar[int]
    primary: str
    variations: _containers.RepeatedScalarFieldContainer[str]
    keyword_expansion: str
    def __init__(self, primary: _Optional[str] = ..., variations: _Optional[_Iterable[str]] = ..., keyword_expansion: _Optional[str] = ...) -> None: ...

class Breadcrumb(_message.Message):
    __slots__ = ("id", "name", "entity_type")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    entity_type: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., entity_type: _Optional[str] = ...) -> None: ...

class MetadataValue(_message.Message):
    __slots__ = ("string_value", "int_value", "double_value", "bool_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    int_value: int
    double_value: float
    bool_value: bool
    def __init__(self, string_value: _Optional[str] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("id", "document_id", "chunk_index", "title", "text", "source", "entity_type", "created_at", "updated_at", "url", "breadcrumbs", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: MetadataValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[MetadataValue, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
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
    document_id: str
    chunk_index: int
    title: str
    text: str
    source: str
    entity_type: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    url: str
    breadcrumbs: _containers.RepeatedCompositeFieldContainer[Breadcrumb]
    metadata: _containers.MessageMap[str, MetadataValue]
    def __init__(self, id: _Optional[str] = ..., document_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ..., entity_type: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., url: _Optional[str] = ..., breadcrumbs: _Optional[_Iterable[_Union[Breadcrumb, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, MetadataValue]] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("chunk", "score", "dense_score", "keyword_score", "web")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    DENSE_SCORE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_SCORE_FIELD_NUMBER: _ClassVar[int]
    WEB_FIELD_NUMBER: _ClassVar[int]
    chunk: Chunk
    score: float
    dense_score: float
    keyword_score: float
    web: WebOrigin
    def __init__(self, chunk: _Optional[_Union[Chunk, _Mapping]] = ..., score: _Optional[float] = ..., dense_score: _Optional[float] = ..., keyword_score: _Optional[float] = ..., web: _Optional[_Union[WebOrigin, _Mapping]] = ...) -> None: ...

class WebOrigin(_message.Message):
    __slots__ = ("provider", "fetched_at")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FETCHED_AT_FIELD_NUMBER: _ClassVar[int]
    provider: str
    fetched_at: _timestamp_pb2.Timestamp
    def __init__(self, provider: _Optional[str] = ..., fetched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
