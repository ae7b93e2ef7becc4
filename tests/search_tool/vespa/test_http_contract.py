"""The Vespa engine through pyvespa's real async client (HTTP/2) against a local recording server
(L4): the requests we send to `/search/` and `/document/v1/`, and how documented responses map to
pages and errors.

Response bodies are authored, not recorded, from Vespa's documented formats:
`en/reference/querying/default-result-format.html` (root, `fields.totalCount`, `coverage` with
`coverage`/`documents`/`full`/`nodes`/`results`/`resultsFull`, `errors[{code, summary, message}]`,
hits with `relevance` and `fields`), `en/reference/api/document-v1.html` (put/delete answer
`{"pathId", "id"}` with 200; 429/503 under load; 400 with `message`). They prove our handling of
those formats, not Vespa's behaviour (the live suite does that)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)
from services.search_tool.counting import CountRequest, count_documents
from services.search_tool.documents import Chunk, ChunkRecord
from services.search_tool.engine.base import (
    Degradation,
    EngineQuery,
    Fusion,
    FusionMethod,
    Strategy,
)
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from services.search_tool.engine.vespa.documents import chunk_json
from services.search_tool.engine.vespa.package import MAX_OFFSET, MAX_QUERY_VECTORS
from services.search_tool.filters import (
    FilterExpression,
    Operator,
    RawCondition,
    RawFilter,
    validate_filter,
)
from services.search_tool.limits import RequestLimits
from tests.search_tool.engine_fixtures import DIMENSIONS, vector_for
from tests.search_tool.vespa.conftest import fixture_fields
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.yql_reference import And, Rank, Retrieval, parse_query

REGISTRY_FIELDS = {
    "name": "fixture",
    "embedding_model": "test-model",
    "dimensions": DIMENSIONS,
    "metadata_types": json.dumps({"year": "integer", "team": "string"}),
    "revision": 3,
}
REGISTRY_PATH = "/document/v1/quarry/collection/docid/fixture"
REGISTRY_HIT = {"id": "id:quarry:collection::fixture", "relevance": 0.0, "fields": REGISTRY_FIELDS}
"""The fixture collection's registry entry: as a document get answers it (`{"pathId", "id",
"fields"}`, `en/reference/api/document-v1.html` "Get") and as a query hit."""
FULL = {"coverage": 100, "documents": 5, "full": True, "nodes": 1, "results": 1, "resultsFull": 1}
DEGRADED = {
    "coverage": 99,
    "documents": 990,
    "full": False,
    "nodes": 2,
    "results": 1,
    "resultsFull": 0,
    "degraded": {
        "match-phase": False,
        "timeout": True,
        "adaptive-timeout": False,
        "non-ideal-state": False,
    },
}
"""A soft-timeout answer. Authored from `en/reference/querying/default-result-format.html`: the
`coverage` element (`coverage` an integer percent and a lower bound, `documents`, `full`, `nodes`,
`results`, `resultsFull`) and its optional `degraded` map (`match-phase`, `timeout`,
`adaptive-timeout`, `anntimeout`, `non-ideal-state`); `en/querying/query-api.html` ("Timeout":
with `ranking.softtimeout.enable`, a node out of time returns what it has with
`degraded.timeout`). Not recorded from a Vespa."""
NODES_DOWN = {
    "coverage": 50,
    "documents": 500,
    "full": False,
    "nodes": 1,
    "results": 1,
    "resultsFull": 0,
}
"""Half the content nodes did not answer and no degradation flag is set (same reference)."""


def _root(children: list[dict[str, Any]], total: int, coverage: dict[str, Any] = FULL) -> Reply:
    return Reply(
        200,
        {
            "root": {
                "id": "toplevel",
                "relevance": 1.0,
                "fields": {"totalCount": total},
                "coverage": coverage,
                "children": children,
            }
        },
    )


def _hit(
    chunk_id: str, relevance: float, *, cosines: tuple[float, ...] = (), bm25: float = 0.0
) -> dict[str, Any]:
    """A hit as our rank profiles return it: `matchfeatures` holds `cosine_q<i>` for every
    declared input (0 for unused ones) and `bm25(search_text)`
    (`en/querying/nearest-neighbor-search-guide.md`, the `matchfeatures` of its samples)."""
    chunk = Chunk(id=chunk_id, document_id=chunk_id.split("__")[0], chunk_index=0, text="t")
    features = {f"cosine_q{i}": 0.0 for i in range(MAX_QUERY_VECTORS)}
    features.update({f"cosine_q{i}": c for i, c in enumerate(cosines)})
    features["bm25(search_text)"] = bm25
    return {
        "id": f"id:quarry:chunk::fixture.{chunk_id}",
        "relevance": relevance,
        "source": "quarry_content",
        "fields": {
            "matchfeatures": features,
            "chunk_id": chunk_id,
            "chunk_json": chunk_json(chunk, {}),
            "text": chunk.text,
        },
    }


def _routed(search: Callable[[Recorded], Reply]) -> Callable[[Recorded], Reply]:
    def respond(request: Recorded) -> Reply:
        if request.method == "GET" and request.path == REGISTRY_PATH:
            return Reply(
                200,
                {"pathId": request.path, "id": REGISTRY_HIT["id"], "fields": REGISTRY_FIELDS},
            )
        if request.path.startswith("/document/v1/"):
            return Reply(200, {"pathId": request.path, "id": "id:quarry:chunk::x"})
        if "from collection" in request.json()["yql"]:
            return _root([REGISTRY_HIT], 1)
        return search(request)

    return respond


@pytest.fixture
async def started() -> AsyncIterator[Callable[[Callable[[Recorded], Reply]], Any]]:
    servers: list[RecordingServer] = []
    engines: list[VespaEngine] = []

    async def start(
        search: Callable[[Recorded], Reply], **limits: Any
    ) -> tuple[RecordingServer, VespaEngine]:
        server = RecordingServer(_routed(search))
        await server.start()
        servers.append(server)
        engine = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0), **limits)
        engines.append(engine)
        return server, engine

    yield start
    for engine in engines:
        await engine.close()
    for server in servers:
        await server.close()


def _semantic(**overrides: Any) -> EngineQuery:
    query = EngineQuery(
        Strategy.SEMANTIC, "", np.stack([vector_for("a"), vector_for("b")]), limit=2
    )
    return replace(query, **overrides)


def _searches(server: RecordingServer) -> list[dict[str, Any]]:
    return [
        r.json()
        for r in server.requests
        if r.path == "/search/" and "from collection" not in r.json()["yql"]
    ]


async def test_semantic_search_sends_every_vector_in_one_request_and_caches_the_filter_count(
    started: Any,
) -> None:
    """Two query vectors: one request with two labelled nearestNeighbor operators (OR-ed, both
    inputs), each hit reporting its cosine to each vector; each vector's list is the hits by that
    cosine. The filter's count is a second request the first time only."""
    hits = [
        _hit("alpha__chunk_0", 0.5, cosines=(0.9, 0.1)),
        _hit("beta__chunk_0", 0.25, cosines=(0.2, 0.8)),
    ]
    server, engine = await started(lambda r: _root(hits, 2))
    expression = validate_filter(
        RawFilter(((RawCondition("metadata.year", Operator.GREATER_THAN, 2022.5),),)),
        fixture_fields(),
    )
    page = await engine.search("fixture", _semantic(filter=expression, timeout_s=0.25))
    bodies = _searches(server)
    (dense,) = [b for b in bodies if b.get("ranking") == "semantic"]
    assert sorted(k for k in dense if k.startswith("input.")) == [
        "input.query(q0)",
        "input.query(q1)",
    ]
    assert (
        '(({label:"q0", targetHits:2}nearestNeighbor(embedding, q0)) or '
        '({label:"q1", targetHits:2}nearestNeighbor(embedding, q1)))'
    ) in dense["yql"]
    assert dense["hits"] == 4  # every vector's candidates can come back
    assert 'sameElement(key contains "year", value > 2022L)' in dense["yql"]
    assert dense["input.query(q0)"] == pytest.approx(vector_for("a").tolist())
    assert all(b["timeout"] == "250ms" for b in bodies)
    (count,) = [b for b in bodies if b.get("ranking") == "unranked"]
    assert count["hits"] == 0
    assert len(bodies) == 2
    assert [h.chunk.id for h in page.hits] == ["alpha__chunk_0", "beta__chunk_0"]
    assert page.hits[0].dense_score == pytest.approx(0.9)
    assert page.hits[1].dense_score == pytest.approx(0.8)
    assert page.total_count == 2
    assert not page.coverage.degraded
    assert page.coverage.documents_searched == 5

    await engine.search("fixture", _semantic(filter=expression))
    assert len(_searches(server)) == 3  # the count was remembered: one request


async def test_hybrid_search_is_two_requests_each_hit_carrying_both_sides_scores(
    started: Any,
) -> None:
    """The dense request scores its hits' BM25 through rank-only text terms, the keyword request
    its hits' cosines through the query vectors it carries, so a keyword-only candidate is fused
    with its real cosine (the embedded engine's completion) without a third request; a
    dense-only one holds no query word (the keyword list holds every match). Registry and count
    are cached: the second search is two requests."""

    def respond(request: Recorded) -> Reply:
        body = request.json()
        if body.get("ranking") == "semantic":
            return _root([_hit("dense__chunk_0", 0.6, cosines=(0.8,), bm25=0.0)], 1)
        if body.get("ranking") == "keyword":
            return _root([_hit("kw__chunk_0", 4.0, cosines=(0.3,), bm25=4.0)], 1)
        return _root([], 42)

    server, engine = await started(respond)
    query = EngineQuery(
        Strategy.HYBRID,
        "tide words",
        np.stack([vector_for("a")]),
        limit=2,
        fusion=Fusion(FusionMethod.LINEAR, alpha=0.5),
    )
    page = await engine.search("fixture", query)
    bodies = _searches(server)
    dense = next(b for b in bodies if b["ranking"] == "semantic")
    keyword = next(b for b in bodies if b["ranking"] == "keyword")
    where = parse_query(dense["yql"]).where
    assert dense["yql"].split(" where ", 1)[1].startswith("rank(")
    assert dense["quarry_text"] == "tide words"
    assert isinstance(where, Rank)
    assert keyword["input.query(q0)"] == pytest.approx(vector_for("a").tolist())
    scores = {h.chunk.id: (h.dense_score, h.keyword_score, h.score) for h in page.hits}
    assert scores == {
        "dense__chunk_0": (0.8, 0.0, pytest.approx(0.5 * 0.8)),
        "kw__chunk_0": (0.3, 4.0, pytest.approx(0.5 * 0.3 + 0.5 * 4.0 / 4.0)),
    }
    # linear, alpha 0.5, BM25 over its best: dense 0.5*0.8 + 0 vs kw 0.5*0.3 + 0.5
    assert [h.chunk.id for h in page.hits] == ["kw__chunk_0", "dense__chunk_0"]
    assert page.total_count == 42
    assert len(bodies) == 3
    await engine.search("fixture", query)
    assert len(_searches(server)) == 5
    assert [r.method for r in server.requests].count("GET") == 1  # the registry, once


async def test_a_dense_only_hit_of_a_cut_keyword_list_is_fused_with_its_bound_not_its_bm25(
    started: Any,
) -> None:
    """As in the embedded engine: with the keyword list cut at what was asked, a dense-only hit
    is given the list's lowest BM25 (not the BM25 its own request carries) and reports none."""

    def respond(request: Recorded) -> Reply:
        if request.json().get("ranking") == "semantic":
            return _root([_hit("dense__chunk_0", 0.6, cosines=(0.8,), bm25=1.5)], 1)
        if request.json().get("ranking") == "keyword":
            return _root([_hit("kw__chunk_0", 4.0, cosines=(0.3,), bm25=4.0)], 1)
        return _root([], 42)

    _, engine = await started(respond, hybrid_candidates=1)
    linear = Fusion(FusionMethod.LINEAR, alpha=0.5)
    query = EngineQuery(Strategy.HYBRID, "tide", np.stack([vector_for("a")]), limit=1)
    page = await engine.search("fixture", replace(query, fusion=linear))
    top = page.hits[0]
    assert (top.chunk.id, top.dense_score, top.keyword_score) == ("dense__chunk_0", 0.8, None)
    assert top.score == pytest.approx(0.5 * 0.8 + 0.5 * 4.0 / 4.0)


async def test_degraded_coverage_reaches_the_page_with_its_reason(started: Any) -> None:
    _, engine = await started(lambda r: _root([_hit("alpha__chunk_0", 0.5)], 1, DEGRADED))
    page = await engine.search("fixture", _semantic())
    assert page.coverage.degraded
    assert page.coverage.percent == pytest.approx(99.0)
    assert page.coverage.documents_searched == 990
    assert page.coverage.reasons == {Degradation.TIMEOUT}


async def test_one_degraded_side_of_a_hybrid_search_degrades_the_whole_page(
    started: Any,
) -> None:
    """The keyword request answered from half the nodes; dense and count were full: the page
    reports the least coverage and why."""

    def respond(request: Recorded) -> Reply:
        if request.json().get("ranking") == "keyword":
            return _root([_hit("alpha__chunk_0", 2.0)], 1, NODES_DOWN)
        return _root([_hit("alpha__chunk_0", 0.5)], 1)

    _, engine = await started(respond)
    query = EngineQuery(Strategy.HYBRID, "words", np.stack([vector_for("a")]), limit=2)
    page = await engine.search("fixture", query)
    assert page.coverage.percent == pytest.approx(50.0)
    assert page.coverage.reasons == {Degradation.PARTIAL}


async def test_full_coverage_reports_no_degradation(started: Any) -> None:
    _, engine = await started(lambda r: _root([_hit("alpha__chunk_0", 0.5)], 1))
    page = await engine.search("fixture", _semantic())
    assert (page.coverage.degraded, page.coverage.percent, page.coverage.reasons) == (
        False,
        100.0,
        frozenset(),
    )


async def test_keyword_text_is_a_parameter_never_part_of_the_yql(started: Any) -> None:
    server, engine = await started(lambda r: _root([_hit("gamma__chunk_0", 3.2)], 1))
    text = '" or true or "\\'
    query = EngineQuery(Strategy.KEYWORD, text, np.zeros((0, DIMENSIONS), np.float32))
    page = await engine.search("fixture", query)
    keyword = next(b for b in _searches(server) if b.get("ranking") == "keyword")
    assert keyword["quarry_text"] == text
    assert text not in keyword["yql"]
    assert "default contains ({targetHits:10}text(@quarry_text))" in keyword["yql"]
    assert page.hits[0].keyword_score == pytest.approx(3.2)


async def test_a_keyword_count_matches_any_word_and_never_parses_query_syntax(
    started: Any,
) -> None:
    """KEYWORD's total: an unranked `hits: 0` request whose text() keeps its linguistics
    tokenization and no syntax (so `-x`, quotes and `field:` stay words) with an `or` composite
    (`en/reference/api/query.html#model.type`; annotation keys as in `yql.html#userinput`)."""
    server, engine = await started(lambda r: _root([], 7))
    text = 'covid -smokers "title:x"'
    query = EngineQuery(Strategy.KEYWORD, text, np.zeros((0, DIMENSIONS), np.float32))
    page = await engine.search("fixture", query)
    (count,) = [b for b in _searches(server) if b.get("ranking") == "unranked"]
    assert count["hits"] == 0
    assert count["quarry_text"] == text
    where = parse_query(count["yql"]).where
    assert isinstance(where, And)
    (retrieval,) = [r for r in where.operands if isinstance(r, Retrieval)]
    assert retrieval.operator == "text"
    assert retrieval.annotations == {
        "grammar.tokenization": "linguistics",
        "grammar.syntax": "none",
        "grammar.composite": "or",
    }
    assert page.total_count == 7


