"""The embedded LanceDB engine: filters evaluated by the engine, fusion, paging, persistence."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.search_tool.documents import Breadcrumb, Document
from services.search_tool.engine.base import (
    CollectionSpec,
    EngineQuery,
    Fusion,
    FusionMethod,
    Strategy,
)
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.indexes import (
    FTS_INDEX,
    IndexPolicy,
    build_vector_index,
    probes_for,
    vector_index_rows,
    vector_partitions,
)
from services.search_tool.engine.lancedb.retrieval import (
    FetchedRows,
    best_cosines,
    cosines_at,
    keyword_candidates,
)
from services.search_tool.filters import (
    FilterExpression,
    Operator,
    RawCondition,
    RawFilter,
    combine_filters,
    validate_filter,
)
from tests.search_tool.engine_fixtures import DIMENSIONS, record, records, vector_for
from tests.search_tool.filter_cases import CASES, FIXTURE, FilterCase

SPEC = CollectionSpec("test-model", DIMENSIONS)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[LanceDBEngine]:
    opened = await LanceDBEngine.open(tmp_path / "db")
    await opened.ensure_collection("fixture", SPEC)
    await opened.upsert("fixture", records(FIXTURE))
    yield opened
    await opened.close()


def _semantic(vector_key: str = "probe", **overrides: object) -> EngineQuery:
    query = EngineQuery(
        strategy=Strategy.SEMANTIC,
        keyword_text="",
        vectors=np.stack([vector_for(vector_key)]),
        limit=200,
    )
    return replace(query, **overrides)  # type: ignore[arg-type]


async def _filter_of(engine: LanceDBEngine, *groups: list[RawCondition]) -> FilterExpression:
    return validate_filter(
        RawFilter(tuple(tuple(g) for g in groups)), await engine.fields("fixture")
    )


async def _matching(engine: LanceDBEngine, expression: FilterExpression) -> set[str]:
    page = await engine.search("fixture", _semantic(filter=expression))
    return {hit.chunk.document_id for hit in page.hits}


@pytest.fixture(params=["scanned", "indexed"])
async def filtering_engine(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[LanceDBEngine]:
    """The fixture collection with its rows outside the scalar indexes, or all inside them."""
    opened = await LanceDBEngine.open(tmp_path / "db")
    await opened.ensure_collection("fixture", SPEC)
    await opened.upsert("fixture", records(FIXTURE))
    if request.param == "indexed":
        await opened.refresh("fixture")
    yield opened
    await opened.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_filter_case_matches_exactly_the_expected_documents(
    filtering_engine: LanceDBEngine, case: FilterCase
) -> None:
    engine = filtering_engine
    expression = await _filter_of(engine, [RawCondition(case.field, case.operator, case.value)])
    assert await _matching(engine, expression) == set(case.expected)
    page = await engine.search("fixture", _semantic(filter=expression))
    assert page.total_count == len(case.expected)
    keyword = await engine.search(
        "fixture",
        replace(_semantic(filter=expression), strategy=Strategy.HYBRID, keyword_text="the"),
    )
    assert {hit.chunk.document_id for hit in keyword.hits} == set(case.expected)


async def test_refresh_indexes_the_id_and_every_filterable_column(
    engine: LanceDBEngine, tmp_path: Path
) -> None:
    await engine.refresh("fixture")
    table = await (await lancedb.connect_async(str(tmp_path / "db"))).open_table("fixture")
    indexed = {
        column: index.num_unindexed_rows
        for index in await table.list_indices()
        for column in index.columns
    }
    wanted = {"id", "document_id", "source", "entity_type", "created_at", "updated_at"}
    wanted |= {
        f"meta__{field[len('metadata.') :]}"
        for field in await engine.fields("fixture")
        if field.startswith("metadata.")
    }
    assert {column: indexed.get(column) for column in wanted} == dict.fromkeys(wanted, 0)


async def test_filter_groups_are_or_of_and(engine: LanceDBEngine) -> None:
    expression = await _filter_of(
        engine,
        [
            RawCondition("source", Operator.EQUALS, "confluence"),
            RawCondition("metadata.draft", Operator.EQUALS, True),
        ],
        [RawCondition("entity_type", Operator.EQUALS, "issue")],
    )
    assert await _matching(engine, expression) == {"beta", "gamma"}


async def test_caller_and_model_filters_combine_so_the_model_only_narrows(
    engine: LanceDBEngine,
) -> None:
    caller = await _filter_of(engine, [RawCondition("source", Operator.EQUALS, "confluence")])
    model = await _filter_of(
        engine,
        [RawCondition("metadata.year", Operator.EQUALS, 2024)],
        [RawCondition("source", Operator.EQUALS, "github")],
    )
    assert await _matching(engine, combine_filters(caller, model, max_groups=32)) == {"beta"}
    assert await _matching(engine, combine_filters(caller, FilterExpression(), max_groups=32)) == {
        "alpha",
        "beta",
    }


async def test_keyword_search_ranks_by_bm25_over_title_and_text(engine: LanceDBEngine) -> None:
    query = EngineQuery(Strategy.KEYWORD, "release wheels", np.zeros((0, DIMENSIONS), np.float32))
    page = await engine.search("fixture", query)
    assert [h.chunk.id for h in page.hits] == ["gamma__chunk_0"]
    assert page.hits[0].keyword_score is not None
    assert page.hits[0].keyword_score > 0
    assert page.hits[0].dense_score is None
    assert page.total_count == 1


async def test_keyword_query_syntax_is_treated_as_plain_words(engine: LanceDBEngine) -> None:
    for text in ['"unbalanced AND (release OR', "NOT release", "release:*", '"release wheels"']:
        query = EngineQuery(Strategy.KEYWORD, text, np.zeros((0, DIMENSIONS), np.float32))
        page = await engine.search("fixture", query)
        assert "gamma__chunk_0" in [h.chunk.id for h in page.hits]


async def test_semantic_search_orders_by_cosine_similarity(engine: LanceDBEngine) -> None:
    page = await engine.search("fixture", _semantic("delta__chunk_0", limit=2))
    assert page.hits[0].chunk.id == "delta__chunk_0"
    assert page.hits[0].dense_score == pytest.approx(1.0, abs=1e-5)
    assert page.hits[0].score >= page.hits[1].score
    assert page.total_count == len(FIXTURE)


async def test_hybrid_rrf_rewards_chunks_both_sides_found(engine: LanceDBEngine) -> None:
    query = EngineQuery(
        Strategy.HYBRID, "onboarding handbook", np.stack([vector_for("delta__chunk_0")]), limit=5
    )
    page = await engine.search("fixture", query)
    top = page.hits[0]
    assert top.chunk.id == "delta__chunk_0"
    assert top.dense_score is not None
    assert top.keyword_score is not None
    assert top.score == pytest.approx(2 / 61)
    assert all(h.score <= top.score for h in page.hits)


async def test_hybrid_linear_blends_cosine_and_normalised_bm25(engine: LanceDBEngine) -> None:
    query = EngineQuery(
        Strategy.HYBRID,
        "onboarding handbook",
        np.stack([vector_for("delta__chunk_0")]),
        limit=5,
        fusion=Fusion(FusionMethod.LINEAR, alpha=0.25),
    )
    page = await engine.search("fixture", query)
    top = page.hits[0]
    assert top.chunk.id == "delta__chunk_0"
    assert top.dense_score is not None
    assert top.score == pytest.approx(0.25 * top.dense_score + 0.75 * 1.0, abs=1e-5)


async def test_variations_add_dense_lists_that_are_fused(engine: LanceDBEngine) -> None:
    vectors = np.stack([vector_for("alpha__chunk_0"), vector_for("epsilon__chunk_0")])
    query = EngineQuery(Strategy.SEMANTIC, "", vectors, limit=5)
    page = await engine.search("fixture", query)
    exact = {h.chunk.id: h for h in page.hits if h.dense_score == pytest.approx(1.0, abs=1e-5)}
    assert set(exact) == {"alpha__chunk_0", "epsilon__chunk_0"}
    first_in_one_list = 1 / 61
    assert all(h.score > first_in_one_list for h in exact.values())


async def test_offset_and_limit_page_through_one_ranking(engine: LanceDBEngine) -> None:
    full = await engine.search("fixture", _semantic(limit=5))
    first = await engine.search("fixture", _semantic(limit=2))
    second = await engine.search("fixture", _semantic(limit=2, offset=2))
    ids = [h.chunk.id for h in full.hits]
    assert [h.chunk.id for h in first.hits] == ids[:2]
    assert [h.chunk.id for h in second.hits] == ids[2:4]
    assert second.total_count == len(FIXTURE)


async def test_chunk_fields_round_trip(engine: LanceDBEngine) -> None:
    expression = await _filter_of(engine, [RawCondition("document_id", Operator.EQUALS, "alpha")])
    page = await engine.search("fixture", _semantic(filter=expression))
    chunk = page.hits[0].chunk
    original = FIXTURE[0]
    assert chunk.title == original.title
    assert chunk.text == original.text
    assert chunk.created_at == original.created_at
    assert chunk.updated_at == original.updated_at
    assert chunk.breadcrumbs == original.breadcrumbs
    assert dict(chunk.metadata) == dict(original.metadata)


async def test_rows_written_after_the_bm25_index_are_found(engine: LanceDBEngine) -> None:
    late = Document(id="late", text="zebra crossing instructions", source="web")
    await engine.upsert("fixture", [record(late)])
    query = EngineQuery(Strategy.KEYWORD, "zebra", np.zeros((0, DIMENSIONS), np.float32))
    page = await engine.search("fixture", query)
    assert [h.chunk.id for h in page.hits] == ["late__chunk_0"]


async def test_bm25_index_is_rebuilt_once_enough_rows_are_unindexed(tmp_path: Path) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db", policy=IndexPolicy(fts_refresh_rows=3))
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", records(FIXTURE))
    table = await engine._table("c")
    stats = await table.index_stats("search_text_bm25")
    assert stats.num_unindexed_rows == 0
    assert stats.num_indexed_rows == len(FIXTURE)
    await engine.close()


async def test_selective_filter_keeps_full_recall_among_many_rows(tmp_path: Path) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db")
    await engine.ensure_collection("c", SPEC)
    many = [Document(id=f"d{i}", text=f"filler {i}", source="bulk") for i in range(2000)]
    rare = Document(id="rare", text="the only one", source="rare")
    await engine.upsert("c", [*records(many), record(rare)])
    fields = await engine.fields("c")
    expression = validate_filter(
        RawFilter(((RawCondition("source", Operator.EQUALS, "rare"),),)), fields
    )
    page = await engine.search("c", _semantic("far away", filter=expression, limit=10))
    assert [h.chunk.id for h in page.hits] == ["rare__chunk_0"]
    await engine.close()


async def test_upsert_replaces_a_chunk_with_the_same_id(engine: LanceDBEngine) -> None:
    changed = replace(FIXTURE[2], text="Completely rewritten body about giraffes")
    await engine.upsert("fixture", [record(changed)])
    query = EngineQuery(Strategy.KEYWORD, "giraffes", np.zeros((0, DIMENSIONS), np.float32))
    page = await engine.search("fixture", query)
    assert [h.chunk.text for h in page.hits] == [changed.text]
    stats = await engine.describe("fixture")
    assert stats.chunk_count == len(FIXTURE)


async def test_stored_versions_report_chunk_ids_and_hash(engine: LanceDBEngine) -> None:
    await engine.upsert("fixture", [record(FIXTURE[0], 1, text="second chunk")])
    versions = await engine.stored_versions("fixture", ["alpha", "missing"])
    assert set(versions) == {"alpha"}
    assert versions["alpha"].chunk_ids == {"alpha__chunk_0", "alpha__chunk_1"}
    assert versions["alpha"].content_hash == "h-alpha"


async def test_delete_by_ids_and_by_filter(engine: LanceDBEngine) -> None:
    assert await engine.delete_chunks("fixture", ["alpha__chunk_0", "nope__chunk_0"]) == 1
    expression = await _filter_of(engine, [RawCondition("source", Operator.EQUALS, "github")])
    deleted = await engine.delete_matching("fixture", document_ids=["delta"], where=expression)
    assert deleted == 2
    assert await _matching(engine, FilterExpression()) == {"beta", "epsilon"}


async def test_metadata_key_keeps_the_type_it_was_first_given(engine: LanceDBEngine) -> None:
    clash = Document(id="clash", text="x", metadata={"year": "twenty"})
    with pytest.raises(InvalidArgument) as caught:
        await engine.upsert("fixture", [record(clash)])
    assert caught.value.violations[0].field == "metadata.year"
    widened = Document(id="wide", text="x", metadata={"score": 7, "pages": 3})
    await engine.upsert("fixture", [record(widened)])
    fields = await engine.fields("fixture")
    assert fields["metadata.score"] == "double"
    assert fields["metadata.pages"] == "integer"


async def test_describe_counts_documents_per_source_and_the_date_range(
    engine: LanceDBEngine,
) -> None:
    stats = await engine.describe("fixture")
    assert stats.document_count == len(FIXTURE)
    assert stats.sources == {"confluence": 2, "github": 1, "gdrive": 1, "slack": 1}
    assert stats.entity_types["page"] == 2
    assert stats.earliest_created_at == FIXTURE[0].created_at
    assert stats.latest_created_at == FIXTURE[3].created_at
    assert (stats.embedding_model, stats.embedding_dimensions) == ("test-model", DIMENSIONS)


async def test_everything_survives_closing_and_reopening(tmp_path: Path) -> None:
    first = await LanceDBEngine.open(tmp_path / "db")
    await first.ensure_collection("kept", SPEC)
    await first.upsert("kept", records(FIXTURE))
    await first.close()
    second = await LanceDBEngine.open(tmp_path / "db")
    assert await second.list_collections() == ["kept"]
    stats = await second.describe("kept")
    assert stats.chunk_count == len(FIXTURE)
    assert stats.fields["metadata.year"] == "integer"
    query = EngineQuery(Strategy.KEYWORD, "handbook", np.zeros((0, DIMENSIONS), np.float32))
    assert [h.chunk.id for h in (await second.search("kept", query)).hits] == ["delta__chunk_0"]
    await second.close()


async def test_unknown_collection_is_not_found(engine: LanceDBEngine) -> None:
    with pytest.raises(NotFound):
        await engine.search("missing", _semantic())
    with pytest.raises(NotFound):
        await engine.describe("missing")
    with pytest.raises(NotFound):
        await engine.drop_collection("missing")


async def test_vectors_of_another_model_are_refused(engine: LanceDBEngine) -> None:
    with pytest.raises(FailedPrecondition):
        await engine.ensure_collection("fixture", CollectionSpec("test-model", DIMENSIONS + 1))
    with pytest.raises(FailedPrecondition):
        await engine.ensure_collection("fixture", CollectionSpec("other-model", DIMENSIONS))
    await engine.ensure_collection("fixture", SPEC)


async def test_drop_collection_removes_it(engine: LanceDBEngine) -> None:
    await engine.drop_collection("fixture")
    assert await engine.list_collections() == []


async def test_large_collections_get_a_vector_index_and_selective_filters_stay_exact(
    tmp_path: Path,
) -> None:
    policy = IndexPolicy(vector_index_min_rows=400, exact_search_max_rows=50, nprobes=2)
    engine = await LanceDBEngine.open(tmp_path / "db", policy=policy)
    await engine.ensure_collection("c", SPEC)
    bulk = [Document(id=f"d{i}", text=f"filler {i}", source=f"s{i % 4}") for i in range(600)]
    rare = Document(id="rare", text="the only one", source="rare")
    await engine.upsert("c", [*records(bulk), record(rare)])
    await engine.vector_index_settled("c")
    table = await engine._table("c")
    assert await vector_index_rows(table) == 601

    broad = _semantic("d123__chunk_0", limit=3)
    assert (await engine.search("c", broad)).hits[0].chunk.id == "d123__chunk_0"
    fields = await engine.fields("c")
    selective = validate_filter(
        RawFilter(((RawCondition("source", Operator.EQUALS, "rare"),),)), fields
    )
    page = await engine.search("c", _semantic("far away", filter=selective, limit=10))
    assert [h.chunk.id for h in page.hits] == ["rare__chunk_0"]
    assert page.total_count == 1
    await engine.close()


async def test_an_emptied_collection_still_describes_and_searches(engine: LanceDBEngine) -> None:
    await engine.delete_matching("fixture", document_ids=[d.id for d in FIXTURE], where=None)
    stats = await engine.describe("fixture")
    assert (stats.document_count, stats.chunk_count, dict(stats.sources)) == (0, 0, {})
    assert stats.earliest_created_at is None
    hybrid = EngineQuery(Strategy.HYBRID, "release", np.stack([vector_for("x")]))
    page = await engine.search("fixture", hybrid)
    assert (page.hits, page.total_count) == ([], 0)


async def test_a_search_over_its_time_budget_is_deadline_exceeded(engine: LanceDBEngine) -> None:
    with pytest.raises(DeadlineExceeded):
        await engine.search("fixture", _semantic(timeout_s=1e-6))


async def test_describe_follows_writes_and_a_recreated_collection(engine: LanceDBEngine) -> None:
    assert (await engine.describe("fixture")).document_count == len(FIXTURE)
    await engine.upsert("fixture", [record(Document(id="more", text="x", source="new"))])
    assert (await engine.describe("fixture")).sources["new"] == 1
    await engine.drop_collection("fixture")
    await engine.ensure_collection("fixture", SPEC)
    await engine.upsert("fixture", [record(FIXTURE[0])])
    assert (await engine.describe("fixture")).document_count == 1


async def test_a_small_collection_is_keyword_indexed_after_its_first_ingest(
    tmp_path: Path,
) -> None:
    opened = await LanceDBEngine.open(tmp_path / "small")
    try:
        await opened.ensure_collection("small", SPEC)
        documents = [
            replace(FIXTURE[0], id=f"doc-{i}", text=f"{FIXTURE[0].text} number {i}")
            for i in range(600)
        ]
        await opened.upsert("small", records(documents))
        table = await (await lancedb.connect_async(str(tmp_path / "small"))).open_table("small")
        stats = await table.index_stats(FTS_INDEX)
        assert stats is not None
        assert stats.num_unindexed_rows == 0
        assert stats.num_indexed_rows == 600
    finally:
        await opened.close()


def test_vector_index_partitions_grow_with_the_square_root_of_the_rows() -> None:
    assert vector_partitions(100) == 16
    assert vector_partitions(100_000) == 316
    assert vector_partitions(10**9) == 4096
    policy = IndexPolicy(nprobes=20, probe_fraction=0.1)
    assert probes_for(100_000, policy) == 32
    assert probes_for(50_000, policy) == 23
    assert probes_for(100, IndexPolicy(nprobes=20)) == 16  # never more than there are


async def _fragments(engine: LanceDBEngine, name: str) -> int:
    table = await engine._table(name)
    return int((await table.stats())["fragment_stats"]["num_fragments"])


async def test_many_small_writes_are_compacted_into_few_fragments_without_losing_rows(
    tmp_path: Path,
) -> None:
    policy = IndexPolicy(max_fragments=5, fts_min_refresh_rows=10_000, fts_refresh_rows=10_000)
    engine = await LanceDBEngine.open(tmp_path / "db", policy=policy)
    await engine.ensure_collection("c", SPEC)
    written = []
    for i in range(12):
        document = Document(id=f"d{i}", text=f"note number {i} about walruses", source="s")
        written.append(document)
        await engine.upsert("c", [record(document)])
        assert await _fragments(engine, "c") < 5
    page = await engine.search(
        "c",
        EngineQuery(Strategy.KEYWORD, "walruses", np.zeros((0, DIMENSIONS), np.float32), limit=50),
    )
    assert {h.chunk.document_id for h in page.hits} == {d.id for d in written}
    assert (await engine.describe("c")).chunk_count == 12
    await engine.close()


async def test_a_page_is_complete_when_rows_moved_between_ranking_and_fetching(
    tmp_path: Path,
) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db")
    await engine.ensure_collection("c", SPEC)
    for document in FIXTURE:  # one fragment per document
        await engine.upsert("c", [record(document)])
    table = await engine._table("c")
    original_take = table.take_row_ids
    takes: list[list[int]] = []

    def take_after_a_compaction_once(row_ids: list[int]) -> object:
        takes.append(row_ids)
        if len(takes) > 1:
            return original_take(row_ids)
        # the addresses the ranking returned point into fragments a compaction replaced
        return original_take([(10_000 << 32) | (r & 0xFFFFFFFF) for r in row_ids])

    table.take_row_ids = take_after_a_compaction_once
    hybrid = EngineQuery(Strategy.HYBRID, "release", np.stack([vector_for("x")]), limit=5)
    page = await engine.search("c", hybrid)
    table.take_row_ids = original_take
    expected = await engine.search("c", hybrid)
    assert len(takes) == 2  # ranked again after the first fetch came back short
    assert [h.chunk.id for h in page.hits] == [h.chunk.id for h in expected.hits]
    assert [h.chunk.text for h in page.hits] == [h.chunk.text for h in expected.hits]
    assert len(page.hits) == 5
    await engine.close()


async def test_searches_during_updates_and_compactions_return_whole_pages_of_distinct_chunks(
    tmp_path: Path,
) -> None:
    engine = await LanceDBEngine.open(
        tmp_path / "db", policy=IndexPolicy(max_fragments=3, fts_min_refresh_rows=5)
    )
    await engine.ensure_collection("c", SPEC)
    documents = [
        Document(id=f"d{i}", text=f"release notes part {i}", source="s") for i in range(20)
    ]
    await engine.upsert("c", records(documents))

    async def rewrite(round_number: int) -> None:
        for document in documents[round_number::4]:
            changed = replace(document, text=f"{document.text} revised {round_number}")
            await engine.upsert("c", [record(changed)])

    hybrid = EngineQuery(Strategy.HYBRID, "release notes", np.stack([vector_for("x")]), limit=8)
    writing = asyncio.gather(*(rewrite(r) for r in range(4)))
    pages = await asyncio.gather(*(engine.search("c", hybrid) for _ in range(12)))
    await writing
    for page in pages:
        ids = [h.chunk.id for h in page.hits]
        assert len(ids) == len(set(ids)) == 8
    assert (await engine.describe("c")).chunk_count == 20
    await engine.close()


async def _ivf_partitions(engine: LanceDBEngine, name: str) -> int:
    table = await engine._table(name)
    plan = await (
        table.query()
        .nearest_to(vector_for("probe"))
        .distance_type("cosine")
        .select(["_distance"])
        .nprobes(100_000)
        .limit(1)
        .analyze_plan()
    )
    return int(re.findall(r"partitions_ranked=(\d+)", plan)[0])


async def test_the_vector_index_keeps_its_partitions_through_compactions(tmp_path: Path) -> None:
    # LanceDB's optimize() alone retrains IVF-Flat into 2 partitions: a full scan per query
    policy = IndexPolicy(vector_index_min_rows=900, max_fragments=3, fts_min_refresh_rows=10_000)
    engine = await LanceDBEngine.open(tmp_path / "db", policy=policy)
    await engine.ensure_collection("c", SPEC)
    for batch in range(6):
        documents = [
            Document(id=f"b{batch}-{i}", text=f"filler {batch} {i}", source="s") for i in range(200)
        ]
        await engine.upsert("c", records(documents))
    await engine.vector_index_settled("c")
    assert await _fragments(engine, "c") < 3
    assert await _ivf_partitions(engine, "c") == vector_partitions(1200)
    page = await engine.search("c", _semantic("b5-7__chunk_0", limit=1))
    assert page.hits[0].chunk.id == "b5-7__chunk_0"
    await engine.close()


async def test_records_known_absent_are_appended_and_later_upserts_replace_them(
    engine: LanceDBEngine,
) -> None:
    fresh = [Document(id=f"new{i}", text=f"brand new {i}", source="s") for i in range(3)]
    stored = await engine.upsert(
        "fixture", records(fresh), absent={f"new{i}__chunk_0" for i in range(3)}
    )
    assert stored == 3
    revised = [replace(d, text=f"{d.text} revised") for d in fresh]
    await engine.upsert("fixture", [*records(revised), record(FIXTURE[0])])
    stats = await engine.describe("fixture")
    assert stats.chunk_count == len(FIXTURE) + 3
    page = await engine.search(
        "fixture",
        EngineQuery(Strategy.KEYWORD, "revised", np.zeros((0, DIMENSIONS), np.float32), limit=20),
    )
    assert sorted(h.chunk.text for h in page.hits) == sorted(d.text for d in revised)


def _bulk(batch: int, count: int = 200) -> list[Document]:
    return [
        Document(id=f"b{batch}-{i}", text=f"filler {batch} {i}", source="s") for i in range(count)
    ]


async def test_upserts_return_while_the_vector_index_is_built_and_searches_stay_correct(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    original_build = build_vector_index

    async def slow_build(table: Any, rows: int) -> None:
        started.set()
        await release.wait()
        await original_build(table, rows)

    policy = IndexPolicy(vector_index_min_rows=500, fts_min_refresh_rows=10_000)
    engine = await LanceDBEngine.open(
        tmp_path / "db", policy=policy, vector_index_builder=slow_build
    )
    await engine.ensure_collection("c", SPEC)
    # crosses the threshold: a build starts, and the write returns without waiting for it
    await asyncio.wait_for(engine.upsert("c", records(_bulk(0, 600))), timeout=5)
    await asyncio.wait_for(started.wait(), timeout=5)

    await asyncio.wait_for(engine.upsert("c", records(_bulk(1, 50))), timeout=5)
    page = await engine.search("c", _semantic("b1-7__chunk_0", limit=1))
    assert page.hits[0].chunk.id == "b1-7__chunk_0"
    assert await vector_index_rows(await engine._table("c")) is None

    release.set()
    await engine.vector_index_settled("c")
    assert await vector_index_rows(await engine._table("c")) == 650
    page = await engine.search("c", _semantic("b0-3__chunk_0", limit=1))
    assert page.hits[0].chunk.id == "b0-3__chunk_0"
    await engine.close()


async def test_a_vector_index_build_cut_short_by_a_restart_runs_again_after_it(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    async def never_finishing_build(table: Any, rows: int) -> None:
        started.set()
        await asyncio.sleep(3600)

    policy = IndexPolicy(vector_index_min_rows=500)
    engine = await LanceDBEngine.open(
        tmp_path / "db", policy=policy, vector_index_builder=never_finishing_build
    )
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", records(_bulk(0, 600)))
    await asyncio.wait_for(started.wait(), timeout=5)
    await asyncio.wait_for(engine.close(), timeout=5)  # the build is stopped, not waited for

    reopened = await LanceDBEngine.open(tmp_path / "db", policy=policy)
    assert await vector_index_rows(await reopened._table("c")) is None
    await reopened.vector_index_settled("c")
    assert await vector_index_rows(await reopened._table("c")) == 600
    assert await _ivf_partitions(reopened, "c") == vector_partitions(600)
    await reopened.close()
    assert not list((tmp_path / "db" / ".quarry").iterdir())  # nothing left to resume


async def test_writes_racing_a_background_vector_index_build_all_land(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = IndexPolicy(vector_index_min_rows=500, max_fragments=4, fts_min_refresh_rows=100)
    engine = await LanceDBEngine.open(tmp_path / "db", policy=policy)
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", records(_bulk(0, 600)))  # a build starts in the background
    for batch in range(1, 8):  # new rows, rewrites of built rows, compactions, more builds
        revised = [replace(d, text=f"{d.text} v{batch}") for d in _bulk(0, 600)[batch::50]]
        await engine.upsert("c", records([*_bulk(batch, 30), *revised]))
    await engine.vector_index_settled("c")
    assert "vector index build failed" not in caplog.text
    assert (await engine.describe("c")).chunk_count == 600 + 7 * 30
    assert await vector_index_rows(await engine._table("c")) == 810
    page = await engine.search("c", _semantic("b7-5__chunk_0", limit=1))
    assert page.hits[0].chunk.id == "b7-5__chunk_0"
    await engine.close()


async def test_keyword_total_counts_every_match_up_to_the_cap(tmp_path: Path) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db", keyword_count_cap=12)
    await engine.ensure_collection("c", SPEC)
    walruses = [Document(id=f"w{i}", text=f"walrus sighting {i}", source="s") for i in range(20)]
    seals = [Document(id=f"s{i}", text=f"seal sighting {i}", source="s") for i in range(3)]
    await engine.upsert("c", records([*walruses, *seals]))
    empty = np.zeros((0, DIMENSIONS), np.float32)

    many = await engine.search("c", EngineQuery(Strategy.KEYWORD, "walrus", empty, limit=5))
    few = await engine.search("c", EngineQuery(Strategy.KEYWORD, "seal", empty, limit=5))
    second_page = await engine.search(
        "c", EngineQuery(Strategy.KEYWORD, "walrus", empty, limit=5, offset=5)
    )

    assert (len(many.hits), many.total_count) == (5, 12)
    assert (len(few.hits), few.total_count) == (3, 3)
    assert {h.chunk.id for h in second_page.hits}.isdisjoint({h.chunk.id for h in many.hits})
    await engine.close()


async def test_chunk_json_keeps_instants_to_the_microsecond_and_column_types(
    engine: LanceDBEngine,
) -> None:
    tokyo = timezone(timedelta(hours=9))
    document = Document(
        id="instant",
        text="an instant in Tokyo",
        created_at=datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=tokyo),
        updated_at=datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC),
        breadcrumbs=(Breadcrumb("b1", 'Ünïcode "quoted" name', "space"),),
        metadata={"year": 7, "score": 3, "draft": True, "team": "ops"},
    )
    await engine.upsert("fixture", [record(document)])
    expression = await _filter_of(engine, [RawCondition("document_id", Operator.EQUALS, "instant")])
    [hit] = (await engine.search("fixture", _semantic(filter=expression))).hits
    assert hit.chunk.created_at == document.created_at
    assert hit.chunk.updated_at == document.updated_at
    assert hit.chunk.breadcrumbs == document.breadcrumbs
    # `score` is a double key in the fixture collection: the integer comes back as a float
    assert hit.chunk.metadata == {"year": 7, "score": 3.0, "draft": True, "team": "ops"}
    assert isinstance(hit.chunk.metadata["score"], float)
    assert isinstance(hit.chunk.metadata["year"], int)


async def test_a_metadata_key_added_after_searches_is_filterable_and_returned(
    tmp_path: Path,
) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db")
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", records(FIXTURE))
    await engine.search("c", _semantic())  # the schema is now known to the engine
    late = Document(id="late", text="late arrival", metadata={"ticket": "QRY-7"})
    await engine.upsert("c", [record(late)])
    fields = await engine.fields("c")
    expression = validate_filter(
        RawFilter(((RawCondition("metadata.ticket", Operator.EQUALS, "QRY-7"),),)), fields
    )
    page = await engine.search("c", _semantic(filter=expression))
    await engine.close()
    assert [h.chunk.id for h in page.hits] == ["late__chunk_0"]
    assert page.hits[0].chunk.metadata["ticket"] == "QRY-7"


async def test_hybrid_scores_each_candidate_on_the_side_that_missed_it(tmp_path: Path) -> None:
    """A keyword-only candidate gets its exact cosine. A dense-only one of a keyword list cut at
    what was asked is given that list's lowest BM25 for the fusion and reports none; when the
    list holds every match, a dense-only one holds no query word and reports 0."""
    engine = await LanceDBEngine.open(tmp_path / "db", hybrid_candidates=1)
    try:
        await engine.ensure_collection("fixture", SPEC)
        await engine.upsert("fixture", records(FIXTURE))
        vectors = np.stack([vector_for("alpha__chunk_0")])
        linear = Fusion(FusionMethod.LINEAR, alpha=0.7)
        hybrid = EngineQuery(Strategy.HYBRID, "release checklist", vectors, limit=1, fusion=linear)
        scored, chunks = await engine.scored_candidates("fixture", hybrid)
        assert scored.completion is not None
        assert scored.completion.dense, "the keyword side found a chunk the dense side missed"
        semantic = await engine.search("fixture", _semantic("alpha__chunk_0"))
        cosine = {h.chunk.id: h.dense_score for h in semantic.hits}
        for address, value in scored.completion.dense.items():
            assert value == pytest.approx(cosine[chunks[address].id], abs=1e-5)
        assert not scored.completion.all_keyword_matches  # one asked, one found
        keyword_ids = {chunks[c.id].id for c in scored.keyword or ()}
        deeper = replace(hybrid, limit=4)  # 4 asked of each side: fewer words match
        page = await engine.search("fixture", deeper)
        cut = await engine.search("fixture", hybrid)
        # alpha (cosine 1, no query word) is given the one keyword candidate's BM25: it wins
        assert keyword_ids == {"gamma__chunk_0"}
        top = cut.hits[0]
        assert (top.chunk.id, top.keyword_score) == ("alpha__chunk_0", None)
        assert top.score == pytest.approx(0.7 * 1.0 + 0.3 * 1.0)
        assert all(h.dense_score is not None and h.keyword_score is not None for h in page.hits)
        assert any(h.keyword_score == 0.0 for h in page.hits), "a dense-only hit without a word"
    finally:
        await engine.close()


async def test_cosines_of_the_vectors_a_keyword_query_read_equal_those_of_a_take(
    engine: LanceDBEngine,
) -> None:
    table = await engine._table("fixture")
    rows = FetchedRows()
    found, _ = await keyword_candidates(table, "release notes", None, 100, None, rows=rows)
    addresses = sorted(int(c.id) for c in found)
    query_vectors = np.stack([vector_for("x"), vector_for("release")])
    read = best_cosines(addresses, np.stack([rows.vectors[a] for a in addresses]), query_vectors)
    taken = await cosines_at(table, addresses, query_vectors, None)
    assert len(addresses) > 1
    assert read == taken  # exactly: the fused scores and their ties do not move
    assert set(rows.chunk_json) == set(addresses)


async def test_a_search_takes_only_the_page_chunks_its_ranking_queries_did_not_read(
    engine: LanceDBEngine,
) -> None:
    table = await engine._table("fixture")
    original_take = table.take_row_ids
    taken: list[int] = []

    def recording_take(row_ids: list[int]) -> object:
        taken.extend(row_ids)
        return original_take(row_ids)

    table.take_row_ids = recording_take
    keyword_rows = FetchedRows()
    await keyword_candidates(table, "release", None, 100, None, rows=keyword_rows)
    taken.clear()
    hybrid = EngineQuery(Strategy.HYBRID, "release", np.stack([vector_for("x")]), limit=5)
    hybrid_page = await engine.search("fixture", hybrid)
    hybrid_taken = list(taken)
    taken.clear()
    semantic_page = await engine.search("fixture", _semantic(limit=5))
    table.take_row_ids = original_take
    assert len(hybrid_page.hits) == len(semantic_page.hits) == len(FIXTURE)
    # no vectors are taken for the keyword-only candidates' cosines, and no chunk the keyword
    # query read is taken again; SEMANTIC's ranking read its whole page
    assert keyword_rows.chunk_json
    assert hybrid_taken
    assert not set(hybrid_taken) & set(keyword_rows.chunk_json)
    assert len(hybrid_taken) == len(hybrid_page.hits) - len(keyword_rows.chunk_json)
    assert taken == []


async def test_a_search_while_embedding_in_a_missing_collection_is_not_found_and_never_embeds(
    tmp_path: Path,
) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db")
    embedded: list[str] = []

    async def embedding() -> Any:
        embedded.append("started")
        return np.stack([vector_for("x")])

    pending = embedding()
    query = EngineQuery(Strategy.HYBRID, "release", np.zeros((0, DIMENSIONS), np.float32))
    with pytest.raises(NotFound):
        await engine.search_embedding("missing", query, pending)
    assert embedded == []
    # closed, not left to warn "never awaited"
    assert inspect.getcoroutinestate(pending) == inspect.CORO_CLOSED
    await engine.close()


async def test_a_search_while_embedding_equals_a_search_with_the_vectors_given(
    engine: LanceDBEngine,
) -> None:
    vectors = np.stack([vector_for("x")])

    async def embedding() -> Any:
        return vectors

    hybrid = EngineQuery(Strategy.HYBRID, "release", vectors, limit=5)
    given = await engine.search("fixture", hybrid)
    empty = replace(hybrid, vectors=np.zeros((0, DIMENSIONS), np.float32))
    overlapped = await engine.search_embedding("fixture", empty, embedding())
    assert overlapped == given
