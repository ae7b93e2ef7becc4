"""The SearchToolService over gRPC, with the real MiniLM embedder and a fresh data directory."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any, TypeAlias

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.errors import Unavailable
from services.common.status import DEFAULT_RETRY_AFTER_S
from services.common.telemetry import setup_telemetry
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.engine.lancedb import retrieval
from services.search_tool.engine.lancedb import search as lancedb_search
from services.search_tool.server import build_search_tool_server
from services.search_tool.servicer import SERVICE_NAME
from tests.search_tool.grpc_helpers import Op, condition, document, fails, search, where

Stub: TypeAlias = Any
INVALID = grpc.StatusCode.INVALID_ARGUMENT
SEMANTIC = search_pb2.RETRIEVAL_STRATEGY_SEMANTIC
KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
HYBRID = search_pb2.RETRIEVAL_STRATEGY_HYBRID

DOCS = [
    document(
        "py-asyncio",
        "asyncio runs coroutines on an event loop; tasks are scheduled cooperatively.",
        title="asyncio",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/asyncio.html",
        created_at=datetime(2024, 1, 10, tzinfo=UTC),
        metadata={"since": 3, "stable": True, "area": "Concurrency"},
        breadcrumbs=[search_pb2.Breadcrumb(id="lib", name="Library", entity_type="section")],
    ),
    document(
        "py-json",
        "The json module encodes and decodes JSON documents to and from Python objects.",
        title="json",
        source="stdlib",
        entity_type="module",
        created_at=datetime(2024, 2, 20, tzinfo=UTC),
        metadata={"since": 2, "stable": True, "area": "Data formats"},
    ),
    document(
        "recipe-bread",
        "Knead the dough for ten minutes, let it rise, then bake the bread at 220 degrees.",
        title="Sourdough bread",
        source="cookbook",
        entity_type="recipe",
        created_at=datetime(2023, 6, 1, tzinfo=UTC),
        metadata={"minutes": 240, "vegan": True},
    ),
]


@pytest.fixture
async def loaded(stub: Stub) -> Stub:
    reply = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
    )
    assert reply.documents_upserted == len(DOCS)
    return stub


async def _ids(stub: Stub, request: search_tool_pb2.SearchRequest) -> list[str]:
    reply = await stub.Search(request)
    return [r.chunk.document_id for r in reply.results]


@pytest.mark.parametrize("strategy", [SEMANTIC, KEYWORD, HYBRID])
async def test_each_strategy_finds_the_relevant_document_first(
    loaded: Stub, strategy: search_pb2.RetrievalStrategy
) -> None:
    ids = await _ids(loaded, search("docs", "how do I bake bread dough", strategy))
    assert ids[0] == "recipe-bread"


async def test_hybrid_results_carry_both_score_parts_and_a_total(loaded: Stub) -> None:
    reply = await loaded.Search(search("docs", "event loop coroutines", HYBRID, limit=5))
    top = reply.results[0]
    assert top.chunk.document_id == "py-asyncio"
    assert top.HasField("dense_score")
    assert top.HasField("keyword_score")
    assert [r.score for r in reply.results] == sorted(
        (r.score for r in reply.results), reverse=True
    )
    assert reply.total_count >= len(reply.results)
    assert reply.took_ms > 0


async def test_the_embedded_engine_reports_full_coverage_on_every_search(loaded: Stub) -> None:
    reply = await loaded.Search(search("docs", "event loop coroutines", HYBRID, limit=5))
    assert reply.HasField("coverage")
    assert (reply.coverage.percent, reply.coverage.degraded, list(reply.coverage.reasons)) == (
        100.0,
        False,
        [],
    )


async def test_semantic_results_have_only_the_dense_part(loaded: Stub) -> None:
    reply = await loaded.Search(search("docs", "parsing JSON", SEMANTIC))
    assert reply.results[0].chunk.document_id == "py-json"
    assert all(r.HasField("dense_score") and not r.HasField("keyword_score") for r in reply.results)
    assert reply.total_count == sum(1 for _ in reply.results)


async def test_variations_add_dense_queries_whose_best_similarity_counts(loaded: Stub) -> None:
    async def bread_similarity(variations: list[str]) -> float:
        request = search("docs", "zzzz qqqq", SEMANTIC, variations=variations, limit=3)
        reply = await loaded.Search(request)
        scores = [r.dense_score for r in reply.results if r.chunk.document_id == "recipe-bread"]
        return float(scores[0])

    assert await bread_similarity(["baking a loaf"]) > await bread_similarity([]) + 0.2


async def test_a_keyword_expansion_feeds_the_keyword_side_alone(loaded: Stub) -> None:
    """A model's passage sent as `keyword_expansion`: its words find what the query's do not on
    the keyword side, and the dense side and its scores are as without it."""
    alone = await loaded.Search(search("docs", "zzzz qqqq", KEYWORD, limit=3))
    assert list(alone.results) == []
    expanded = await loaded.Search(
        search("docs", "zzzz qqqq", KEYWORD, keyword_expansion="knead the dough\nthen bake")
    )
    assert [r.chunk.document_id for r in expanded.results][:1] == ["recipe-bread"]

    def dense(reply: search_tool_pb2.SearchResponse) -> list[tuple[str, float]]:
        return [(r.chunk.document_id, round(r.dense_score, 6)) for r in reply.results]

    plain = await loaded.Search(search("docs", "parsing JSON", SEMANTIC))
    semantic = await loaded.Search(
        search("docs", "parsing JSON", SEMANTIC, keyword_expansion="bread dough")
    )
    assert dense(semantic) == dense(plain)
    hybrid = await loaded.Search(
        search("docs", "zzzz qqqq", HYBRID, keyword_expansion="knead the dough", limit=3)
    )
    [bread] = [r for r in hybrid.results if r.chunk.document_id == "recipe-bread"]
    assert bread.HasField("keyword_score")
    assert bread.keyword_score > 0


async def test_a_keyword_expansions_word_weighs_a_quarter_of_a_query_word(stub: Stub) -> None:
    """Two chunks alike but for one word each: the one matching the query's word scores four
    times the one matching the expansion's (KEYWORD_EXPANSION_WEIGHT)."""
    twins = [
        document("alpha", "the alphaword sits here among common filler text", title="A"),
        document("omega", "the omegaword sits here among common filler text", title="A"),
    ]
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="twins", documents=twins)
    )
    reply = await stub.Search(search("twins", "alphaword", KEYWORD, keyword_expansion="omegaword"))
    scores = {r.chunk.document_id: r.keyword_score for r in reply.results}
    assert scores["alpha"] == pytest.approx(4 * scores["omega"], rel=1e-6)