async def test_upsert_puts_each_chunk_under_an_id_that_survives_slashes_and_hashes(
    started: Any,
) -> None:
    server, engine = await started(lambda r: _root([], 0))
    chunk = Chunk(
        id="https://x.example/a#b?c=1%__chunk_0", document_id="d", chunk_index=0, text="t"
    )
    await engine.upsert("fixture", [ChunkRecord(chunk, vector_for("a"), "h")])
    puts = [r for r in server.requests if r.method == "POST" and r.path.startswith("/document/")]
    assert len(puts) == 1
    prefix = "/document/v1/quarry/chunk/docid/fixture."
    assert puts[0].path.startswith(prefix)
    assert "/" not in puts[0].path[len(prefix) :]
    fields = puts[0].json()["fields"]
    assert fields["chunk_id"] == chunk.id
    assert fields["collection"] == "fixture"
    assert fields["embedding"]["values"] == pytest.approx(vector_for("a").tolist())
    # the registry entry has no incarnation (written before they existed): the put is
    # conditional on a stored chunk having none either, and carries none
    assert puts[0].query == {"condition": "chunk.incarnation == null", "create": "true"}
    assert "incarnation" not in fields


async def test_unreachable_vespa_is_unavailable_with_a_retry_hint(started: Any) -> None:
    server, engine = await started(lambda r: _root([], 0))
    await server.close()
    with pytest.raises(Unavailable) as raised:
        await engine.search("fixture", _semantic())
    assert raised.value.retry_after_s is not None


