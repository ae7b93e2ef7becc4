"""The agent's fake search tool answers like the real one: one table of filters, both services.

Every case runs twice with the same agent-side `SearchRequest`: through the agent's real gRPC client
against a real search tool (real MiniLM embedder, embedded engine), and through `FakeSearch`. Both
must accept the same filters with the same matching documents, and refuse the same filters naming
the same fields — so a fake that is laxer than the real service (the bug that let a caller filter
`title greater_than "a"` through every agent test) fails here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from google.protobuf import json_format, struct_pb2
from quarry.common.v1 import search_pb2

from services.agent import filter_wire
from services.agent.filters import CallerFilter, FilterCondition, FilterGroup
from services.agent.ports import SearchClient
from services.agent.search import Breadcrumb, CountRequest, ReadRequest, SearchRequest
from services.agent.search_tool_client import SearchToolClient
from services.common.errors import InvalidArgument, NotFound
from services.search_tool.documents import Document
from tests.agent.conftest import FILTER_COLLECTION as COLLECTION
from tests.agent.fake_search import FakeDocument, FakeSearch
from tests.search_tool.filter_cases import CASES, FIXTURE
from tests.search_tool.grpc_helpers import value

QUERY = " ".join(d.title for d in FIXTURE)
"""Every title's words: the fake ranks by word overlap, so every document is a candidate."""

Outcome = tuple[str, Any]


def _fake(doc: Document) -> FakeDocument:
    return FakeDocument(
        f"{doc.id}__chunk_0",
        doc.title,
        doc.text,
        source=doc.source,
        entity_type=doc.entity_type,
        url=doc.url,
        created_at=doc.created_at,
        updated_at=doc.updated_at,
        breadcrumbs=tuple(Breadcrumb(b.id, b.name, b.entity_type) for b in doc.breadcrumbs),
        metadata=dict(doc.metadata),
    )


def _caller(*groups: list[tuple[str, search_pb2.FilterOperator, Any]]) -> CallerFilter:
    """A caller's filter sent on the wire, as the agent API's edge converts it in."""
    return filter_wire.caller_filter(
        search_pb2.Filter(
            groups=[
                search_pb2.FilterGroup(
                    conditions=[
                        search_pb2.FilterCondition(field=f, operator=op, value=value(v))
                        for f, op, v in group
                    ]
                )
                for group in groups
            ]
        )
    )


def _model(*groups: list[tuple[str, Any, Any]]) -> tuple[FilterGroup, ...]:
    return tuple(
        FilterGroup(conditions=[FilterCondition(field=f, operator=op, value=v) for f, op, v in g])
        for g in groups
    )