async def test_search_returns_every_chunk_field(loaded: Stub) -> None:
    reply = await loaded.Search(search("docs", "asyncio", KEYWORD, limit=1))
    chunk = reply.results[0].chunk
    assert chunk.id == "py-asyncio__chunk_0"
    assert chunk.chunk_index == 0
    assert (chunk.title, chunk.source, chunk.entity_type) == ("asyncio", "stdlib", "module")
    assert chunk.url.endswith("asyncio.html")
    assert chunk.created_at.ToDatetime(tzinfo=UTC) == datetime(2024, 1, 10, tzinfo=UTC)
    assert [b.name for b in chunk.breadcrumbs] == ["Library"]
    assert chunk.metadata["since"].int_value == 3
    assert chunk.metadata["stable"].bool_value is True


async def test_filters_narrow_results_and_contains_ignores_case(loaded: Stub) -> None:
    by_source = search(
        "docs", "python", filter=where([condition("source", Op.FILTER_OPERATOR_EQUALS, "stdlib")])
    )
    assert set(await _ids(loaded, by_source)) == {"py-asyncio", "py-json"}
    contains = where([condition("metadata.area", Op.FILTER_OPERATOR_CONTAINS, "CONCURRENCY")])
    assert await _ids(loaded, search("docs", "python", filter=contains)) == ["py-asyncio"]
    dated = where([condition("created_at", Op.FILTER_OPERATOR_LESS_THAN, "2024-01-01")])
    assert await _ids(loaded, search("docs", "python", filter=dated)) == ["recipe-bread"]


async def test_hostile_filter_values_cannot_change_the_query(loaded: Stub) -> None:
    for hostile in ["stdlib' OR '1'='1", "' OR 1=1 --", "x') OR (source = 'stdlib", "%", "_"]:
        request = search(
            "docs",
            "python",
            filter=where([condition("source", Op.FILTER_OPERATOR_EQUALS, hostile)]),
        )
        assert await _ids(loaded, request) == []
        contains = search(
            "docs",
            "python",
            filter=where([condition("title", Op.FILTER_OPERATOR_CONTAINS, hostile)]),
        )
        assert await _ids(loaded, contains) == []