@pytest.mark.parametrize(
    ("status", "error"), [(503, Unavailable), (429, Unavailable), (504, DeadlineExceeded)]
)
async def test_overload_and_gateway_timeouts_map_to_retryable_and_deadline_errors(
    started: Any, status: int, error: type[Exception]
) -> None:
    body = {
        "root": {
            "id": "toplevel",
            "relevance": 1.0,
            "fields": {"totalCount": 0},
            "errors": [{"code": 12, "summary": "Timed out", "message": "x"}],
        }
    }
    _, engine = await started(lambda r: Reply(status, body))
    with pytest.raises(error):
        await engine.search("fixture", _semantic())


async def test_a_query_vespa_holds_past_its_budget_is_deadline_exceeded(started: Any) -> None:
    never = asyncio.Event()
    _, engine = await started(lambda r: Reply(200, {}, delay=never))
    with pytest.raises(DeadlineExceeded):
        await engine.search("fixture", _semantic(timeout_s=0.01))


REJECTED_FIELD = {
    "root": {
        "id": "toplevel",
        "relevance": 1.0,
        "fields": {"totalCount": 0},
        "errors": [
            {
                "code": 4,
                "summary": "Invalid query parameter",
                "message": "Could not resolve field 'meta_long'",
            }
        ],
    }
}
"""The shape of a 400 from the query API: errors[] with code 4 (INVALID_QUERY_PARAMETER)."""