def _requests() -> list[tuple[str, SearchRequest]]:
    """Each shared filter case on both sides, then filters the search tool must refuse."""
    cases: list[tuple[str, SearchRequest]] = []
    for case in CASES:
        number = cast(
            search_pb2.FilterOperator,
            search_pb2.FilterOperator.Value(f"FILTER_OPERATOR_{case.operator.name}"),
        )
        cases.append(
            (f"caller {case.name}", _request(caller=_caller([(case.field, number, case.value)])))
        )
        cases.append(
            (
                f"model {case.name}",
                _request(model=_model([(case.field, case.operator.value, case.value)])),
            )
        )
    equals, greater = search_pb2.FILTER_OPERATOR_EQUALS, search_pb2.FILTER_OPERATOR_GREATER_THAN
    refused = {
        "caller: ordering on text": _caller([("title", greater, "a")]),
        "caller: unknown field": _caller([("colour", equals, "red")]),
        "caller: unknown metadata key": _caller([("metadata.nope", equals, 1)]),
        "caller: contains on an integer": _caller(
            [("metadata.year", search_pb2.FILTER_OPERATOR_CONTAINS, "20")]
        ),
        "caller: in without a list": _caller([("source", search_pb2.FILTER_OPERATOR_IN, "x")]),
        "caller: malformed date": _caller([("created_at", greater, "yesterday")]),
        "caller: wrong value type": _caller([("metadata.draft", equals, "yes")]),
        "caller: no operator": _caller([("source", search_pb2.FILTER_OPERATOR_UNSPECIFIED, "x")]),
        "caller: unknown operator number": _caller(
            [("source", cast(search_pb2.FilterOperator, 99), "x")]
        ),
        "caller: null value": _caller([("source", equals, None)]),
        "caller: object value": filter_wire.caller_filter(
            search_pb2.Filter(
                groups=[
                    search_pb2.FilterGroup(
                        conditions=[
                            search_pb2.FilterCondition(
                                field="source",
                                operator=equals,
                                value=json_format.ParseDict({"a": 1}, struct_pb2.Value()),
                            )
                        ]
                    )
                ]
            )
        ),
        "caller: empty group": filter_wire.caller_filter(
            search_pb2.Filter(groups=[search_pb2.FilterGroup()])
        ),
    }
    cases += [(name, _request(caller=caller)) for name, caller in refused.items()]
    cases += [
        ("model: ordering on text", _request(model=_model([("title", "less_than", "b")]))),
        (
            "model: date out of range",
            _request(model=_model([("created_at", "less_than", "0000-01-01")])),
        ),
        (
            "both: bad on each side",
            _request(
                caller=_caller([("colour", equals, "x")]),
                model=_model([("metadata.year", "contains", "2")]),
            ),
        ),
        (
            "both: too many groups combined",
            _request(
                caller=_caller(*[[("source", equals, str(i))] for i in range(6)]),
                model=_model(*[[("entity_type", "equals", str(i))] for i in range(6)]),
            ),
        ),
        ("unknown collection", SearchRequest(collection="nope", primary=QUERY)),
    ]
    return cases


def _request(
    *, caller: CallerFilter | None = None, model: tuple[FilterGroup, ...] = ()
) -> SearchRequest:
    return SearchRequest(
        collection=COLLECTION,
        primary=QUERY,
        strategy="semantic",
        filter_groups=model,
        caller_filter=caller or CallerFilter(),
        limit=200,
    )


async def _outcome(search: SearchClient, request: SearchRequest) -> Outcome:
    try:
        page = await search.search(request, remaining_s=30)
    except InvalidArgument as error:
        return ("INVALID_ARGUMENT", sorted(v.field for v in error.violations))
    except NotFound:
        return ("NOT_FOUND", None)
    return ("OK", sorted(hit.document_id for hit in page.hits))


async def test_the_fake_search_tool_accepts_refuses_and_matches_like_the_real_one(
    real_search: SearchToolClient,
) -> None:
    fake = FakeSearch([_fake(d) for d in FIXTURE], collection=COLLECTION)
    disagreements = []
    outcomes = []
    for name, request in _requests():
        real, faked = await _outcome(real_search, request), await _outcome(fake, request)
        outcomes.append(real[0])
        if real != faked:
            disagreements.append(f"{name}: real {real}, fake {faked}")
    assert disagreements == []
    assert outcomes.count("INVALID_ARGUMENT") >= 16
    assert outcomes.count("OK") >= 2 * len(CASES)


def _reads(document_ids: list[str]) -> list[tuple[str, ReadRequest]]:
    """Every document read under each shared caller filter, then reads the search tool refuses."""
    equals = search_pb2.FILTER_OPERATOR_EQUALS
    cases = []
    for case in CASES:
        number = cast(
            search_pb2.FilterOperator,
            search_pb2.FilterOperator.Value(f"FILTER_OPERATOR_{case.operator.name}"),
        )
        caller = _caller([(case.field, number, case.value)])
        cases += [
            (f"{case.name}: {doc}", ReadRequest(COLLECTION, doc, caller_filter=caller))
            for doc in document_ids
        ]
    return [
        *cases,
        ("missing document", ReadRequest(COLLECTION, "no-such-document")),
        ("unknown collection", ReadRequest("nope", document_ids[0])),
        (
            "bad caller filter",
            ReadRequest(
                COLLECTION, document_ids[0], caller_filter=_caller([("colour", equals, "x")])
            ),
        ),
        ("bad range", ReadRequest(COLLECTION, "", first_chunk=-1, max_chunks=500)),
    ]


