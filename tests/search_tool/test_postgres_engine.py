"""The PostgreSQL engine beyond the shared conformance suite, live against a real PostgreSQL:
BM25 that scores as the embedded engine does, term statistics that stay exact through every kind of
write, many replicas writing one document at once, and the operational failures (database down,
pool full) a caller sees as clear statuses."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
import pytest

from bench.harness import SCIFACT_DIR
from services.common.admission import OVERLOADED
from services.common.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from services.common.postgres import DATABASE_UNAVAILABLE, PostgresSettings
from services.search_tool.documents import Document
from services.search_tool.engine import bm25
from services.search_tool.engine.base import CollectionSpec, EngineQuery, SearchPage, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.postgres import PostgresEngine
from services.search_tool.engine.postgres import search as postgres_search
from services.search_tool.filters import (
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
)
from tests.postgres_server import PostgresServer
from tests.search_tool.engine_fixtures import DIMENSIONS, record, records, vector_for

SPEC = CollectionSpec("test-model", DIMENSIONS)
SCIFACT = SCIFACT_DIR / "corpus.jsonl"
NO_VECTORS = np.zeros((0, DIMENSIONS), np.float32)


def _settings(**overrides: object) -> PostgresSettings:
    return PostgresSettings.model_validate({"pool_min_size": 0, **overrides})


@pytest.fixture
async def engine(postgres_dsn: str) -> AsyncIterator[PostgresEngine]:
    opened = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    await opened.ensure_collection("c", SPEC)
    yield opened
    await opened.close()


_MADE_UP_WORDS = "cell growth vitamin bone cancer risk aspirin insulin receptor gene the of"


def _corpus(count: int) -> list[Document]:
    """Real abstracts (SciFact) when the shared data set is there, else made-up sentences."""
    documents: list[Document] = []
    if SCIFACT.exists():
        with SCIFACT.open(encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                documents.append(Document(id=str(row["_id"]), text=row["text"], title=row["title"]))
                if len(documents) == count:
                    return documents
    words = [
        "cell",
        "growth",
        "vitamin",
        "bone",
        "cancer",
        "risk",
        "aspirin",
        "insulin",
        "receptor",
        "gene",
        "the",
        "of",
    ]
    for i in range(count - len(documents)):
        text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40 + i % 13))
        documents.append(Document(id=f"made-{i}", text=text, title=words[i % len(words)]))
    return documents


async def _statistics(dsn: str) -> tuple[tuple[int, int, int], dict[str, int]]:
    """(chunks, tokens, chunks without a term) and every term's document frequency as the
    engine keeps them."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        totals = await (
            await conn.execute(
                "SELECT chunk_count, token_count, termless_count FROM quarry_collections"
            )
        ).fetchone()
        assert totals is not None
        terms = await (await conn.execute("SELECT term, df FROM quarry_terms_1")).fetchall()
    return (int(totals[0]), int(totals[1]), int(totals[2])), {t: n for t, n in terms if n}


async def _recomputed(dsn: str) -> tuple[tuple[int, int, int], dict[str, int]]:
    """The same statistics recomputed from the stored chunks."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute("SELECT term_freqs, doc_length FROM quarry_chunks_1")
        ).fetchall()
    frequencies: Counter[str] = Counter()
    for term_freqs, _ in rows:
        frequencies.update(term_freqs.keys())
    termless = sum(1 for _, n in rows if not n)
    return (len(rows), sum(n for _, n in rows), termless), dict(frequencies)


async def _postings(dsn: str) -> Counter[tuple[str, str, int, int]]:
    """Every (term, chunk, count, chunk length) posting the keyword side reads."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute("SELECT term, chunk_id, tf, doc_length FROM quarry_postings_1")
        ).fetchall()
    return Counter((str(t), str(c), int(f), int(n)) for t, c, f, n in rows)


async def _postings_recomputed(dsn: str) -> Counter[tuple[str, str, int, int]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute("SELECT id, term_freqs, doc_length FROM quarry_chunks_1")
        ).fetchall()
    return Counter(
        (str(term), str(chunk), int(tf), int(length))
        for chunk, freqs, length in rows
        for term, tf in freqs.items()
    )