@pytest.mark.parametrize("operation", ["search", "scan"])
async def test_a_rejected_filter_is_invalid_argument_naming_the_filter_field(
    started: Any, operation: str
) -> None:
    _, engine = await started(lambda r: Reply(400, REJECTED_FIELD))
    expression = validate_filter(
        RawFilter(((RawCondition("metadata.year", Operator.EQUALS, 2024),),)), fixture_fields()
    )
    call = (
        engine.search("fixture", _semantic(filter=expression))
        if operation == "search"
        else engine.scan("fixture", expression, limit=10)
    )
    with pytest.raises(InvalidArgument) as raised:
        await call
    assert raised.value.violations[0].field == "filter"
    assert "metadata.year" in raised.value.message


def _chunk_hit(
    document_id: str, index: int, source: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    chunk = Chunk(
        id=f"{document_id}__chunk_{index}",
        document_id=document_id,
        chunk_index=index,
        text="t",
        source=source,
        metadata=metadata,
    )
    return {
        "id": f"id:quarry:chunk::fixture.{chunk.id}",
        "relevance": 0.0,
        "source": "quarry_content",
        "fields": {
            "chunk_id": chunk.id,
            "document_id": document_id,
            "chunk_json": chunk_json(chunk, {}),
            "text": chunk.text,
        },
    }


async def test_list_documents_finds_matching_documents_then_reads_all_their_chunks(
    started: Any,
) -> None:
    """ListDocuments (quarry ingest's incremental view): which documents match the filter, then
    every chunk of those, so the count covers chunks the filter did not match."""
    alpha = [_chunk_hit("alpha", i, "wiki", {"content_sha256": "aa"}) for i in (1, 0)]
    beta = _chunk_hit("beta", 0, "git", {"content_sha256": "bb"})

    def respond(request: Recorded) -> Reply:
        yql = request.json()["yql"]
        if "chunk_json" in yql:
            return _root([*alpha, beta], 3)
        return _root([alpha[0], beta], 2)

    server, engine = await started(respond)
    where = validate_filter(
        RawFilter(((RawCondition("chunk_index", Operator.GREATER_THAN, 0),),)), fixture_fields()
    )
    summaries = await engine.list_documents("fixture", where=where)
    assert sorted((s.id, s.source, s.chunk_count, dict(s.metadata)) for s in summaries) == [
        ("alpha", "wiki", 2, {"content_sha256": "aa"}),
        ("beta", "git", 1, {"content_sha256": "bb"}),
    ]
    yqls = [body["yql"] for body in _searches(server)]
    assert any("chunk_index > 0" in y for y in yqls)
    (read,) = [y for y in yqls if 'document_id in ("alpha", "beta")' in y]
    assert read.startswith("select chunk_id, chunk_json from chunk")  # no title, no text


async def test_hybrid_text_without_a_searchable_word_falls_back_to_the_dense_side(
    started: Any,
) -> None:
    """Vespa refuses a text with no searchable word (a null item, 400): the keyword side finds
    nothing, and the dense request is sent again without its rank-only terms."""

    def respond(request: Recorded) -> Reply:
        body = request.json()
        if "quarry_text" in body and body.get("ranking") != "unranked":
            error = {"code": 4, "summary": "Invalid query", "message": "NullItem"}
            return Reply(400, {"root": {"errors": [error]}})
        if body.get("ranking") == "semantic":
            return _root([_hit("alpha__chunk_0", 0.5, cosines=(0.7,))], 1)
        return _root([], 3)

    server, engine = await started(respond)
    query = EngineQuery(Strategy.HYBRID, "...", np.stack([vector_for("a")]), limit=2)
    page = await engine.search("fixture", query)
    assert [(h.chunk.id, h.dense_score) for h in page.hits] == [("alpha__chunk_0", 0.7)]
    dense = [b for b in _searches(server) if b["ranking"] == "semantic"]
    assert ["quarry_text" in b for b in dense] == [True, False]


async def test_scan_asks_for_unranked_whole_chunks_up_to_its_limit(started: Any) -> None:
    """What `read` and `count` stand on: one unranked request for up to `limit` whole chunks,
    stopping at a short page (paging across requests: the CountDocuments tests below)."""
    matches = [_chunk_hit(f"d{i:02d}", 0, "wiki", {}) for i in range(25)]

    def respond(request: Recorded) -> Reply:
        body = request.json()
        return _root(matches[body["offset"] : body["offset"] + body["hits"]], len(matches))

    server, engine = await started(respond)
    chunks = await engine.scan("fixture", FilterExpression(), limit=40)
    assert [c.document_id for c in chunks] == [f"d{i:02d}" for i in range(25)]
    scans = [b for b in _searches(server) if "chunk_json" in b["yql"]]
    assert [(b["offset"], b["hits"], b["ranking"]) for b in scans] == [(0, 40, "unranked")]


def _deleting(visits: list[dict[str, Any]], search: Callable[[Recorded], Reply]) -> Any:
    """A responder whose selection deletes (`DELETE …/docid?selection=…`) answer `visits` in
    turn; other document/v1 calls and searches as `_routed`."""
    answers = iter(visits)

    def respond(request: Recorded) -> Reply:
        if request.method == "DELETE" and "selection" in request.query:
            return Reply(200, {"pathId": request.path, **next(answers)})
        return _routed(search)(request)

    return respond


def _selection_deletes(server: RecordingServer) -> list[Recorded]:
    return [r for r in server.requests if r.method == "DELETE" and "selection" in r.query]


async def test_delete_collection_is_a_selection_delete_that_follows_continuations(
    started: Any,
) -> None:
    """DeleteCollection: Vespa removes the chunks itself, one visit round per request, until the
    answer carries no `continuation`; then the registry document goes. Response bodies follow
    `en/reference/api/document-v1.html` (`pathId`, `documentCount`, `continuation`) and the
    delete-where loop of `en/writing/document-v1-api-guide.html`."""
    visits: list[dict[str, Any]] = [
        {"documentCount": 3, "continuation": "AAAAEAAAAAAAAAM3"},
        {"documentCount": 2},
    ]
    server, _ = await started(lambda r: _root([], 0))
    server.respond = _deleting(visits, lambda r: _root([], 0))
    engine = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0))
    try:
        await engine.drop_collection("fixture")
    finally:
        await engine.close()
    rounds = _selection_deletes(server)
    assert [r.path for r in rounds] == ["/document/v1/quarry/chunk/docid"] * 2
    assert [r.query.get("continuation") for r in rounds] == [None, "AAAAEAAAAAAAAAM3"]
    assert all(r.query["selection"] == 'chunk.collection == "fixture"' for r in rounds)
    assert all(r.query["cluster"] == "quarry_content" for r in rounds)
    assert all(r.query["timeout"] == "30s" for r in rounds)  # a continuation well before 180 s
    registry = [r for r in server.requests if r.path.startswith("/document/v1/quarry/collection/")]
    assert [(r.method, r.path, r.query.get("condition")) for r in registry] == [
        ("GET", REGISTRY_PATH, None),  # it exists (a get: the newest acknowledged entry)
        ("POST", REGISTRY_PATH, "collection.revision == 3"),  # marked: the fence
        ("DELETE", REGISTRY_PATH, None),
    ]
    assert registry[1].json()["fields"]["revision"] == -1
    assert server.requests.index(registry[1]) < server.requests.index(rounds[0])