async def _read_outcome(search: SearchClient, request: ReadRequest) -> Outcome:
    try:
        read = await search.read_document(request, remaining_s=30)
    except InvalidArgument as error:
        return ("INVALID_ARGUMENT", sorted(v.field for v in error.violations))
    except NotFound as error:
        return ("NOT_FOUND", error.message.removeprefix("search tool: "))
    return ("OK", ([hit.id for hit in read.chunks], read.chunk_count))


async def test_the_fake_search_tool_reads_documents_like_the_real_one(
    real_search: SearchToolClient,
) -> None:
    fake = FakeSearch([_fake(d) for d in FIXTURE], collection=COLLECTION)
    disagreements, outcomes = [], []
    for name, request in _reads([d.id for d in FIXTURE]):
        real, faked = await _read_outcome(real_search, request), await _read_outcome(fake, request)
        outcomes.append(real[0])
        if real != faked:
            disagreements.append(f"{name}: real {real}, fake {faked}")
    assert disagreements == []
    assert outcomes.count("NOT_FOUND") > len(CASES)
    assert outcomes.count("OK") > len(CASES)
    assert outcomes.count("INVALID_ARGUMENT") == 2


def _counts() -> list[tuple[str, CountRequest]]:
    """Counts under each shared filter (caller's and model's), breakdowns, and refused counts."""
    equals = search_pb2.FILTER_OPERATOR_EQUALS
    by = ("source", "metadata.year", "created_at")
    cases = []
    for case in CASES:
        number = cast(
            search_pb2.FilterOperator,
            search_pb2.FilterOperator.Value(f"FILTER_OPERATOR_{case.operator.name}"),
        )
        cases.append(
            (
                f"caller {case.name}",
                CountRequest(
                    COLLECTION,
                    caller_filter=_caller([(case.field, number, case.value)]),
                    group_by=by,
                ),
            )
        )
        cases.append(
            (
                f"model {case.name}",
                CountRequest(
                    COLLECTION,
                    filter_groups=_model([(case.field, case.operator.value, case.value)]),
                    group_by=("entity_type",),
                    date_interval="year",
                ),
            )
        )
    return [
        *cases,
        (
            "days, one bucket",
            CountRequest(COLLECTION, group_by=("created_at",), date_interval="day", max_buckets=1),
        ),
        (
            "bad caller filter",
            CountRequest(COLLECTION, caller_filter=_caller([("colour", equals, "x")])),
        ),
        (
            "bad model filter",
            CountRequest(COLLECTION, filter_groups=_model([("title", "less_than", "b")])),
        ),
        ("bad breakdown", CountRequest(COLLECTION, group_by=("text", "metadata.nope", "text"))),
        ("unknown collection", CountRequest("nope")),
    ]


async def _count_outcome(search: SearchClient, request: CountRequest) -> Outcome:
    try:
        count = await search.count_documents(request, remaining_s=30)
    except InvalidArgument as error:
        return ("INVALID_ARGUMENT", sorted(v.field for v in error.violations))
    except NotFound:
        return ("NOT_FOUND", None)
    return ("OK", count)


async def test_the_fake_search_tool_counts_like_the_real_one(
    real_search: SearchToolClient,
) -> None:
    fake = FakeSearch([_fake(d) for d in FIXTURE], collection=COLLECTION)
    disagreements, outcomes = [], []
    for name, request in _counts():
        real, faked = (
            await _count_outcome(real_search, request),
            await _count_outcome(fake, request),
        )
        outcomes.append(real)
        if real != faked:
            disagreements.append(f"{name}: real {real}, fake {faked}")
    assert disagreements == []
    assert [o[0] for o in outcomes].count("INVALID_ARGUMENT") == 3
    counted = [o[1] for o in outcomes if o[0] == "OK"]
    assert len({c.document_count for c in counted}) > 2
    assert all(b.buckets for c in counted if c.document_count for b in c.breakdowns)