async def test_keyword_scores_match_the_embedded_engines_bm25(
    engine: PostgresEngine, tmp_path: Path
) -> None:
    """Same chunks in both engines: the same matches, the same order, scores within 0.5 %; a
    chunk without a term counts in neither engine's N nor mean length."""
    termless = [Document(id=f"termless-{i}", text="the of and — !") for i in range(100)]
    documents = _corpus(400) + termless
    embedded = await LanceDBEngine.open(tmp_path / "lance")
    try:
        await embedded.ensure_collection("c", SPEC)
        await embedded.upsert("c", records(documents))
        await embedded.refresh("c")
        await engine.upsert("c", records(documents))
        queries = [
            "cell growth",
            "vitamin D and bone density in the elderly",
            "IL-10 β-cells",
            "aspirin aspirin cancer risk",
            "the of and",
        ]
        for text in queries:
            query = EngineQuery(Strategy.KEYWORD, text, NO_VECTORS, limit=50)
            theirs = (await embedded.search("c", query)).hits
            ours = (await engine.search("c", query)).hits
            assert len(ours) == len(theirs), text
            for mine, reference in zip(ours, theirs, strict=True):
                assert mine.score == pytest.approx(reference.score, rel=5e-3), text
            top = {h.chunk.id for h in theirs[:10]}
            assert len(top & {h.chunk.id for h in ours[:10]}) >= min(9, len(top)), text
            assert bool(ours) == (text != "the of and")  # stop words alone match nothing
    finally:
        await embedded.close()


def test_tokenizer_stems_before_removing_stop_words_as_lance_does() -> None:
    assert bm25.tokens("Being here, the cells DOES grow: Straße café") == [
        "cell",
        "doe",
        "grow",
        "strasse",
        "cafe",
    ]
    assert bm25.query_terms("alpha alpha beta") == Counter({"alpha": 2, "beta": 1})
    assert bm25.tokens("x" * 39 + " " + "y" * 40) == ["x" * 39]