async def test_delete_by_filter_runs_as_one_selection_and_counts_what_vespa_removed(
    started: Any,
) -> None:
    server, engine = await started(lambda r: _root([], 0))
    server.respond = _deleting([{"documentCount": 4}], lambda r: _root([], 0))
    where = validate_filter(
        RawFilter(((RawCondition("source", Operator.EQUALS, 'x" or true or "'),),)),
        fixture_fields(),
    )
    assert await engine.delete_matching("fixture", document_ids=[], where=where) == 4
    (round_,) = _selection_deletes(server)
    assert round_.query["selection"] == (
        'chunk.collection == "fixture" and ((chunk.source == "x\\x22 or true or \\x22"))'
    )
    assert not [r for r in _searches(server) if "chunk_id" in r["yql"]]  # no id paging


async def test_a_filter_without_a_selection_deletes_the_ids_yql_selects(started: Any) -> None:
    """Metadata has no documented selection semantics for a missing key: the chunks are found by
    the search's own YQL and deleted by id."""
    found = [_chunk_hit("alpha", 0, "wiki", {}), _chunk_hit("beta", 0, "wiki", {})]
    pages = iter([_root(found, 2), _root([], 0)])
    server, engine = await started(lambda r: next(pages))
    where = validate_filter(
        RawFilter(((RawCondition("metadata.year", Operator.EQUALS, 2024),),)), fixture_fields()
    )
    assert await engine.delete_matching("fixture", document_ids=[], where=where) == 2
    assert not _selection_deletes(server)
    deletes = sorted(
        r.path for r in server.requests if r.method == "DELETE" and r.path.startswith("/document/")
    )
    assert len(deletes) == 2
    assert all(p.startswith("/document/v1/quarry/chunk/docid/fixture.") for p in deletes)


