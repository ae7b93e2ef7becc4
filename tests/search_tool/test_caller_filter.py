"""The search tool owns the caller's filter: it validates it, combines it as (caller) AND (filter),
and no request — whatever its own filter says — ever returns or deletes a chunk outside it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeAlias

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.common.status import details_of_rpc_error
from tests.search_tool.grpc_helpers import Op, condition, document, fails, fields_of, search, where

Stub: TypeAlias = Any
INVALID = grpc.StatusCode.INVALID_ARGUMENT
SEMANTIC = search_pb2.RETRIEVAL_STRATEGY_SEMANTIC


def _at(day: int) -> datetime:
    return datetime(2024, 3, day, tzinfo=UTC)


DOCS = [
    document(
        "a-report",
        "Revenue grew in the third quarter of the year.",
        title="Quarterly report",
        source="wiki",
        entity_type="page",
        created_at=_at(1),
        metadata={"year": 2023, "team": "finance", "draft": False},
    ),
    document(
        "b-notes",
        "Meeting notes about the release of the next version.",
        title="Release notes",
        source="wiki",
        entity_type="comment",
        created_at=_at(5),
        metadata={"year": 2024, "team": "eng", "draft": True},
    ),
    document(
        "c-issue",
        "Tag the release and publish the wheels to the package index.",
        title="Release checklist",
        source="github",
        entity_type="issue",
        created_at=_at(10),
        metadata={"year": 2024, "team": "eng", "draft": False},
    ),
    document(
        "d-handbook",
        "Welcome aboard: read the handbook and set up your laptop.",
        title="Onboarding",
        source="drive",
        entity_type="file",
        created_at=_at(20),
        metadata={"year": 2022, "team": "people", "draft": False},
    ),
]
ALL_IDS = {d.id for d in DOCS}


@pytest.fixture
async def loaded(stub: Stub) -> Stub:
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
    )
    return stub


async def _documents(stub: Stub, request: search_tool_pb2.SearchRequest) -> set[str]:
    request.limit = 200
    reply = await stub.Search(request)
    return {r.chunk.document_id for r in reply.results}


WIKI = where([condition("source", Op.FILTER_OPERATOR_EQUALS, "wiki")])


async def test_caller_filter_alone_limits_the_search(loaded: Stub) -> None:
    found = await _documents(loaded, search("docs", "release", SEMANTIC, caller_filter=WIKI))
    assert found == {"a-report", "b-notes"}


async def test_request_filter_narrows_the_caller_filter_but_cannot_widen_it(loaded: Stub) -> None:
    narrowing = where([condition("entity_type", Op.FILTER_OPERATOR_EQUALS, "comment")])
    narrowed = search("docs", "release", SEMANTIC, caller_filter=WIKI, filter=narrowing)
    assert await _documents(loaded, narrowed) == {"b-notes"}

    widening = where(
        [condition("source", Op.FILTER_OPERATOR_EQUALS, "github")],
        [condition("source", Op.FILTER_OPERATOR_NOT_EQUALS, "wiki")],
        [condition("metadata.year", Op.FILTER_OPERATOR_GREATER_THAN, 0)],
    )
    widened = search("docs", "release", SEMANTIC, caller_filter=WIKI, filter=widening)
    assert await _documents(loaded, widened) == {"a-report", "b-notes"}


async def test_a_bad_caller_filter_is_invalid_argument_naming_the_caller_filter(
    loaded: Stub,
) -> None:
    """The bug this guards against: `title greater_than "a"` used to pass the agent and then fail
    every search, as if the model had written it."""
    bad = where([condition("title", Op.FILTER_OPERATOR_GREATER_THAN, "a")])
    details = await fails(loaded.Search(search("docs", "release", caller_filter=bad)), INVALID)
    assert fields_of(details) == ["caller_filter.groups[0].conditions[0].operator"]
    assert "title" in details.violations[0].description


async def test_bad_parts_of_both_filters_are_reported_together(loaded: Stub) -> None:
    caller = where([condition("metadata.nope", Op.FILTER_OPERATOR_EQUALS, "x")])
    model = where([condition("created_at", Op.FILTER_OPERATOR_LESS_THAN, "last tuesday")])
    details = await fails(
        loaded.Search(search("docs", "release", caller_filter=caller, filter=model)), INVALID
    )
    assert fields_of(details) == [
        "caller_filter.groups[0].conditions[0].field",
        "filter.groups[0].conditions[0].value",
    ]


async def test_validate_only_checks_the_filters_and_returns_no_results(loaded: Stub) -> None:
    good = search("docs", "release", caller_filter=WIKI, validate_only=True)
    reply = await loaded.Search(good)
    assert list(reply.results) == []
    assert reply.total_count == 0

    bad = where([condition("source", Op.FILTER_OPERATOR_IN, "wiki")])
    details = await fails(
        loaded.Search(search("docs", "release", caller_filter=bad, validate_only=True)), INVALID
    )
    assert fields_of(details) == ["caller_filter.groups[0].conditions[0].value"]


async def test_validate_only_on_an_unknown_collection_is_not_found(loaded: Stub) -> None:
    request = search("nope", "release", caller_filter=WIKI, validate_only=True)
    await fails(loaded.Search(request), grpc.StatusCode.NOT_FOUND)


async def test_combined_filters_beyond_the_group_limit_name_the_request_filter(
    loaded: Stub,
) -> None:
    caller = where(*[[condition("metadata.year", Op.FILTER_OPERATOR_EQUALS, y)] for y in range(6)])
    model = where(*[[condition("entity_type", Op.FILTER_OPERATOR_EQUALS, t)] for t in "abcdef"])
    details = await fails(
        loaded.Search(search("docs", "release", caller_filter=caller, filter=model)), INVALID
    )
    assert fields_of(details) == ["filter"]
    assert "36 groups" in details.message


async def test_delete_with_a_caller_filter_removes_only_what_it_allows(loaded: Stub) -> None:
    reply = await loaded.DeleteDocuments(
        search_tool_pb2.DeleteDocumentsRequest(
            collection="docs",
            document_ids=["a-report", "c-issue"],
            filter=where([condition("metadata.team", Op.FILTER_OPERATOR_EQUALS, "people")]),
            caller_filter=WIKI,
        )
    )
    assert reply.chunks_deleted >= 1
    remaining = await _documents(loaded, search("docs", "release", SEMANTIC))
    assert remaining == ALL_IDS - {"a-report"}


async def test_delete_with_a_bad_caller_filter_deletes_nothing(loaded: Stub) -> None:
    bad = where([condition("metadata.year", Op.FILTER_OPERATOR_CONTAINS, "20")])
    request = search_tool_pb2.DeleteDocumentsRequest(
        collection="docs", document_ids=["a-report"], caller_filter=bad
    )
    details = await fails(loaded.DeleteDocuments(request), INVALID)
    assert fields_of(details) == ["caller_filter.groups[0].conditions[0].operator"]
    assert await _documents(loaded, search("docs", "release", SEMANTIC)) == ALL_IDS


# --- property: no model filter reaches outside the caller's filter --------------------------------

Predicate = Callable[[search_tool_pb2.Document], bool]
CALLER_FILTERS: list[tuple[search_pb2.Filter, Predicate]] = [
    (WIKI, lambda d: d.source == "wiki"),
    (
        where([condition("metadata.year", Op.FILTER_OPERATOR_GREATER_THAN_OR_EQUAL, 2024)]),
        lambda d: d.metadata["year"].int_value >= 2024,
    ),
    (
        where(
            [condition("source", Op.FILTER_OPERATOR_EQUALS, "drive")],
            [condition("metadata.draft", Op.FILTER_OPERATOR_EQUALS, True)],
        ),
        lambda d: d.source == "drive" or d.metadata["draft"].bool_value,
    ),
    (
        where([condition("created_at", Op.FILTER_OPERATOR_LESS_THAN, "2024-03-06")]),
        lambda d: d.created_at.ToDatetime(tzinfo=UTC) < _at(6),
    ),
]

_FIELD_VALUES: dict[str, list[Any]] = {
    "source": ["wiki", "github", "drive", "WIKI", "", "' OR 1=1 --"],
    "entity_type": ["page", "comment", "issue", "file"],
    "title": ["Release", "report", "%", "_"],
    "metadata.year": [2022, 2023, 2024, 2025, 1e19, "2024"],
    "metadata.team": ["eng", "finance", "people"],
    "metadata.draft": [True, False],
    "created_at": ["2024-03-01", "2024-03-10T00:00:00Z", "0001-01-01", "not a date"],
    "document_id": ["a-report", "b-notes", "c-issue", "d-handbook"],
}
_OPERATORS: list[search_pb2.FilterOperator] = [
    search_pb2.FILTER_OPERATOR_EQUALS,
    search_pb2.FILTER_OPERATOR_NOT_EQUALS,
    search_pb2.FILTER_OPERATOR_CONTAINS,
    search_pb2.FILTER_OPERATOR_GREATER_THAN,
    search_pb2.FILTER_OPERATOR_GREATER_THAN_OR_EQUAL,
    search_pb2.FILTER_OPERATOR_LESS_THAN,
    search_pb2.FILTER_OPERATOR_LESS_THAN_OR_EQUAL,
    search_pb2.FILTER_OPERATOR_IN,
    search_pb2.FILTER_OPERATOR_NOT_IN,
]


@st.composite
def _model_condition(draw: st.DrawFn) -> search_pb2.FilterCondition:
    field = draw(st.sampled_from(sorted(_FIELD_VALUES)))
    operator = draw(st.sampled_from(_OPERATORS))
    values = _FIELD_VALUES[field]
    if operator in (Op.FILTER_OPERATOR_IN, Op.FILTER_OPERATOR_NOT_IN):
        raw: Any = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    else:
        raw = draw(st.sampled_from(values))
    return condition(field, operator, raw)


_MODEL_FILTERS = st.lists(
    st.lists(_model_condition(), min_size=1, max_size=3), min_size=0, max_size=4
).map(lambda groups: where(*groups))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    caller=st.sampled_from(range(len(CALLER_FILTERS))),
    model=_MODEL_FILTERS,
    strategy=st.sampled_from([SEMANTIC, search_pb2.RETRIEVAL_STRATEGY_KEYWORD]),
)
async def test_no_model_filter_returns_a_hit_outside_the_caller_filter(
    loaded: Stub, caller: int, model: search_pb2.Filter, strategy: search_pb2.RetrievalStrategy
) -> None:
    caller_filter, allowed = CALLER_FILTERS[caller]
    allowed_ids = {d.id for d in DOCS if allowed(d)}
    request = search(
        "docs", "release report handbook", strategy, caller_filter=caller_filter, filter=model
    )
    refused: grpc.aio.AioRpcError | None = None
    try:
        found = await _documents(loaded, request)
    except grpc.aio.AioRpcError as error:
        refused, found = error, set()
    if refused is not None:
        assert refused.code() == INVALID, refused.details()
        assert all(v.startswith("filter") for v in fields_of(details_of_rpc_error(refused)))
    assert found <= allowed_ids
    if not model.groups and strategy == SEMANTIC:
        assert found == allowed_ids


async def test_list_documents_stays_inside_the_caller_filter(loaded: Stub) -> None:
    widening = where([condition("source", Op.FILTER_OPERATOR_NOT_EQUALS, "wiki")])
    reply = await loaded.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="docs", caller_filter=WIKI, filter=widening)
    )
    assert list(reply.documents) == []
    reply = await loaded.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="docs", caller_filter=WIKI)
    )
    assert [d.id for d in reply.documents] == ["a-report", "b-notes"]