async def test_term_statistics_stay_exact_through_upserts_replacements_and_deletes(
    engine: PostgresEngine, postgres_dsn: str
) -> None:
    documents = _corpus(60)
    await engine.upsert("c", records(documents))
    termless = [Document(id=f"termless-{i}", text="the of and — !") for i in range(3)]
    await engine.upsert("c", records(termless))  # no term: not in N
    assert await engine.delete_chunks("c", ["termless-0__chunk_0"]) == 1
    rewritten = [
        replace(d, text=d.text[: len(d.text) // 2] + " novel words") for d in documents[:10]
    ]
    await engine.upsert("c", records(rewritten))
    two_chunks = [record(documents[20], 0, text="first part"), record(documents[20], 1)]
    assert await engine.replace_documents("c", two_chunks) == (2, 0)
    assert await engine.replace_documents("c", [record(documents[20], 0, text="only")]) == (1, 1)
    assert await engine.delete_chunks("c", [f"{documents[30].id}__chunk_0"]) == 1
    assert (
        await engine.delete_matching("c", document_ids=[d.id for d in documents[40:45]], where=None)
        == 5
    )
    assert await _statistics(postgres_dsn) == await _recomputed(postgres_dsn)
    totals, _ = await _statistics(postgres_dsn)
    assert totals[0] == 60 - 1 - 5 + 2
    assert totals[2] == 2
    assert await _postings(postgres_dsn) == await _postings_recomputed(postgres_dsn)


async def test_concurrent_replicas_rewriting_one_document_leave_exactly_one_version(
    postgres_dsn: str,
) -> None:
    """Four engines (four replicas, four pools) rewrite one document at once with versions of
    1 to 4 chunks; afterwards exactly one version is stored, whole, and the statistics agree."""
    replicas = [await PostgresEngine.open(_settings(), dsn=postgres_dsn) for _ in range(4)]
    try:
        await replicas[0].ensure_collection("c", SPEC)
        document = Document(id="doc", text="shared")

        def version(n: int) -> list[object]:
            return [
                replace(record(document, i, text=f"version {n} part {i}"), content_hash=f"v{n}")
                for i in range(n)
            ]

        for _ in range(5):
            await asyncio.gather(
                *(r.replace_documents("c", version(n + 1)) for n, r in enumerate(replicas))  # type: ignore[arg-type]
            )
            stored = (await replicas[0].stored_versions("c", ["doc"]))["doc"]
            assert stored.content_hash in {"v1", "v2", "v3", "v4"}
            count = int(stored.content_hash[1:])
            assert stored.chunk_ids == {f"doc__chunk_{i}" for i in range(count)}
        assert await _statistics(postgres_dsn) == await _recomputed(postgres_dsn)
    finally:
        for replica in replicas:
            await replica.close()


async def test_a_metadata_key_added_by_one_replica_is_filterable_on_another(
    postgres_dsn: str,
) -> None:
    first = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    second = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    try:
        await first.ensure_collection("c", SPEC)
        assert "metadata.team" not in await second.fields("c")
        await first.upsert("c", [record(Document(id="a", text="x", metadata={"team": "eng"}))])
        assert (await second.fields("c"))["metadata.team"].value == "string"
        with pytest.raises(InvalidArgument, match=r"metadata\.team"):
            await second.upsert("c", [record(Document(id="b", text="y", metadata={"team": 3}))])
    finally:
        await first.close()
        await second.close()


async def test_a_collection_dropped_by_another_replica_is_not_found(postgres_dsn: str) -> None:
    first = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    second = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    try:
        await first.ensure_collection("c", SPEC)
        await first.upsert("c", records(_corpus(3)))
        query = EngineQuery(Strategy.HYBRID, "cell", np.stack([vector_for("q")]))
        assert (await second.search("c", query)).hits
        await first.drop_collection("c")
        with pytest.raises(NotFound):
            await second.search("c", query)
        with pytest.raises(NotFound):
            await second.fields("c")
    finally:
        await first.close()
        await second.close()


async def test_a_full_pool_is_resource_exhausted(postgres_dsn: str) -> None:
    opened = await PostgresEngine.open(
        _settings(pool_max_size=1, pool_timeout_s=0.3), dsn=postgres_dsn
    )
    try:
        await opened.ensure_collection("c", SPEC)
        async with opened._pool.connection():  # every connection busy
            with pytest.raises(ResourceExhausted) as caught:
                await opened.stored_versions("c", ["x"])
        assert caught.value.reason == OVERLOADED
        assert caught.value.retry_after_s == 1.0
    finally:
        await opened.close()


async def test_the_database_down_is_unavailable_and_searches_recover_when_it_returns(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    opened = await PostgresEngine.open(
        _settings(pool_timeout_s=0.5, connect_timeout_s=1), dsn=postgres_dsn
    )
    try:
        await opened.ensure_collection("c", SPEC)
        await opened.upsert("c", records(_corpus(5)))
        query = EngineQuery(Strategy.KEYWORD, "cell", NO_VECTORS)
        postgres_server.stop(immediate=True)
        with pytest.raises(Unavailable) as caught:
            await opened.search("c", query)
        assert caught.value.reason == DATABASE_UNAVAILABLE
        assert caught.value.retry_after_s is not None
        postgres_server.start()
        page = await opened.search("c", query)
        assert page.total_count >= 0
    finally:
        await opened.close()
        if not postgres_server.running:
            postgres_server.start()


async def _written_and_searched(
    dsn: str, documents: list[Document], query: EngineQuery
) -> SearchPage:
    """Collection `c` written with `documents` by one engine, and its answer to `query`."""
    engine = await PostgresEngine.open(_settings(), dsn=dsn)
    try:
        await engine.ensure_collection("c", SPEC)
        await engine.upsert("c", records(documents))
        return await engine.search("c", query)
    finally:
        await engine.close()


async def _migrated_and_searched(dsn: str, query: EngineQuery) -> SearchPage:
    """The answer to `query` of an engine opened after the migrations ran again."""
    engine = await PostgresEngine.open(_settings(), dsn=dsn)
    try:
        await engine.ensure_schema()
        return await engine.search("c", query)
    finally:
        await engine.close()


async def test_migration_2_gives_an_existing_collection_the_term_chunk_index_and_same_results(
    postgres_dsn: str,
) -> None:
    """A collection made before migration 2 (postings indexed by term alone, default
    autovacuum) is brought to today's layout once, and searches answer exactly as before."""
    documents = _corpus(40)
    half = tuple(d.id for d in documents[::2])
    query = EngineQuery(
        Strategy.HYBRID,
        "cell growth vitamin",
        np.stack([vector_for("cell growth")]),
        filter=FilterExpression(
            (FilterGroup((Condition("document_id", FieldType.STRING, Operator.IN, half),)),)
        ),
        limit=20,
    )
    before = await _written_and_searched(postgres_dsn, documents, query)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        cursor = await conn.execute("SELECT id FROM quarry_collections WHERE name = 'c'")
        row = await cursor.fetchone()
        assert row is not None
        postings, chunks = f"quarry_postings_{row[0]}", f"quarry_chunks_{row[0]}"
        await conn.execute(f'DROP INDEX "{postings}_term_chunk"')
        await conn.execute(
            f'CREATE INDEX "{postings}_term" ON "{postings}"'
            " (term) INCLUDE (chunk_id, tf, doc_length)"
        )
        for table in (postings, chunks):
            await conn.execute(
                f'ALTER TABLE "{table}" RESET (autovacuum_vacuum_insert_scale_factor,'
                " autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor)"
            )
        await conn.execute(
            "DELETE FROM quarry_schema_migrations WHERE component = 'search_tool' AND version = 2"
        )

    after = await _migrated_and_searched(postgres_dsn, query)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s ORDER BY 1",
            (postings,),
        )
        indexes: dict[str, str] = dict(await cursor.fetchall())
        cursor = await conn.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
            ([postings, chunks],),
        )
        options = {name: set(found or []) for name, found in await cursor.fetchall()}
    assert set(indexes) == {f"{postings}_chunk", f"{postings}_term_chunk"}
    assert "(term, chunk_id) INCLUDE (tf, doc_length)" in indexes[f"{postings}_term_chunk"]
    for table in (postings, chunks):
        assert "autovacuum_vacuum_insert_scale_factor=0.02" in options[table]
    assert before.hits
    assert [(h.chunk.id, h.score) for h in after.hits] == [
        (h.chunk.id, h.score) for h in before.hits
    ]
    assert after.total_count == before.total_count


async def test_migration_3_counts_an_existing_collections_chunks_with_a_term_and_same_results(
    postgres_dsn: str,
) -> None:
    """A collection made before migration 3 (no `termless_count`) gets its count of chunks
    without a term once, and keyword scores equal those of the collection written after it."""
    termless = [Document(id=f"termless-{i}", text="the of and") for i in range(10)]
    documents = _corpus(30) + termless
    query = EngineQuery(Strategy.KEYWORD, "cell growth vitamin", NO_VECTORS, limit=20)
    before = await _written_and_searched(postgres_dsn, documents, query)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("ALTER TABLE quarry_collections DROP COLUMN termless_count")
        await conn.execute(
            "DELETE FROM quarry_schema_migrations WHERE component = 'search_tool' AND version = 3"
        )
    after = await _migrated_and_searched(postgres_dsn, query)
    totals, _ = await _statistics(postgres_dsn)
    assert totals[2] == 10  # the chunks without a term, left out of N
    assert before.hits
    assert [(h.chunk.id, h.score) for h in after.hits] == [
        (h.chunk.id, h.score) for h in before.hits
    ]


def _filtered_hybrid(text: str, condition: Condition, *, offset: int = 0) -> EngineQuery:
    return EngineQuery(
        Strategy.HYBRID,
        text,
        np.stack([vector_for(text)]),
        filter=FilterExpression((FilterGroup((condition,)),)),
        limit=10,
        offset=offset,
    )


def _described(page: SearchPage) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.chunk.id, h.score, h.dense_score, h.keyword_score) for h in page.hits]