async def test_a_refused_selection_delete_is_a_failed_precondition_not_a_silent_zero(
    started: Any,
) -> None:
    server, engine = await started(lambda r: _root([], 0))

    def respond(request: Recorded) -> Reply:
        if request.method == "DELETE" and "selection" in request.query:
            return Reply(400, {"pathId": request.path, "message": "Failed to parse selection"})
        return _routed(lambda r: _root([], 0))(request)

    server.respond = respond
    with pytest.raises(FailedPrecondition, match="Failed to parse selection"):
        await engine.drop_collection("fixture")


def _paged(matches: list[dict[str, Any]]) -> Callable[[Recorded], Reply]:
    """A Vespa that answers unranked whole-chunk scans by `offset`/`hits` over `matches`."""

    def respond(request: Recorded) -> Reply:
        body = request.json()
        window = matches[body["offset"] : body["offset"] + body["hits"]]
        return _root(window, len(matches))

    return respond


async def test_count_documents_pages_the_scan_past_one_response_and_counts_every_chunk(
    started: Any,
) -> None:
    """CountDocuments on Vespa: the matching chunks are read in unranked pages of `maxHits`
    (1200) at increasing offsets until a short page, then counted and broken down."""
    matches = [_chunk_hit(f"d{i:04d}", i % 2, "wiki" if i % 3 else "git", {}) for i in range(2500)]
    server, engine = await started(_paged(matches))
    where = RawFilter(((RawCondition("source", Operator.IN, ["wiki", "git"]),),))
    counted = await count_documents(
        engine,
        CountRequest("fixture", filter=where, group_by=("source",)),
        fixture_fields(),
        RequestLimits(),
    )
    assert (counted.document_count, counted.chunk_count, counted.exact) == (2500, 2500, True)
    assert counted.breakdowns[0].buckets == [("wiki", 1666), ("git", 834)]
    scans = [b for b in _searches(server) if "chunk_json" in b["yql"]]
    assert [(b["offset"], b["hits"]) for b in scans] == [(0, 1200), (1200, 1200), (2400, 1200)]
    assert all(b["ranking"] == "unranked" for b in scans)
    assert all('source in ("wiki", "git")' in b["yql"] for b in scans)


async def test_a_count_past_max_offset_visits_with_the_filters_selection(started: Any) -> None:
    """More chunks match than a query can page (`maxOffset`): the chunks are read again by
    visiting (`GET /document/v1/quarry/chunk/docid?selection=…&fieldSet=chunk:chunk_id,
    chunk_json,title,text`, following `continuation`), so the count is exact. Visit answers follow
    `en/reference/api/document-v1.html` ("Visit": `documents[{id, fields}]`, `documentCount`,
    `continuation`) and the data-dump sample of `en/writing/document-v1-api-guide.html`."""
    full_page = [_chunk_hit(f"q{i:04d}", 0, "wiki", {}) for i in range(1200)]
    visited = [_chunk_hit(f"v{i}", 0, "wiki" if i < 4 else "git", {}) for i in range(5)]
    rounds = iter(
        [
            {"documents": visited[:3], "documentCount": 3, "continuation": "AAAAEAAAAAAAAAM3"},
            {"documents": visited[3:], "documentCount": 2},
        ]
    )

    def respond(request: Recorded) -> Reply:
        if request.method == "GET" and "selection" in request.query:
            return Reply(200, {"pathId": request.path, **next(rounds)})
        return _routed(lambda r: _root(full_page, 50_000))(request)

    server, engine = await started(lambda r: _root([], 0))
    server.respond = respond
    where = RawFilter(((RawCondition("source", Operator.IN, ["wiki", "git"]),),))
    counted = await count_documents(
        engine,
        CountRequest("fixture", filter=where, group_by=("source",)),
        fixture_fields(),
        RequestLimits(),
    )
    assert (counted.document_count, counted.exact) == (5, True)
    assert counted.breakdowns[0].buckets == [("wiki", 4), ("git", 1)]
    visits = [r for r in server.requests if r.method == "GET" and "selection" in r.query]
    assert [v.query.get("continuation") for v in visits] == [None, "AAAAEAAAAAAAAAM3"]
    assert all(v.path == "/document/v1/quarry/chunk/docid" for v in visits)
    assert visits[0].query["fieldSet"] == "chunk:chunk_id,chunk_json,title,text"
    assert visits[0].query["cluster"] == "quarry_content"
    assert visits[0].query["timeout"] == "30s"
    assert visits[0].query["selection"] == (
        'chunk.collection == "fixture" and (((chunk.source == "wiki" or chunk.source == "git")))'
    )
    offsets = [b["offset"] for b in _searches(server) if "chunk_json" in b["yql"]]
    assert offsets[-1] <= MAX_OFFSET


