"""Collections held in memory per table version (`engine/lancedb/held.py`): their vectors, BM25
index and chunks; the same pages as LanceDB's (scores to float32), never a stale one, within
their memory bound and a bounded share of the time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.search_tool.documents import Document
from services.search_tool.engine.base import CollectionSpec, EngineQuery, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb import held as held_module
from services.search_tool.engine.lancedb.held import HeldCollections
from services.search_tool.engine.lancedb.indexes import IndexPolicy
from services.search_tool.filters import Operator, RawCondition, RawFilter, validate_filter
from tests.search_tool.engine_fixtures import DIMENSIONS, record, vector_for

SPEC = CollectionSpec("test-model", DIMENSIONS)
DOCUMENTS = [
    Document(id=f"doc{i}", text=f"note {i} about tides and {'rivers' if i % 3 else 'lakes'}")
    for i in range(60)
]


def _query(strategy: Strategy, key: str = "probe", **overrides: Any) -> EngineQuery:
    query = EngineQuery(strategy, "tides rivers", np.stack([vector_for(key)]), limit=10)
    return replace(query, **overrides)


def _page(page: Any) -> list[tuple[str, Any, Any, Any]]:
    """Each hit's chunk and scores, the scores equal to float32 precision (LanceDB's BM25)."""
    return [
        (
            h.chunk.id,
            pytest.approx(h.score, rel=1e-5, abs=1e-6),
            h.dense_score and pytest.approx(h.dense_score, rel=1e-5, abs=1e-6),
            h.keyword_score and pytest.approx(h.keyword_score, rel=1e-5, abs=1e-6),
        )
        for h in page.hits
    ]


async def _opened(path: Path, **options: Any) -> LanceDBEngine:
    """The collection `c`, every row in its BM25 index (LanceDB scores rows written since the
    last build, under a filter, with the statistics of the filter's rows alone)."""
    engine = await LanceDBEngine.open(path, **options)
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", [record(d) for d in DOCUMENTS])
    await engine.refresh("c")
    return engine


@asynccontextmanager
async def _pair(
    path: Path,
    opened: Callable[..., Awaitable[LanceDBEngine]] = _opened,
    *,
    held: dict[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[tuple[LanceDBEngine, LanceDBEngine]]:
    """The collection on an engine that never holds it and on one that does (with `held`'s
    options besides)."""
    scanning = await opened(path / "scan", vectors_in_memory=0, **options)
    holding = await opened(path / "held", **options, **(held or {}))
    try:
        yield scanning, holding
    finally:
        await scanning.close()
        await holding.close()


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[LanceDBEngine]:
    """The collection `c` on an engine holding vectors by default."""
    opened = await _opened(tmp_path / "db")
    yield opened
    await opened.close()


async def _held(engine: LanceDBEngine, query: EngineQuery, name: str = "c") -> Any:
    """Search twice at one version (the second starts the build), wait for it, search again."""
    await engine.search(name, query)
    await engine.search(name, query)
    await engine._held.built(name)
    return await engine.search(name, query)


@pytest.mark.parametrize("strategy", [Strategy.SEMANTIC, Strategy.HYBRID])
async def test_a_collection_read_twice_at_one_version_is_searched_in_memory_with_the_same_pages(
    tmp_path: Path, strategy: Strategy
) -> None:
    async with _pair(tmp_path) as (scanning, holding):
        for key in ("probe", "doc7__chunk_0", "other"):
            query = _query(strategy, key)
            expected = _page(await scanning.search("c", query))
            assert _page(await _held(holding, query)) == expected
            deeper = replace(query, offset=5, limit=20)
            assert _page(await holding.search("c", deeper)) == _page(
                await scanning.search("c", deeper)
            )
        assert "c" in holding._held._held
        assert not scanning._held._held
        # the query's variations: one list per vector, as LanceDB gives them
        variations = replace(_query(strategy), vectors=np.stack([vector_for("a"), vector_for("b")]))
        assert _page(await holding.search("c", variations)) == _page(
            await scanning.search("c", variations)
        )


async def test_the_dense_side_reads_no_vector_from_lancedb_once_held(engine: LanceDBEngine) -> None:
    query = _query(Strategy.SEMANTIC, "doc7__chunk_0")
    await _held(engine, query)
    table = await engine._table("c")

    def no_scan(*_: Any) -> Any:
        raise AssertionError("a vector query reached LanceDB")

    table.query = lambda: type("Q", (), {"nearest_to": no_scan})()
    page = await engine.search("c", query)
    assert page.hits[0].chunk.id == "doc7__chunk_0"
    assert page.hits[0].dense_score == pytest.approx(1.0, abs=1e-6)


async def test_a_write_makes_the_held_vectors_stale_and_the_next_search_sees_it(
    engine: LanceDBEngine,
) -> None:
    query = _query(Strategy.SEMANTIC, "newcomer__chunk_0")
    before = await _held(engine, query)
    assert "newcomer__chunk_0" not in [h.chunk.id for h in before.hits]
    await engine.upsert("c", [record(Document(id="newcomer", text="fresh words"))])
    after = await engine.search("c", query)
    assert after.hits[0].chunk.id == "newcomer__chunk_0"
    await engine.delete_chunks("c", ["newcomer__chunk_0"])
    gone = await engine.search("c", query)
    assert "newcomer__chunk_0" not in [h.chunk.id for h in gone.hits]


async def test_a_collection_dropped_and_made_again_is_never_served_from_the_old_vectors(
    engine: LanceDBEngine,
) -> None:
    query = _query(Strategy.SEMANTIC, "doc7__chunk_0")
    assert (await _held(engine, query)).hits[0].chunk.id == "doc7__chunk_0"
    await engine.drop_collection("c")
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", [record(Document(id="other", text="x"))])
    for _ in range(3):
        page = await engine.search("c", query)
        assert [h.chunk.id for h in page.hits] == ["other__chunk_0"]
        await engine._held.built("c")


async def _only(engine: LanceDBEngine, *documents: str) -> Any:
    fields = await engine.fields("c")
    condition = RawCondition("document_id", Operator.IN, list(documents))
    return validate_filter(RawFilter(((condition,),)), fields)


@pytest.mark.parametrize("strategy", [Strategy.SEMANTIC, Strategy.HYBRID])
async def test_a_filtered_search_in_memory_ranks_exactly_the_rows_the_filter_leaves(
    tmp_path: Path, strategy: Strategy
) -> None:
    async with _pair(tmp_path) as (scanning, holding):
        chosen = [f"doc{i}" for i in range(0, 60, 4)]
        only = await _only(holding, *chosen)
        query = _query(strategy, "doc8__chunk_0", filter=only)
        held = await _held(holding, query)
        assert {h.chunk.document_id for h in held.hits} <= set(chosen)
        assert held.hits[0].chunk.id == "doc8__chunk_0"
        assert _page(held) == _page(await scanning.search("c", query))
        assert held.total_count == len(chosen)
        assert len(holding._held._filtered) == 1  # the filter's rows, kept for the next search
        nothing = await _only(holding, "absent")
        empty = await holding.search("c", replace(query, filter=nothing))
        assert empty.hits == []


async def test_a_write_makes_a_filters_held_rows_stale(engine: LanceDBEngine) -> None:
    only = await _only(engine, "doc1", "doc2", "newcomer")
    query = _query(Strategy.SEMANTIC, "newcomer__chunk_0", filter=only)
    before = await _held(engine, query)
    assert sorted(h.chunk.document_id for h in before.hits) == ["doc1", "doc2"]
    await engine.upsert("c", [record(Document(id="newcomer", text="fresh words"))])
    after = await engine.search("c", query)
    assert after.hits[0].chunk.id == "newcomer__chunk_0"
    assert after.total_count == 3


async def test_a_collection_with_a_vector_index_within_the_bound_is_searched_exactly(
    tmp_path: Path,
) -> None:
    """An IVF index probes some partitions and may miss; held vectors rank every row."""
    policy = IndexPolicy(vector_index_min_rows=16, nprobes=1, probe_fraction=0.01)
    async with _pair(tmp_path, policy=policy) as (scanning, holding):
        for engine in (scanning, holding):
            await engine.refresh("c")
            await engine.vector_index_settled("c")
        assert holding._vectors.covered_rows("c") == len(DOCUMENTS)
        query = _query(Strategy.SEMANTIC, "probe", limit=len(DOCUMENTS))
        exact = sorted(
            (
                (float(vector_for(f"{d.id}__chunk_0") @ vector_for("probe")), d.id)
                for d in DOCUMENTS
            ),
            reverse=True,
        )
        held = await _held(holding, query)
        assert [h.chunk.document_id for h in held.hits] == [d for _, d in exact]
        assert "c" in holding._held._held


async def test_held_vectors_stay_within_their_bound_least_recently_searched_out(
    tmp_path: Path,
) -> None:
    engine = await _opened(tmp_path / "db", vectors_in_memory=100)
    try:
        await engine.ensure_collection("d", SPEC)
        await engine.upsert("d", [record(d) for d in DOCUMENTS[:50]])
        query = _query(Strategy.SEMANTIC)
        await _held(engine, query, "c")
        assert set(engine._held._held) == {"c"}
        await _held(engine, query, "d")  # 60 + 50 > 100: c goes
        assert set(engine._held._held) == {"d"}
        await engine.ensure_collection("big", SPEC)
        await engine.upsert("big", [record(Document(id=f"b{i}", text="t")) for i in range(101)])
        await _held(engine, query, "big")  # more than the bound alone: never held
        assert set(engine._held._held) == {"d"}
        table = await engine._table("big")
        count_rows = table.count_rows
        counts: list[Any] = []

        def counting(*args: Any) -> Any:
            counts.append(args)
            return count_rows(*args)

        table.count_rows = counting
        for _ in range(3):  # found too large once at this version: not counted per search
            await engine.search("big", query)
            await engine._held.built("big")
        assert counts == []
    finally:
        await engine.close()


class _WrittenDuringTheScan:
    """A table whose version moves while its vectors are read (a write committed meanwhile)."""

    def __init__(self) -> None:
        self.versions = iter([1, 1, 2, 2, 2])

    async def version(self) -> int:
        return next(self.versions)

    async def count_rows(self) -> int:
        return 3

    def query(self) -> Any:
        raise AssertionError("not reached")


async def test_vectors_read_while_a_write_committed_are_thrown_away() -> None:
    held = HeldCollections()
    table = _WrittenDuringTheScan()

    class Scan:
        def select(self, _: Any) -> Scan:
            return self

        def with_row_id(self) -> Scan:
            return self

        async def to_batches(self, **_: Any) -> Any:
            import pyarrow as pa

            vectors = pa.FixedSizeListArray.from_arrays(
                pa.array(np.ones(3 * DIMENSIONS, np.float32)), DIMENSIONS
            )
            texts = pa.array(["tides", "rivers", "lakes"])
            batch = pa.record_batch(
                {
                    "vector": vectors,
                    "search_text": texts,
                    "chunk_json": texts,
                    "_rowid": pa.array([0, 1, 2], pa.uint64()),
                }
            )
            scanned.append(batch)

            async def batches() -> Any:
                yield batch

            return batches()

    scanned: list[Any] = []
    table.query = Scan  # type: ignore[method-assign]
    assert await held.lookup("t", table) is None  # version 1 noted
    assert await held.lookup("t", table) is None  # version 1 again: build
    await held.built("t")
    assert scanned  # the rows were read ...
    assert "t" not in held._held  # ... but the scan ended at version 2
    await held.close()


async def test_no_vectors_are_held_when_turned_off(tmp_path: Path) -> None:
    engine = await _opened(tmp_path / "db", vectors_in_memory=0)
    try:
        await _held(engine, _query(Strategy.HYBRID))
        assert not engine._held._held
    finally:
        await engine.close()


async def test_with_only_vectors_held_a_hybrid_search_reads_no_keyword_rows_and_takes_its_page(
    tmp_path: Path,
) -> None:
    """The keyword-only candidates' cosines come from the held matrix: no vector is read by the
    keyword query or taken, only the page's chunks."""
    held = {"keywords_in_memory": False}
    async with _pair(tmp_path, held=held) as (scanning, engine):
        query = _query(Strategy.HYBRID, "doc9__chunk_0", limit=5)
        await _held(engine, query)
        table = await engine._table("c")
        original = table.take_row_ids
        taken: list[list[int]] = []

        def recording(row_ids: list[int]) -> Any:
            taken.append(list(row_ids))
            return original(row_ids)

        table.take_row_ids = recording
        page = await engine.search("c", query)
        assert len(taken) == 1  # no take of the keyword-only candidates' vectors
        assert (
            len(taken[0]) == len(page.hits) == 5
        )  # the page's chunks: the keyword query read none
        assert _page(page) == _page(await scanning.search("c", query))


class _UnreadableVectors:
    """A table whose vector scan fails (a damaged file, an I/O error)."""

    async def version(self) -> int:
        return 1

    async def count_rows(self) -> int:
        return 3

    def query(self) -> Any:
        raise OSError("read failed")


async def test_a_failed_read_of_the_vectors_leaves_searches_to_lancedb(
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = HeldCollections()
    table = _UnreadableVectors()
    for _ in range(3):  # noted, build fails, noted again: never raises, never held
        assert await held.lookup("t", table) is None
        await held.built("t")
    assert "t" not in held._held
    assert "reading 't' into memory failed" in caplog.text
    await held.close()


def _worded(i: int) -> Document:
    """A document whose BM25 for "tides rivers" no other shares: its own counts of both words
    and its own length."""
    filler = " ".join(f"w{i}x{k}" for k in range(i // 16))
    text = f"{'tides ' * (1 + i % 4)}{'rivers ' * ((i // 4) % 4)}{filler}"
    return Document(id=f"doc{i}", text=text.strip())


async def _worded_engine(path: Path, **options: Any) -> LanceDBEngine:
    engine = await LanceDBEngine.open(path, **options)
    await engine.ensure_collection("c", SPEC)
    await engine.upsert("c", [record(_worded(i)) for i in range(60)])
    await engine.refresh("c")  # every row in LanceDB's BM25 index
    return engine


def _unread(table: Any) -> None:
    """Make any read of `table` from LanceDB fail the test."""

    def read(*_: Any, **__: Any) -> Any:
        raise AssertionError("a search read LanceDB")

    table.query = read
    table.take_row_ids = read
    table.count_rows = read


async def _lancedbs_pages_from_memory(
    scanning: LanceDBEngine, holding: LanceDBEngine, queries: list[EngineQuery]
) -> list[Any]:
    """The holding engine's pages, each equal to the scanning engine's (hits, scores, total
    count), with every read of LanceDB failing the test."""
    _unread(await holding._table("c"))
    pages = []
    for query in queries:
        expected = await scanning.search("c", query)
        page = await holding.search("c", query)
        assert _page(page) == _page(expected)
        assert page.total_count == expected.total_count
        pages.append(page)
    return pages


@pytest.mark.parametrize("strategy", [Strategy.KEYWORD, Strategy.HYBRID, Strategy.SEMANTIC])
async def test_a_held_collection_is_searched_from_memory_alone_with_lancedbs_pages(
    tmp_path: Path, strategy: Strategy
) -> None:
    async with _pair(tmp_path, _worded_engine) as (scanning, holding):
        only = await _only(holding, *[f"doc{i}" for i in range(0, 60, 3)])
        queries = [
            _query(strategy, "doc7__chunk_0"),
            _query(strategy, "doc7__chunk_0", offset=5, limit=20),
            _query(strategy, "doc7__chunk_0", filter=only),
            _query(strategy, "doc7__chunk_0", keyword_text="tides tides rivers w40x1"),
        ]
        for query in queries:
            await _held(holding, query)  # held, and a filter's rows remembered
        pages = await _lancedbs_pages_from_memory(scanning, holding, queries)
        assert all(page.hits for page in pages)  # every query finds something


async def test_keyword_matches_are_counted_to_the_cap_as_lancedb_counts_them(
    tmp_path: Path,
) -> None:
    async with _pair(tmp_path, _worded_engine, keyword_count_cap=25) as (scanning, holding):
        for text, matching in (("tides", 60), ("rivers", 45), ("w40x1", 1), ("lakes", 0)):
            query = _query(Strategy.KEYWORD, keyword_text=text, limit=10)
            held = await _held(holding, query)
            expected = await scanning.search("c", query)
            assert held.total_count == expected.total_count == min(matching, 25), text
            # one word: rows with its count and length tie, in any order
            above = held.hits[-1].score * (1 + 1e-5) if held.hits else 0.0
            assert sorted(h.chunk.id for h in held.hits if h.score > above) == (
                sorted(h.chunk.id for h in expected.hits if h.score > above)
            )


async def test_a_write_to_a_held_collection_is_found_by_keyword_at_once(
    engine: LanceDBEngine,
) -> None:
    query = _query(Strategy.KEYWORD, keyword_text="zephyr")
    assert (await _held(engine, query)).hits == []
    assert engine._held._held["c"].version == await (await engine._table("c")).version()
    await engine.upsert("c", [record(Document(id="newcomer", text="a zephyr over tides"))])
    assert [h.chunk.id for h in (await engine.search("c", query)).hits] == ["newcomer__chunk_0"]
    held_again = await _held(engine, query)  # the new version held: the same answer from memory
    assert [h.chunk.id for h in held_again.hits] == ["newcomer__chunk_0"]
    await engine.delete_chunks("c", ["newcomer__chunk_0"])
    assert (await engine.search("c", query)).hits == []


async def test_with_keywords_in_memory_off_only_the_vectors_are_held(tmp_path: Path) -> None:
    engine = await _opened(tmp_path / "db", keywords_in_memory=False)
    try:
        await _held(engine, _query(Strategy.KEYWORD))
        held = engine._held._held["c"]
        assert held.keywords is None
        assert held.chunks is None
        assert len(held.whole.addresses) == len(DOCUMENTS)
    finally:
        await engine.close()


async def test_a_collection_written_often_is_read_in_a_bounded_share_of_the_time(
    engine: LanceDBEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a collection in whole for t seconds rests whole reads for 9t, and a refresh taking
    t rests refreshes for 9t: writes between searches cannot keep a core busy re-reading it. A
    refresh does not wait out the rest of a whole read (13-19 s at 100,000 chunks, then 2-3
    minutes off memory under writes every few seconds, against ~1 s a refresh)."""
    now = [0.0]
    held = engine._held = HeldCollections(clock=lambda: now[0])
    table = await engine._table("c")
    read, refreshed = held_module._read, held_module._refreshed

    async def slow_read(*args: Any) -> Any:  # reading the collection in takes 2 s on this clock
        now[0] += 2.0
        return await read(*args)

    async def slow_refresh(*args: Any) -> Any:  # a refresh takes 0.5 s
        now[0] += 0.5
        return await refreshed(*args)

    monkeypatch.setattr(held_module, "_read", slow_read)
    monkeypatch.setattr(held_module, "_refreshed", slow_refresh)
    query = _query(Strategy.KEYWORD)

    async def searched_at(at: float) -> bool:
        """Search twice at `at` (the second may start a build); whether the collection is then
        held at the table's version."""
        now[0] = at
        await engine.search("c", query)
        await engine.search("c", query)
        await held.built("c")
        current = held._held.get("c")
        return current is not None and current.version == await table.version()

    assert await searched_at(0.0)  # read in whole from 0 to 2 s: whole reads rest until 20
    await engine.upsert("c", [record(Document(id="newcomer", text="fresh tides"))])
    assert await searched_at(2.0)  # refreshed from 2 to 2.5 s: refreshes rest until 7
    fresh = await engine.search("c", _query(Strategy.KEYWORD, keyword_text="fresh"))
    assert [h.chunk.id for h in fresh.hits] == ["newcomer__chunk_0"]  # from memory
    await engine.upsert("c", [record(Document(id="latecomer", text="late tides"))])
    assert not await searched_at(6.9)
    assert "c" in held._stale  # kept for the refresh
    assert await searched_at(7.1)  # refreshed from 7.1 to 7.6: refreshes rest until 12.1

    await engine.upsert("c", [record(Document(id="third", text="third tides"))])
    await engine.search("c", query)  # set aside ...
    held._stale.clear()  # ... and given up (as the memory bound may): only a whole read is left
    assert not await searched_at(19.9)
    assert await searched_at(20.1)


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the whole reads of a collection into memory (`held._read`)."""
    reads: list[int] = []
    read = held_module._read

    async def counted(*args: Any) -> Any:
        reads.append(1)
        return await read(*args)

    monkeypatch.setattr(held_module, "_read", counted)
    return reads


async def _gold(engine: LanceDBEngine) -> Any:
    fields = await engine.fields("c")
    return validate_filter(
        RawFilter(((RawCondition("metadata.tier", Operator.EQUALS, "gold"),),)), fields
    )


async def _write_some(engine: LanceDBEngine) -> None:
    """A new document with a metadata key new to the collection (a column added to every row),
    an existing one rewritten (an upsert), one deleted."""
    newcomer = Document(id="newcomer", text="a zephyr over tides", metadata={"tier": "gold"})
    await engine.upsert("c", [record(newcomer)])
    await engine.upsert("c", [record(Document(id="doc5", text="rivers of mistral and sirocco"))])
    await engine.delete_chunks("c", ["doc9__chunk_0"])


@pytest.mark.parametrize("strategy", [Strategy.KEYWORD, Strategy.HYBRID, Strategy.SEMANTIC])
async def test_after_a_write_only_the_rows_written_are_read_and_pages_match_lancedbs(
    tmp_path: Path,
    strategy: Strategy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _pair(tmp_path, _worded_engine) as (scanning, holding):
        holding._held = HeldCollections(clock=lambda: 0.0)  # never resting between builds
        query = _query(strategy, "doc7__chunk_0")
        await _held(holding, query)
        reads = _counting_reads(monkeypatch)
        table = await holding._table("c")
        for engine in (scanning, holding):
            await _write_some(engine)
        await scanning.refresh("c")  # LanceDB's BM25 over every row, as the held index scores
        caplog.set_level("INFO", logger=held_module.__name__)
        await _held(holding, query)
        assert reads == []  # refreshed, not read whole
        assert "holding 'c' in memory: 60 chunks" in caplog.text
        assert "refreshed (2 new rows read)" in caplog.text  # the two rows written, nothing else
        assert holding._held._held["c"].version == await table.version()
        probes = [
            query,
            _query(strategy, "newcomer__chunk_0", keyword_text="zephyr mistral tides"),
            _query(strategy, "doc5__chunk_0", keyword_text="sirocco rivers"),
            _query(strategy, "doc9__chunk_0", keyword_text="tides", limit=70),
            _query(strategy, "doc7__chunk_0", filter=await _only(holding, "doc5", "newcomer")),
            _query(strategy, "doc7__chunk_0", filter=await _gold(holding)),
        ]
        for probe in probes:  # a filter's rows are asked of LanceDB once per version
            await holding.search("c", probe)
        pages = await _lancedbs_pages_from_memory(scanning, holding, probes)
        assert [h.chunk.id for h in pages[-1].hits] == ["newcomer__chunk_0"]
        ids = [h.chunk.id for h in (await holding.search("c", replace(query, limit=70))).hits]
        assert "doc9__chunk_0" not in ids
        rewritten = await holding.search("c", _query(Strategy.KEYWORD, keyword_text="sirocco"))
        assert [h.chunk.id for h in rewritten.hits] == ["doc5__chunk_0"]
        assert "sirocco" in rewritten.hits[0].chunk.text  # the new text, not the old row's


@pytest.mark.parametrize("strategy", [Strategy.KEYWORD, Strategy.HYBRID])
async def test_a_compacted_collection_is_read_whole_tokenizing_only_the_texts_written(
    tmp_path: Path,
    strategy: Strategy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Compaction rewrites every row at a new address: the collection is read whole, but only the
    two texts the write changed are tokenized; the others' counts come from the stale copy."""
    async with _pair(tmp_path, _worded_engine) as (scanning, holding):
        holding._held = HeldCollections(clock=lambda: 0.0)  # never resting between builds
        query = _query(strategy, "doc7__chunk_0")
        await _held(holding, query)
        reads = _counting_reads(monkeypatch)
        for engine in (scanning, holding):
            await _write_some(engine)
            await engine.refresh("c")  # compacts: new fragments, new addresses
        caplog.set_level("INFO", logger=held_module.__name__)
        await _held(holding, query)
        assert reads == [1]
        assert "read (2 of 60 texts tokenized)" in caplog.text
        assert holding._held._held["c"].version == await (await holding._table("c")).version()
        probes = [
            query,
            _query(strategy, "doc5__chunk_0", keyword_text="sirocco rivers tides"),
            _query(strategy, "newcomer__chunk_0", keyword_text="zephyr tides", limit=70),
        ]
        await _lancedbs_pages_from_memory(scanning, holding, probes)


async def test_a_refresh_raced_by_a_write_is_thrown_away_and_the_next_one_sees_both(
    engine: LanceDBEngine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither build reads the collection whole: the raced one gives up at once (a whole read at
    a version already gone would be thrown away too), and the stale copy it was refreshing stays
    set aside, so the next build refreshes from it, reading only the rows written since."""
    engine._held = HeldCollections(clock=lambda: 0.0)  # never resting between builds
    query = _query(Strategy.KEYWORD, keyword_text="zephyr foehn")
    await _held(engine, query)
    await _write_some(engine)
    reads = _counting_reads(monkeypatch)
    refreshed = held_module._refreshed

    async def raced(table: Any, *args: Any) -> Any:
        await engine.upsert("c", [record(Document(id="late", text="a foehn wind"))])
        return await refreshed(table, *args)

    monkeypatch.setattr(held_module, "_refreshed", raced)
    await engine.search("c", query)
    await engine.search("c", query)
    await engine._held.built("c")
    assert "c" not in engine._held._held  # written during the build: nothing held
    assert "c" in engine._held._stale  # still set aside for the next build
    monkeypatch.setattr(held_module, "_refreshed", refreshed)
    caplog.set_level("INFO", logger=held_module.__name__)
    page = await _held(engine, query)
    assert engine._held._held["c"].version == await (await engine._table("c")).version()
    assert sorted(h.chunk.id for h in page.hits) == ["late__chunk_0", "newcomer__chunk_0"]
    assert reads == []
    assert "refreshed (3 new rows read)" in caplog.text  # the three rows written since


async def test_a_stale_copy_set_aside_counts_in_the_memory_bound(tmp_path: Path) -> None:
    engine = await _opened(tmp_path / "db")
    engine._held = HeldCollections(len(DOCUMENTS) + 5, clock=lambda: 0.0)
    try:
        await engine.ensure_collection("d", SPEC)
        await engine.upsert("d", [record(d) for d in DOCUMENTS[:10]])
        query = _query(Strategy.SEMANTIC)
        await _held(engine, query, "c")
        await engine.upsert("c", [record(Document(id="newcomer", text="fresh"))])
        await engine.search("c", query)  # c is set aside: 60 rows still counted
        assert "c" in engine._held._stale
        await _held(engine, query, "d")  # 10 more rows do not fit beside it: c goes
        assert "c" not in engine._held._stale
        assert list(engine._held._held) == ["d"]
    finally:
        await engine.close()


async def _opened_cjk(path: Path, **options: Any) -> LanceDBEngine:
    """`c` holding Japanese and Chinese sentences beside the English notes."""
    engine = await _opened(path, **options)
    texts = [
        "東京は日本の首都であり、世界最大の都市圏の一つです。",
        "京都は日本の古い都で、多くの寺があります。",
        "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    ]
    await engine.upsert("c", [record(Document(id=f"cjk{i}", text=t)) for i, t in enumerate(texts)])
    await engine.refresh("c")
    return engine


@pytest.mark.parametrize("text", ["日本の首都", "首都", "文化中心"])
async def test_a_cjk_query_held_in_memory_ranks_the_pairs_as_lancedb_does(
    tmp_path: Path, text: str
) -> None:
    async with _pair(tmp_path, _opened_cjk) as (scanning, holding):
        query = _query(Strategy.KEYWORD, keyword_text=text, vectors=np.zeros((0, DIMENSIONS)))
        expected = _page(await scanning.search("c", query))
        assert expected, "LanceDB finds the sentences holding the word"
        assert _page(await _held(holding, query)) == expected
        assert "c" in holding._held._held