async def test_offset_pages_through_results(loaded: Stub) -> None:
    everything = await _ids(loaded, search("docs", "python module", SEMANTIC, limit=3))
    second = await _ids(loaded, search("docs", "python module", SEMANTIC, limit=1, offset=1))
    assert second == everything[1:2]


class _CountingEmbedder:
    """The real embedder, every call's texts recorded."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.calls: list[list[str]] = []
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.tokenizer = inner.tokenizer
        self.scripts = inner.scripts

    async def embed(self, texts: Any) -> Any:
        self.calls.append(list(texts))
        return await self._inner.embed(texts)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("entries", "embeddings"), [(4096, 1), (0, 3)])
async def test_paging_through_a_query_embeds_it_once_and_pages_as_without_kept_vectors(
    settings: SearchToolSettings, embedder: Embedder, entries: int, embeddings: int
) -> None:
    counting = _CountingEmbedder(embedder)
    kept = settings.embedding.model_copy(update={"query_cache_entries": entries})
    server = await _server_with(settings.model_copy(update={"embedding": kept}), counting)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            await stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
            )
            everything = await _ids(stub, search("docs", "python module", HYBRID, limit=3))
            pages = [
                await _ids(stub, search("docs", "python module", HYBRID, limit=1, offset=n))
                for n in (1, 2)
            ]
    finally:
        await server.stop(0)
    assert pages == [everything[1:2], everything[2:3]]
    assert [c for c in counting.calls if c == ["python module"]] == [["python module"]] * embeddings


async def test_get_collection_describes_counts_fields_and_dates(loaded: Stub) -> None:
    reply = await loaded.GetCollection(search_tool_pb2.GetCollectionRequest(collection="docs"))
    c = reply.collection
    assert (c.name, c.document_count) == ("docs", 3)
    assert c.chunk_count >= 3
    assert [(f.value, f.count) for f in c.sources] == [("stdlib", 2), ("cookbook", 1)]
    assert {f.value: f.count for f in c.entity_types} == {"module": 2, "recipe": 1}
    types = {f.name: f.type for f in c.fields}
    assert types["metadata.since"] == search_tool_pb2.FIELD_TYPE_INTEGER
    assert types["metadata.vegan"] == search_tool_pb2.FIELD_TYPE_BOOL
    assert types["metadata.area"] == search_tool_pb2.FIELD_TYPE_STRING
    assert types["created_at"] == search_tool_pb2.FIELD_TYPE_TIMESTAMP
    assert c.earliest_created_at.ToDatetime(tzinfo=UTC) == datetime(2023, 6, 1, tzinfo=UTC)
    assert c.latest_created_at.ToDatetime(tzinfo=UTC) == datetime(2024, 2, 20, tzinfo=UTC)
    assert c.embedding_model.endswith("all-MiniLM-L6-v2")
    assert c.embedding_dimensions == 384


async def test_list_and_delete_collections(loaded: Stub) -> None:
    await loaded.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="other", documents=[DOCS[0]])
    )
    listed = await loaded.ListCollections(search_tool_pb2.ListCollectionsRequest())
    assert [(c.name, c.document_count) for c in listed.collections] == [("docs", 3), ("other", 1)]
    await loaded.DeleteCollection(search_tool_pb2.DeleteCollectionRequest(collection="other"))
    listed = await loaded.ListCollections(search_tool_pb2.ListCollectionsRequest())
    assert [c.name for c in listed.collections] == ["docs"]


async def test_embed_returns_unit_vectors_of_the_model(stub: Stub) -> None:
    reply = await stub.Embed(search_tool_pb2.EmbedRequest(texts=["hello", "world"]))
    assert (reply.dimensions, len(reply.embeddings)) == (384, 2)
    for embedding in reply.embeddings:
        assert np.linalg.norm(np.array(embedding.values)) == pytest.approx(1.0, abs=1e-3)


async def test_reingesting_a_shorter_document_replaces_all_its_chunks(stub: Stub) -> None:
    long_text = " ".join(f"Sentence number {i} talks about glaciers and fjords." for i in range(30))
    first = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="c", documents=[document("d", long_text)])
    )
    assert first.chunks_upserted > 3
    second = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection="c", documents=[document("d", "Now it is only about volcanoes.")]
        )
    )
    assert (second.chunks_upserted, second.chunks_deleted) == (1, first.chunks_upserted - 1)
    collection = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="c"))
    assert collection.collection.chunk_count == 1
    assert await _ids(stub, search("c", "glaciers", KEYWORD)) == []
    assert await _ids(stub, search("c", "volcanoes", KEYWORD)) == ["d"]


async def test_reingesting_an_unchanged_document_writes_nothing(loaded: Stub) -> None:
    again = await loaded.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
    )
    assert (again.documents_upserted, again.chunks_upserted, again.chunks_deleted) == (3, 0, 0)


async def test_delete_documents_by_id_and_by_filter(loaded: Stub) -> None:
    by_id = await loaded.DeleteDocuments(
        search_tool_pb2.DeleteDocumentsRequest(collection="docs", document_ids=["py-json"])
    )
    assert by_id.chunks_deleted >= 1
    by_filter = await loaded.DeleteDocuments(
        search_tool_pb2.DeleteDocumentsRequest(
            collection="docs",
            filter=where([condition("source", Op.FILTER_OPERATOR_EQUALS, "cookbook")]),
        )
    )
    assert by_filter.chunks_deleted >= 1
    assert await _ids(loaded, search("docs", "python bread json", SEMANTIC)) == ["py-asyncio"]


async def test_everything_survives_a_server_restart(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    first = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await first.start()
    async with grpc.aio.insecure_channel(first.address) as channel:
        await search_tool_pb2_grpc.SearchToolServiceStub(channel).UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="kept", documents=DOCS)
        )
    await first.stop(0)
    second = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await second.start()
    async with grpc.aio.insecure_channel(second.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        collection = await stub.GetCollection(
            search_tool_pb2.GetCollectionRequest(collection="kept")
        )
        assert collection.collection.document_count == 3
        assert (await _ids(stub, search("kept", "sourdough", HYBRID)))[0] == "recipe-bread"
    await second.stop(0)


async def test_service_is_not_serving_until_the_embedder_is_loaded(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    release = threading.Event()

    def slow_embedder() -> Embedder:
        release.wait(timeout=10)
        return embedder

    server = build_search_tool_server(settings, embedder_factory=slow_embedder)
    starting = asyncio.create_task(server.start())
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
            reply = await health.Check(request, wait_for_ready=True)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            embed = stub.Embed(search_tool_pb2.EmbedRequest(texts=["x"]))
            await fails(embed, grpc.StatusCode.UNAVAILABLE)
            release.set()
            await starting
            reply = await health.Check(request)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        release.set()
        await starting
        await server.stop(0)


async def _traced_searches(
    settings: SearchToolSettings, embedder: Embedder, *requests: Any
) -> list[Any]:
    """The spans of `requests` searched in order on a one-document collection."""
    exporter = InMemorySpanExporter()
    telemetry = setup_telemetry("search_tool", span_exporter=exporter)
    server = build_search_tool_server(settings, telemetry, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            await stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="t", documents=DOCS[:1])
            )
            exporter.clear()
            for request in requests:
                await stub.Search(request)
    finally:
        await server.stop(0)
        telemetry.shutdown()
    return list(exporter.get_finished_spans())


async def test_query_embedding_is_a_span_inside_the_search_rpc_trace(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    spans = {
        s.name: s
        for s in await _traced_searches(settings, embedder, search("t", "event loop", SEMANTIC))
    }
    embedding = spans["embeddings sentence-transformers/all-MiniLM-L6-v2"]
    rpc = spans["/quarry.searchtool.v1.SearchToolService/Search"]
    assert embedding.attributes is not None
    assert embedding.attributes["gen_ai.operation.name"] == "embeddings"
    assert embedding.context.trace_id == rpc.context.trace_id
    assert embedding.parent is not None
    assert embedding.parent.span_id == rpc.context.span_id


async def test_a_query_searched_again_is_not_embedded_and_its_rpc_span_says_so(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    spans = await _traced_searches(
        settings,
        embedder,
        search("t", "event loop", HYBRID),
        search("t", "event loop", HYBRID, offset=1),
    )
    names = [s.name for s in spans]
    rpcs = [s for s in spans if s.name.endswith("/Search")]
    assert names.count("embeddings sentence-transformers/all-MiniLM-L6-v2") == 1
    assert [(s.attributes or {}).get("quarry.search.query_vectors_kept") for s in rpcs] == [0, 1]


class _QueryEmbedderDown:
    """Embeds documents with the real model; every short request (a query) fails or hangs."""

    def __init__(
        self, inner: Embedder, *, hang: bool = False, retry_after_s: float | None = 2
    ) -> None:
        self._inner = inner
        self._hang = hang
        self._retry_after_s = retry_after_s
        self.cancelled = 0
        self.started = 0
        self.running = 0
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.tokenizer = inner.tokenizer
        self.scripts = inner.scripts

    async def embed(self, texts: Any) -> Any:
        if len(texts) > 1 or texts[0] != "needle":
            return await self._inner.embed(texts)
        if not self._hang:
            raise Unavailable("embedding endpoint down", retry_after_s=self._retry_after_s)
        self.started += 1
        self.running += 1
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        raise AssertionError("not cancelled")

    def close(self) -> None:
        pass


async def _server_with(settings: SearchToolSettings, embedder: Any) -> Any:
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    return server


async def test_a_failing_query_embedding_is_unavailable_and_the_keyword_search_still_works(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    server = await _server_with(settings, _QueryEmbedderDown(embedder))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            await stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
            )
            await fails(stub.Search(search("docs", "needle", HYBRID)), grpc.StatusCode.UNAVAILABLE)
            await fails(
                stub.Search(search("docs", "needle", SEMANTIC)), grpc.StatusCode.UNAVAILABLE
            )
            keyword = await stub.Search(search("docs", "needle", KEYWORD))
            assert keyword.total_count == 0
    finally:
        await server.stop(0)


@pytest.mark.parametrize(("retry_after_s", "expected_s"), [(2, 2), (None, DEFAULT_RETRY_AFTER_S)])
async def test_an_unavailable_search_tells_the_caller_when_to_retry(
    settings: SearchToolSettings,
    embedder: Embedder,
    retry_after_s: float | None,
    expected_s: float,
) -> None:
    server = await _server_with(settings, _QueryEmbedderDown(embedder, retry_after_s=retry_after_s))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            await stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
            )
            details = await fails(
                stub.Search(search("docs", "needle", SEMANTIC)), grpc.StatusCode.UNAVAILABLE
            )
            assert details.retry_after_s == pytest.approx(expected_s)
    finally:
        await server.stop(0)


@pytest.mark.parametrize("schema", ["cold", "cached"])
async def test_an_invalid_filter_is_refused_before_the_query_is_embedded(
    settings: SearchToolSettings, embedder: Embedder, schema: str
) -> None:
    """Cold: the collection is opened to learn its fields; cached: its fields are known. Either
    way the filter is refused without waiting for (or starting) the query embedding."""
    hanging = _QueryEmbedderDown(embedder, hang=True)
    server = await _server_with(settings, hanging)
    async with grpc.aio.insecure_channel(server.address) as channel:
        await search_tool_pb2_grpc.SearchToolServiceStub(channel).UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
        )
    if schema == "cold":
        await server.stop(0)
        server = await _server_with(settings, hanging)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            request = search("docs", "needle", HYBRID)
            request.filter.CopyFrom(
                where([condition("no_such_field", Op.FILTER_OPERATOR_EQUALS, "x")])
            )
            await fails(stub.Search(request, timeout=10), INVALID)
            await asyncio.sleep(0)
            assert (hanging.started, hanging.running) == (0, 0)
    finally:
        await server.stop(0)


class _QueryEmbeddedAfterKeywordSearch:
    """Embeds documents with the real model; a query's embedding finishes only once the
    embedded engine's keyword query for it has started (or fails after 10 s)."""

    def __init__(self, inner: Embedder, keyword_started: asyncio.Event) -> None:
        self._inner = inner
        self._keyword_started = keyword_started
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.tokenizer = inner.tokenizer
        self.scripts = inner.scripts

    async def embed(self, texts: Any) -> Any:
        if len(texts) == 1:
            await asyncio.wait_for(self._keyword_started.wait(), timeout=10)
        return await self._inner.embed(texts)

    def close(self) -> None:
        pass


async def test_a_hybrid_search_runs_its_keyword_query_while_the_query_is_embedded(
    settings: SearchToolSettings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyword_started = asyncio.Event()
    keyword_candidates = retrieval.keyword_candidates

    async def noting_start(*args: Any, **kwargs: Any) -> Any:
        keyword_started.set()
        return await keyword_candidates(*args, **kwargs)

    monkeypatch.setattr(lancedb_search, "keyword_candidates", noting_start)
    server = await _server_with(
        settings, _QueryEmbeddedAfterKeywordSearch(embedder, keyword_started)
    )
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            await stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=DOCS)
            )
            hybrid = await stub.Search(search("docs", "bake the bread", HYBRID))
            keyword = await stub.Search(search("docs", "bake the bread", KEYWORD))
    finally:
        await server.stop(0)
    assert keyword.results[0].chunk.document_id == "recipe-bread"
    assert hybrid.results[0].chunk.document_id == "recipe-bread"