async def test_a_count_past_max_offset_without_a_selection_fails_instead_of_claiming_exactness(
    started: Any,
) -> None:
    """A metadata filter has no document selection: FailedPrecondition naming the limit, never
    a subset counted as exact."""
    full_page = [_chunk_hit(f"d{i:04d}", 0, "wiki", {}) for i in range(1200)]
    server, engine = await started(lambda r: _root(full_page, 50_000))
    where = RawFilter(((RawCondition("metadata.year", Operator.GREATER_THAN, 2000),),))
    with pytest.raises(FailedPrecondition) as raised:
        await count_documents(
            engine, CountRequest("fixture", filter=where), fixture_fields(), RequestLimits()
        )
    assert raised.value.reason == "VESPA_MAX_OFFSET"
    assert "maxOffset" in raised.value.message
    assert not [r for r in server.requests if r.method == "GET" and "selection" in r.query]


def _grouping(children: list[dict[str, Any]], root_fields: dict[str, Any], total: int) -> Reply:
    """A grouping answer in the documented shape: `root.children[0]` is `group:root:0`, holding
    the root-level outputs in `fields` and one `grouplist:<label>` per parallel `all(group(…))`,
    whose groups carry `value` and `fields{"count()": n}` — `en/querying/query-api.html`
    (result of `all(group(customer) each(output(sum(price))))`),
    `en/learn/tutorials/news-3-searching.md` (`grouplist:category` with `count()`),
    `en/querying/grouping.html` ("Two parallel groupings"),
    `en/reference/querying/grouping-language.html` ("Labels": outputs of an `all` without
    `each` belong to the owning group)."""
    root_group = {
        "id": "group:root:0",
        "relevance": 1.0,
        "continuation": {"this": ""},
        "children": children,
    }
    if root_fields:
        root_group["fields"] = root_fields
    return Reply(
        200,
        {
            "root": {
                "id": "toplevel",
                "relevance": 1.0,
                "fields": {"totalCount": total},
                "coverage": FULL,
                "children": [root_group],
            }
        },
    )


def _grouplist(label: str, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "id": f"grouplist:{label}",
        "relevance": 1.0,
        "label": label,
        "children": [
            {
                "id": f"group:string:{value}",
                "relevance": float(n),
                "value": value,
                "fields": {"count()": n},
            }
            for value, n in counts.items()
        ],
    }


async def test_get_collection_reads_counts_per_source_and_the_date_range_from_grouping(
    started: Any,
) -> None:
    earliest, latest = 1709294400000000, 1710072000000000  # 2024-03-01/10 12:00 UTC, in µs

    def respond(request: Recorded) -> Reply:
        yql = request.json()["yql"]
        if "min(created_at)" in yql:
            return _grouping([], {"min(created_at)": earliest, "max(created_at)": latest}, 4)
        if "group(source)" in yql:
            lists = [
                _grouplist("source", {"confluence": 2, "github": 1, "": 1}),
                _grouplist("entity_type", {"page": 3, "comment": 1}),
            ]
            return _grouping(lists, {}, 4)
        return _root([], 9)  # every chunk of the collection

    server, engine = await started(respond)
    stats = await engine.describe("fixture")
    assert (stats.document_count, stats.chunk_count) == (4, 9)
    assert dict(stats.sources) == {"confluence": 2, "github": 1}  # "" is no source
    assert dict(stats.entity_types) == {"page": 3, "comment": 1}
    assert stats.earliest_created_at == datetime(2024, 3, 1, 12, tzinfo=UTC)
    assert stats.latest_created_at == datetime(2024, 3, 10, 12, tzinfo=UTC)
    assert stats.fields["metadata.year"].value == "integer"
    grouped = [b for b in _searches(server) if "group(source)" in b["yql"]]
    assert grouped[0]["hits"] == 0
    assert "chunk_index = 0" in grouped[0]["yql"]  # documents: each has exactly one chunk 0