async def test_a_repeated_filter_sends_the_chunks_it_matched_and_pages_exactly_as_the_scan(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second search with a filter sends the chunks the first one found for it (same write
    sequence) instead of scanning again, and its pages equal those of a replica that scans."""
    remembering = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    scanning = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    sent: list[int | None] = []
    send = postgres_search.TableSearch._send_hybrid

    async def spy(
        self: postgres_search.TableSearch,
        *,
        matching_ids: str | None = None,
        capture: bool = False,
    ) -> Any:
        sent.append(None if matching_ids is None else len(matching_ids.split("\n")))
        return await send(self, matching_ids=matching_ids, capture=capture)

    try:
        await remembering.ensure_collection("c", SPEC)
        documents = [replace(d, source="a" if i % 3 else "b") for i, d in enumerate(_corpus(300))]
        await remembering.upsert("c", records(documents))
        broad = Condition("source", FieldType.STRING, Operator.EQUALS, "a")
        monkeypatch.setattr(postgres_search.TableSearch, "_send_hybrid", spy)
        queries = [
            _filtered_hybrid(text, broad, offset=offset)
            for text, offset in [
                ("cell growth", 0),  # counts the filter
                ("risk", 0),  # finds its chunks (the count is cached: the filter repeats)
                ("vitamin D bone density", 0),
                ("gene", 7),
            ]
        ]
        for i, query in enumerate(queries):
            sent.clear()
            page = await remembering.search("c", query)
            assert sent == ([None] if i < 2 else [200]), query.keyword_text
            monkeypatch.setattr(postgres_search, "_IDS_PER_FILTER", 0)  # the other scans
            reference = await scanning.search("c", query)
            monkeypatch.setattr(postgres_search, "_IDS_PER_FILTER", 50_000)
            assert page.hits
            assert _described(page) == _described(reference)
            assert page.total_count == reference.total_count == 200
    finally:
        await remembering.close()
        await scanning.close()


async def _search(engine: PostgresEngine, query: EngineQuery, *, embedding: bool) -> SearchPage:
    """`search` with the vectors given, or `search_embedding` with them still to come."""
    if not embedding:
        return await engine.search("c", query)

    async def vectors() -> npt.NDArray[np.float32]:
        await asyncio.sleep(0.005)
        return query.vectors

    unembedded = replace(query, vectors=np.zeros((0, DIMENSIONS), np.float32))
    return await engine.search_embedding("c", unembedded, vectors())


@pytest.mark.parametrize("embedding", [False, True], ids=["vectors-given", "while-embedding"])
async def test_a_write_by_another_replica_is_searched_although_the_filter_was_remembered(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, embedding: bool
) -> None:
    """Chunks remembered for a filter belong to one write sequence: after another replica adds a
    matching chunk and moves one out of the filter, the next search finds the first and not the
    second (10 dense candidates of 80 matching chunks: only the keyword side finds them)."""
    remembered: list[bool] = []
    look_up = postgres_search.MatchCounts.ids

    def spy(self: postgres_search.MatchCounts, key: postgres_search.CountKey) -> str | None:
        found = look_up(self, key)
        remembered.append(found is not None)
        return found

    monkeypatch.setattr(postgres_search.MatchCounts, "ids", spy)
    searching = await PostgresEngine.open(_settings(), dsn=postgres_dsn, hybrid_candidates=10)
    writing = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    try:
        await searching.ensure_collection("c", SPEC)
        old = Document(id="zebrafish-old", text="zebrafish telomerase", source="a")
        documents = [old] + [
            replace(d, source="a" if i % 3 else "b") for i, d in enumerate(_corpus(120))
        ]
        await searching.upsert("c", records(documents))
        condition = Condition("source", FieldType.STRING, Operator.EQUALS, "a")
        query = _filtered_hybrid("zebrafish telomerase", condition)
        for _ in range(3):  # counts the filter, finds its chunks, sends them
            before = await _search(searching, query, embedding=embedding)
        assert remembered == [False, True]  # the first counted the filter: nothing to look up
        assert "zebrafish-old" in {h.chunk.document_id for h in before.hits}
        new = Document(id="zebrafish-new", text="zebrafish telomerase", source="a")
        await writing.upsert("c", records([new, replace(old, source="b")]))
        after = await _search(searching, query, embedding=embedding)
        assert remembered == [False, True, True]  # sent, then found stale: the scan instead
        found = {h.chunk.document_id for h in after.hits}
        assert "zebrafish-new" in found
        assert "zebrafish-old" not in found
        assert after.total_count == before.total_count  # one in, one out
    finally:
        await searching.close()
        await writing.close()


def test_remembered_filter_chunks_are_bounded_per_filter_and_in_all() -> None:
    counts = postgres_search.MatchCounts(ids_held=100)
    counts.put_ids((1, 1, "a"), [str(i) for i in range(60)])
    counts.put_ids((1, 1, "b"), [str(i) for i in range(30)])
    assert counts.ids((1, 1, "a")) is not None  # now the most recently used
    counts.put_ids((1, 1, "c"), [str(i) for i in range(30)])  # 120 held: the oldest goes
    assert counts.ids((1, 1, "b")) is None
    assert counts.ids((1, 1, "a")) is not None
    assert counts.ids((1, 1, "c")) is not None
    counts.put_ids((1, 1, "d"), [str(i) for i in range(postgres_search._IDS_PER_FILTER + 1)])
    assert counts.ids((1, 1, "d")) is None  # too many to keep


async def test_a_hybrid_search_while_embedding_pages_exactly_as_with_the_vectors_given(
    postgres_dsn: str,
) -> None:
    """The keyword side sent before the query vectors exist gives the pages the one-statement
    search gives: with a filter (its chunks found, then remembered), without one, deeper pages,
    and a query of stop words alone (no keyword side to start first)."""
    engine = await PostgresEngine.open(_settings(), dsn=postgres_dsn, hybrid_candidates=10)
    try:
        await engine.ensure_collection("c", SPEC)
        documents = [replace(d, source="a" if i % 3 else "b") for i, d in enumerate(_corpus(200))]
        await engine.upsert("c", records(documents))
        broad = Condition("source", FieldType.STRING, Operator.EQUALS, "a")
        queries = [
            _filtered_hybrid("cell growth", broad),
            _filtered_hybrid("cell growth", broad),  # the filter's chunks remembered now
            _filtered_hybrid("vitamin D bone density", broad, offset=10),
            replace(_filtered_hybrid("gene risk", broad), filter=FilterExpression()),
            _filtered_hybrid("the of and", broad),
        ]
        for query in queries:
            given = await engine.search("c", query)

            async def embedded(vectors: npt.NDArray[np.float32] = query.vectors) -> Any:
                await asyncio.sleep(0.01)
                return vectors

            unembedded = replace(query, vectors=np.zeros((0, DIMENSIONS), np.float32))
            overlapped = await engine.search_embedding("c", unembedded, embedded())
            assert _described(overlapped) == _described(given), query.keyword_text
            assert overlapped.total_count == given.total_count
        assert (await engine.search("c", queries[0])).hits
    finally:
        await engine.close()


async def test_the_keyword_statement_is_sent_before_the_query_is_embedded(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await PostgresEngine.open(_settings(), dsn=postgres_dsn)
    sent = asyncio.Event()
    send = postgres_search.TableSearch._send_keyword

    async def spy(self: postgres_search.TableSearch, **kwargs: Any) -> Any:
        cursor = await send(self, **kwargs)
        sent.set()
        return cursor

    async def embedded() -> npt.NDArray[np.float32]:
        await sent.wait()  # never ready unless the keyword side went first
        return np.stack([vector_for("cell growth")])

    try:
        await engine.ensure_collection("c", SPEC)
        await engine.upsert("c", records(_corpus(30)))
        monkeypatch.setattr(postgres_search.TableSearch, "_send_keyword", spy)
        query = EngineQuery(Strategy.HYBRID, "cell growth", NO_VECTORS, limit=5)
        page = await asyncio.wait_for(engine.search_embedding("c", query, embedded()), 20)
        assert page.hits
    finally:
        await engine.close()


async def test_an_embedding_failure_or_overrun_fails_only_its_search_and_stops_the_embedding(
    engine: PostgresEngine,
) -> None:
    await engine.upsert("c", records(_corpus(20)))
    query = EngineQuery(Strategy.HYBRID, "cell growth", NO_VECTORS, limit=5)

    async def failing() -> npt.NDArray[np.float32]:
        raise Unavailable("the embedder is down", reason="EMBEDDER_UNAVAILABLE")

    with pytest.raises(Unavailable, match="embedder is down"):
        await engine.search_embedding("c", query, failing())
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow() -> npt.NDArray[np.float32]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return np.stack([vector_for("x")])

    with pytest.raises(NotFound):
        await engine.search_embedding("missing", query, slow())
    await asyncio.wait_for(cancelled.wait(), 5)
    cancelled.clear()
    bounded = replace(query, timeout_s=0.3)
    with pytest.raises(DeadlineExceeded, match="not embedded within"):
        await asyncio.wait_for(engine.search_embedding("c", bounded, slow()), 10)
    await asyncio.wait_for(cancelled.wait(), 5)  # the embedding stopped with the search
    page = await engine.search("c", replace(query, vectors=np.stack([vector_for("x")])))
    assert page.hits  # the database was never taken for down
