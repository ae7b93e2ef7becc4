"""One search of one collection's chunk table: both sides filtered in SQL, fused by the shared
fusion code, paged.

    dense side     per query vector, the HNSW index ordered by cosine distance under the filter
                   (pgvector's iterative scan keeps a selective filter from starving the index)
    keyword side   BM25 summed in SQL over the postings of the query terms alone (a covering
                   index by term: index-only reads, never the chunks' wide rows) with the
                   collection's term statistics (`bm25.py`); a filter joins the chunks scored
    completion     HYBRID: the cosine of the chunks only BM25 found and the BM25 of those only
                   the dense side found, so both sides score every candidate (`fusion.py`)

Every statement runs in a transaction bounded by the query's time budget. The dense and keyword
sides run at once on two pooled connections.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from services.search_tool.engine.base import EngineQuery, Hit, SearchPage, Strategy
from services.search_tool.engine.postgres import bm25
from services.search_tool.engine.postgres.rows import to_chunk, vector_text
from services.search_tool.engine.postgres.schema import (
    chunks_table,
    postings_table,
    terms_table,
)
from services.search_tool.engine.postgres.sql import compile_filter
from services.search_tool.fusion import Candidate, Completion, fuse, missing_sides

Run = Callable[[Callable[[AsyncConnection[Any]], Awaitable[Any]]], Awaitable[Any]]
"""Runs one unit of work in a transaction bounded by the query's budget."""

_COUNT_CACHE_SIZE = 512


@dataclass(frozen=True)
class CollectionTotals:
    """What a search reads from the catalog first."""

    collection_id: int
    chunks: int
    tokens: int
    write_seq: int

    @property
    def avgdl(self) -> float:
        return self.tokens / self.chunks if self.chunks else 0.0


class MatchCounts:
    """Chunks matching a filter (or a filter and query words), remembered per (collection, write
    sequence, statement): a repeated filter costs nothing until the next write, on any replica."""

    def __init__(self, size: int = _COUNT_CACHE_SIZE) -> None:
        self._size = size
        self._counts: OrderedDict[tuple[int, int, str, str], int] = OrderedDict()

    def get(self, key: tuple[int, int, str, str]) -> int | None:
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
        return found

    def put(self, key: tuple[int, int, str, str], count: int) -> None:
        self._counts[key] = count
        if len(self._counts) > self._size:
            self._counts.popitem(last=False)


@dataclass(frozen=True)
class SearchLimits:
    hybrid_candidates: int = 100
    """Candidates per side that HYBRID fuses (at least offset + limit)."""
    keyword_count_cap: int = 10_000
    """KEYWORD counts matching chunks up to this many."""
    ef_search: int = 100
    """HNSW candidate list size (at least the candidates asked for)."""