def _grouped(lists: dict[str, dict[str, int]], documents: int) -> Reply:
    """A grouping answer (`en/reference/querying/default-result-format.html`): one root group
    holding a labelled group list per `group(...)`, each group with its `count()`."""
    root_group = {
        "id": "group:root:0",
        "relevance": 1.0,
        "children": [
            {
                "id": f"grouplist:{label}",
                "label": label,
                "relevance": 1.0,
                "children": [
                    {
                        "id": f"group:string:{value}",
                        "value": value,
                        "relevance": 1.0,
                        "fields": {"count()": count},
                    }
                    for value, count in groups.items()
                ],
            }
            for label, groups in lists.items()
        ],
    }
    return _root([root_group], documents)


async def test_describe_under_a_caller_filter_counts_and_lists_only_what_matches_it(
    started: Any,
) -> None:
    """Every describe query carries the filter; the facets, counts and metadata keys come from
    the matching documents only (a key no matching document has is not listed)."""

    def respond(request: Recorded) -> Reply:
        yql = request.json()["yql"]
        if "group(source)" in yql:
            keys = {"meta_str.key": {"team": 2}, "meta_long.key": {}}
            return _grouped({"source": {"wiki": 2}, "entity_type": {"page": 2}, **keys}, 2)
        if "min(created_at)" in yql:
            return _grouped({}, 0)
        return _root([], 5)

    server, engine = await started(respond)
    team = RawCondition("metadata.team", Operator.EQUALS, "search")
    expression = validate_filter(RawFilter(((team,),)), fixture_fields())
    stats = await engine.describe("fixture", where=expression)

    queries = [r.json()["yql"] for r in server.requests if r.path.startswith("/search/")]
    described = [q for q in queries if "from collection" not in q]
    assert len(described) == 3
    assert all("meta_str" in q and '"search"' in q for q in described)
    grouping = next(q for q in described if "group(source)" in q)
    assert all(f"group({m}.key)" in grouping for m in ("meta_str", "meta_long"))
    assert (stats.document_count, stats.chunk_count) == (2, 5)
    assert dict(stats.sources) == {"wiki": 2}
    assert dict(stats.entity_types) == {"page": 2}
    assert "metadata.team" in stats.fields
    assert "metadata.year" not in stats.fields
    assert stats.earliest_created_at is None


async def test_describe_without_a_filter_lists_every_registered_metadata_key(
    started: Any,
) -> None:
    def respond(request: Recorded) -> Reply:
        if "group(source)" in request.json()["yql"]:
            return _grouped({"source": {"wiki": 2, "git": 1}, "entity_type": {}}, 3)
        return _root([], 4)

    server, engine = await started(respond)
    stats = await engine.describe("fixture")
    queries = [r.json()["yql"] for r in server.requests if r.path.startswith("/search/")]
    grouping = next(q for q in queries if "group(source)" in q)
    assert ".key)" not in grouping
    assert {"metadata.team", "metadata.year"} <= set(stats.fields)
    assert dict(stats.sources) == {"wiki": 2, "git": 1}


async def test_describe_under_a_filter_vespa_rejects_names_the_caller_filter(
    started: Any,
) -> None:
    _, engine = await started(lambda r: Reply(400, REJECTED_FIELD))
    year = RawCondition("metadata.year", Operator.EQUALS, 2024)
    expression = validate_filter(RawFilter(((year,),)), fixture_fields())
    with pytest.raises(InvalidArgument) as raised:
        await engine.describe("fixture", where=expression)
    assert raised.value.violations[0].field == "caller_filter"


async def test_list_collections_pages_past_one_response_instead_of_truncating(
    started: Any,
) -> None:
    """More collections than `maxHits` (1200): unranked pages at increasing offsets until a short
    one, every name listed once."""
    names = [f"c{i:04d}" for i in range(1300)]

    def respond(request: Recorded) -> Reply:
        body = request.json()
        page = names[body["offset"] : body["offset"] + body["hits"]]
        return _root([{"id": n, "relevance": 0.0, "fields": {"name": n}} for n in page], 1300)

    server, engine = await started(respond)
    server.respond = respond  # every query answered from `names`, the registry's included
    assert await engine.list_collections() == names
    pages = [r.json() for r in server.requests if r.path == "/search/"]
    assert [(b["offset"], b["hits"], b["ranking"]) for b in pages] == [
        (0, 1200, "unranked"),
        (1200, 1200, "unranked"),
    ]


async def test_deleting_documents_by_id_deletes_their_chunks_by_id_without_a_visit(
    started: Any,
) -> None:
    """DeleteDocuments by id: the chunks are found by the `document_id` attribute (a query) and
    each is deleted by its id; no document-selection delete (a visit of the whole cluster)."""
    found = [_chunk_hit("alpha", 0, "wiki", {}), _chunk_hit("alpha", 1, "wiki", {})]
    pages = iter([_root(found, 2), _root([], 0)])
    server, engine = await started(lambda r: next(pages))
    assert await engine.delete_matching("fixture", document_ids=["alpha"], where=None) == 2
    assert not _selection_deletes(server)
    (lookup, *_) = [b for b in _searches(server) if "document_id" in b["yql"]]
    assert 'document_id in ("alpha")' in lookup["yql"]
    deletes = [r for r in server.requests if r.method == "DELETE"]
    assert len(deletes) == 2
    assert all(r.path.startswith("/document/v1/quarry/chunk/docid/fixture.") for r in deletes)
