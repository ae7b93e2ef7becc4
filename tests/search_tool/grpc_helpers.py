"""Small builders for search tool requests, a search tool served in process, and a helper that
asserts a failed call's details."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.status import StatusDetails, details_of_rpc_error
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.server import build_search_tool_server
from tests.grpc_serving import stub_of

Op = search_pb2.FilterOperator


def document(
    doc_id: str,
    text: str,
    *,
    created_at: datetime | None = None,
    metadata: dict[str, str | int | float | bool] | None = None,
    **fields: Any,
) -> search_tool_pb2.Document:
    message = search_tool_pb2.Document(id=doc_id, text=text, **fields)
    if created_at is not None:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(created_at)
        message.created_at.CopyFrom(stamp)
    for key, value in (metadata or {}).items():
        if isinstance(value, bool):
            message.metadata[key].bool_value = value
        elif isinstance(value, int):
            message.metadata[key].int_value = value
        elif isinstance(value, float):
            message.metadata[key].double_value = value
        else:
            message.metadata[key].string_value = value
    return message


def value(raw: Any) -> struct_pb2.Value:
    message = struct_pb2.Value()
    if isinstance(raw, list):
        message.list_value.values.extend(value(item) for item in raw)
    elif isinstance(raw, bool):
        message.bool_value = raw
    elif isinstance(raw, int | float):
        message.number_value = raw
    elif raw is None:
        message.null_value = struct_pb2.NULL_VALUE
    else:
        message.string_value = raw
    return message


def condition(
    field: str, operator: search_pb2.FilterOperator, raw: Any
) -> search_pb2.FilterCondition:
    return search_pb2.FilterCondition(field=field, operator=operator, value=value(raw))


def where(*groups: list[search_pb2.FilterCondition]) -> search_pb2.Filter:
    return search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=g) for g in groups])


def search(
    collection: str,
    primary: str,
    strategy: search_pb2.RetrievalStrategy = search_pb2.RETRIEVAL_STRATEGY_HYBRID,
    **fields: Any,
) -> search_tool_pb2.SearchRequest:
    variations = fields.pop("variations", [])
    keyword_expansion = fields.pop("keyword_expansion", "")
    return search_tool_pb2.SearchRequest(
        collection=collection,
        query=search_pb2.SearchQuery(
            primary=primary, variations=variations, keyword_expansion=keyword_expansion
        ),
        strategy=strategy,
        **fields,
    )


async def fails(call: Awaitable[Any], code: grpc.StatusCode) -> StatusDetails:
    """Await a call that must fail with `code`; its rich details."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    return details_of_rpc_error(caught.value)


def fields_of(details: StatusDetails) -> list[str]:
    return [v.field for v in details.violations]


@asynccontextmanager
async def serving(
    settings: SearchToolSettings, embedder: Embedder
) -> AsyncIterator[search_tool_pb2_grpc.SearchToolServiceStub]:
    """A search tool on `settings` with `embedder`, started in process, and a stub to it."""
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    async with stub_of(server, search_tool_pb2_grpc.SearchToolServiceStub) as stub:
        yield stub