def _described() -> list[tuple[str, CallerFilter]]:
    """Caller filters GetCollection describes under: none, one source, a metadata key only some
    documents have, OR-groups, a filter nothing matches, and two it must refuse."""
    eq, is_in = search_pb2.FILTER_OPERATOR_EQUALS, search_pb2.FILTER_OPERATOR_IN
    gt = search_pb2.FILTER_OPERATOR_GREATER_THAN
    return [
        ("whole collection", CallerFilter()),
        ("one source", _caller([("source", eq, "github")])),
        ("metadata key", _caller([("metadata.year", eq, 2022)])),
        ("or groups", _caller([("source", eq, "slack")], [("entity_type", eq, "comment")])),
        ("sources in", _caller([("source", is_in, ["confluence", "gdrive"])])),
        ("nothing", _caller([("source", eq, "nowhere")])),
        ("unknown field", _caller([("colour", eq, "red")])),
        ("bad operator", _caller([("title", gt, "a")])),
    ]


async def _collection_outcome(search: SearchClient, caller: CallerFilter) -> Outcome:
    try:
        info = await search.get_collection(COLLECTION, caller_filter=caller, remaining_s=30)
    except InvalidArgument as error:
        return ("INVALID_ARGUMENT", sorted(v.field for v in error.violations))
    return (
        "OK",
        {
            "documents": info.document_count,
            "chunks": info.chunk_count,
            "sources": sorted((f.value, f.count) for f in info.sources),
            "entity_types": sorted((f.value, f.count) for f in info.entity_types),
            "fields": sorted(info.fields),
            "dates": (info.earliest_created_at, info.latest_created_at),
            "keyword_language": info.keyword_language,
        },
    )


async def test_the_fake_search_tool_describes_a_collection_under_a_caller_filter_like_the_real_one(
    real_search: SearchToolClient,
) -> None:
    fake = FakeSearch([_fake(d) for d in FIXTURE], collection=COLLECTION)
    disagreements, outcomes = [], {}
    for name, caller in _described():
        real, faked = (
            await _collection_outcome(real_search, caller),
            await _collection_outcome(fake, caller),
        )
        outcomes[name] = real
        if real != faked:
            disagreements.append(f"{name}: real {real}, fake {faked}")
    assert disagreements == []
    whole, github = outcomes["whole collection"][1], outcomes["one source"][1]
    assert len(whole["sources"]) == 4
    assert github["sources"] == [("github", 1)]
    assert github["documents"] == 1
    assert whole["keyword_language"] == github["keyword_language"] == "english"
    assert ("metadata.score", "double") in whole["fields"]
    assert ("metadata.score", "double") not in github["fields"]
    assert outcomes["nothing"][1]["documents"] == 0
    assert outcomes["unknown field"] == (
        "INVALID_ARGUMENT",
        ["caller_filter.groups[0].conditions[0].field"],
    )
    assert outcomes["bad operator"][0] == "INVALID_ARGUMENT"


async def test_the_agents_keyword_expansion_reaches_the_real_search_tools_keyword_side(
    real_search: SearchToolClient,
) -> None:
    """The passage the agent sends as `keyword_expansion` (loop.expand_queries) is searched by the
    real search tool's keyword side: its words find what the query's alone do not."""
    plain = SearchRequest(collection=COLLECTION, primary="zzzz qqqq", strategy="keyword")
    assert not (await real_search.search(plain, remaining_s=30)).hits
    expanded = replace(plain, keyword_expansion="publish the wheels of a release")
    page = await real_search.search(expanded, remaining_s=30)
    assert [hit.document_id for hit in page.hits][:1] == ["gamma"]