class TableSearch:
    """One `EngineQuery` against one collection."""

    def __init__(
        self,
        totals: CollectionTotals,
        query: EngineQuery,
        *,
        run: Run,
        limits: SearchLimits,
        counts: MatchCounts,
    ) -> None:
        self._totals = totals
        self._query = query
        self._run = run
        self._limits = limits
        self._counts = counts
        self._table = chunks_table(totals.collection_id)
        self._where, self._where_params = compile_filter(query.filter, alias="c")
        self._depth = query.offset + query.limit
        hybrid = query.strategy is Strategy.HYBRID
        self._candidates = max(self._depth, limits.hybrid_candidates) if hybrid else self._depth
        semantic = query.strategy is Strategy.SEMANTIC
        self._terms = Counter() if semantic else bm25.query_terms(query.keyword_text)

    async def run(self) -> SearchPage:
        query = self._query
        weights = await self._weights()
        (matched, dense_lists), (keyword_list, keyword_matches) = await asyncio.gather(
            self._dense_side(), self._keyword_side(weights)
        )
        completion = await self._completion(dense_lists, keyword_list, weights)
        if matched is None:
            matched = keyword_matches or 0
        fused = fuse(dense_lists, keyword_list, query.fusion, completion)
        page = fused[query.offset : self._depth]
        chunks = await self._chunks([f.id for f in page])
        hits = [
            Hit(chunks[f.id], f.score, f.dense_score, f.keyword_score)
            for f in page
            if f.id in chunks
        ]
        return SearchPage(hits=hits, total_count=max(matched, len(fused)))

    async def _weights(self) -> dict[str, float]:
        """Each query term's idf times its count in the query (`bm25.weights`)."""
        if not self._terms or self._query.strategy is Strategy.SEMANTIC:
            return {}
        statement = sql.SQL("SELECT term, df FROM {} WHERE term = ANY(%s)").format(
            terms_table(self._totals.collection_id)
        )

        async def work(conn: AsyncConnection[Any]) -> dict[str, int]:
            cursor = await conn.execute(statement, (list(self._terms),))
            return {str(term): int(df) for term, df in await cursor.fetchall()}

        frequencies = await self._run(work)
        return bm25.weights(self._terms, frequencies, self._totals.chunks)

    async def _dense_side(self) -> tuple[int | None, list[list[Candidate]]]:
        """(chunks matching the filter, one candidate list per query vector);
        KEYWORD: (None, [])."""
        query = self._query
        if query.strategy is Strategy.KEYWORD:
            return None, []
        matched = await self._matching()
        if len(query.vectors) == 0 or matched == 0:
            return matched, [[] for _ in query.vectors]
        statement = sql.SQL(
            "SELECT c.id, 1 - (c.embedding <=> %s::vector) FROM {} c WHERE {} "
            "ORDER BY c.embedding <=> %s::vector LIMIT %s"
        ).format(self._table, self._where)
        ef_search = str(max(self._limits.ef_search, self._candidates))

        async def work(conn: AsyncConnection[Any]) -> list[list[Candidate]]:
            await conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true),"
                " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                (ef_search,),
            )
            lists: list[list[Candidate]] = []
            for vector in query.vectors:
                text = vector_text(vector)
                params = [text, *self._where_params, text, self._candidates]
                cursor = await conn.execute(statement, params)
                ranking = [Candidate(str(i), float(s)) for i, s in await cursor.fetchall()]
                ranking.sort(key=lambda c: -c.score)  # relaxed order: nearly sorted
                lists.append(ranking)
            return lists

        found: list[list[Candidate]] = await self._run(work)
        if len(query.vectors) > 1:
            found = [ranking for ranking in found if ranking]
        return matched, found

    async def _keyword_side(
        self, weights: dict[str, float]
    ) -> tuple[list[Candidate] | None, int | None]:
        """(candidates, chunks matching the words and the filter — KEYWORD only, up to the cap);
        SEMANTIC: (None, None)."""
        query = self._query
        if query.strategy is Strategy.SEMANTIC:
            return None, None
        if not weights:
            return [], 0
        scored, scored_params = self._scored(weights)
        statement = sql.SQL(
            "WITH scored AS ({scored}) SELECT s.chunk_id, s.score FROM scored s {filtered}"
            " ORDER BY s.score DESC, s.chunk_id LIMIT %s"
        ).format(scored=scored, filtered=self._filter_join("s.chunk_id"))
        params = [*scored_params, *self._where_params, self._candidates]

        async def work(conn: AsyncConnection[Any]) -> list[Candidate]:
            cursor = await conn.execute(statement, params)
            return [Candidate(str(i), float(s)) for i, s in await cursor.fetchall()]

        if query.strategy is Strategy.HYBRID:
            return await self._run(work), None
        ranked, total = await asyncio.gather(self._run(work), self._keyword_matches(weights))
        return ranked, total

    def _scored(
        self, weights: dict[str, float], *, only: Sequence[str] | None = None
    ) -> tuple[sql.Composed, list[object]]:
        """BM25 of every chunk holding a query term (of the chunks `only`, when given), summed
        from the postings of the query terms alone: `chunk_id`, `score`."""
        statement = sql.SQL(
            "SELECT p.chunk_id, sum(q.w * {k1_plus_1} * p.tf"
            " / (p.tf + {k1} * ({one_minus_b} + {b} * p.doc_length / %s::float8))) AS score"
            " FROM unnest(%s::text[], %s::float8[]) AS q(term, w)"
            " JOIN {postings} p ON p.term = q.term {only} GROUP BY p.chunk_id"
        ).format(
            k1_plus_1=sql.Literal(bm25.K1 + 1.0),
            k1=sql.Literal(bm25.K1),
            one_minus_b=sql.Literal(1.0 - bm25.B),
            b=sql.Literal(bm25.B),
            postings=postings_table(self._totals.collection_id),
            only=sql.SQL("AND p.chunk_id = ANY(%s)") if only is not None else sql.SQL(""),
        )
        avgdl = self._totals.avgdl or 1.0
        params: list[object] = [avgdl, list(weights), list(weights.values())]
        if only is not None:
            params.append(list(only))
        return statement, params

    def _filter_join(self, chunk_id: str) -> sql.Composable:
        """Keeps the rows whose chunk matches the filter (nothing when there is none)."""
        if self._query.filter.is_empty:
            return sql.SQL("")
        return sql.SQL("JOIN {} c ON c.id = {} AND {}").format(
            self._table, sql.SQL(chunk_id), self._where
        )

    async def _matching(self) -> int:
        """Chunks matching the filter (the collection's count when there is none)."""
        if self._query.filter.is_empty:
            return self._totals.chunks
        statement = sql.SQL("SELECT count(*) FROM {} c WHERE {}").format(self._table, self._where)
        return await self._count(statement, self._where_params, "")

    async def _keyword_matches(self, weights: dict[str, float]) -> int:
        """Chunks holding a query term and matching the filter, up to the cap."""
        statement = sql.SQL(
            "SELECT count(*) FROM (SELECT DISTINCT p.chunk_id FROM {} p {} WHERE p.term = ANY(%s)"
            " LIMIT %s) matched"
        ).format(postings_table(self._totals.collection_id), self._filter_join("p.chunk_id"))
        terms = sorted(weights)
        params = [*self._where_params, terms, self._limits.keyword_count_cap]
        return await self._count(statement, params, " ".join(terms))

    async def _count(self, statement: sql.Composed, params: list[object], words: str) -> int:
        key = (
            self._totals.collection_id,
            self._totals.write_seq,
            statement.as_string(None) + repr(params),
            words,
        )
        cached = self._counts.get(key)
        if cached is not None:
            return cached

        async def work(conn: AsyncConnection[Any]) -> int:
            row = await (await conn.execute(statement, params)).fetchone()
            return int(row[0]) if row else 0

        counted: int = await self._run(work)
        self._counts.put(key, counted)
        return counted

    async def _completion(
        self,
        dense_lists: list[list[Candidate]],
        keyword_list: list[Candidate] | None,
        weights: dict[str, float],
    ) -> Completion | None:
        """HYBRID: each side's score of the candidates only the other side found."""
        if keyword_list is None or not dense_lists:
            return None
        keyword_only, dense_only = missing_sides(dense_lists, keyword_list)
        cosines, scores = await asyncio.gather(
            self._cosines_at(keyword_only), self._keyword_scores_at(dense_only, weights)
        )
        return Completion(dense=cosines, keyword=scores)

    async def _cosines_at(self, ids: Sequence[str]) -> dict[str, float]:
        """The best cosine over the query vectors of these chunks."""
        if not ids or len(self._query.vectors) == 0:
            return {}
        vectors = [vector_text(v) for v in self._query.vectors]
        statement = sql.SQL(
            "SELECT c.id, max(1 - (c.embedding <=> q.v)) FROM {} c"
            " CROSS JOIN unnest(%s::vector[]) AS q(v) WHERE c.id = ANY(%s) GROUP BY c.id"
        ).format(self._table)

        async def work(conn: AsyncConnection[Any]) -> dict[str, float]:
            cursor = await conn.execute(statement, (vectors, list(ids)))
            return {str(i): float(s) for i, s in await cursor.fetchall()}

        found: dict[str, float] = await self._run(work)
        return found

    async def _keyword_scores_at(
        self, ids: Sequence[str], weights: dict[str, float]
    ) -> dict[str, float]:
        """BM25 of these chunks (those holding no query term score 0 and are left out)."""
        if not ids or not weights:
            return {}
        statement, params = self._scored(weights, only=ids)

        async def work(conn: AsyncConnection[Any]) -> dict[str, float]:
            cursor = await conn.execute(statement, params)
            return {str(i): float(s) for i, s in await cursor.fetchall()}

        found: dict[str, float] = await self._run(work)
        return found

    async def _chunks(self, ids: Sequence[str]) -> dict[str, Any]:
        """The page's chunks by id (a chunk deleted meanwhile is left out)."""
        if not ids:
            return {}
        statement = sql.SQL("SELECT id, chunk_json FROM {} WHERE id = ANY(%s)").format(self._table)

        async def work(conn: AsyncConnection[Any]) -> list[tuple[str, str]]:
            cursor = await conn.execute(statement, (list(ids),))
            return [(str(i), str(j)) for i, j in await cursor.fetchall()]

        rows: list[tuple[str, str]] = await self._run(work)
        return await asyncio.to_thread(lambda: {i: to_chunk(j) for i, j in rows})
