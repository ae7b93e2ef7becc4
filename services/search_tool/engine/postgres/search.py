"""One search of one collection's chunk table: both sides filtered in SQL, fused by the shared
fusion code, paged.

    dense side     per query vector, the HNSW index ordered by cosine distance under the filter
                   (pgvector's iterative scan keeps a selective filter from starving the index)
    keyword side   BM25 summed in SQL over the postings of the query terms alone (a covering
                   index by term: index-only reads, never the chunks' wide rows) with the
                   collection's term statistics (`bm25.py`); with a filter, only the postings
                   of the chunks it matches (found first, materialised once)
    completion     HYBRID: the cosine of the chunks only BM25 found and the BM25 of those only
                   the dense side found, so both sides score every candidate (`fusion.py`)

A search is one read-only transaction on one connection (`services.common.postgres.snapshot`):
every statement reads the same snapshot, bounded by the query's time budget, and statements that
do not need each other's results are sent together (pipeline mode). HYBRID with query words runs
both sides and the completion as CTEs of one statement, so a filtered HYBRID search waits for the
database twice: the totals, the filter's count (unless cached) and that statement; then the
page's chunks with the commit. The BM25 weights (idf from the collection's term statistics) are
computed in the keyword statements themselves.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import AsyncCursor, sql

from services.common.errors import DeadlineExceeded
from services.common.postgres import Snapshot
from services.search_tool.engine import bm25
from services.search_tool.engine.base import EngineQuery, Hit, SearchPage, Strategy
from services.search_tool.engine.postgres.rows import to_chunk, vector_text
from services.search_tool.engine.postgres.schema import (
    chunks_table,
    postings_table,
    terms_table,
)
from services.search_tool.engine.postgres.sql import compile_filter
from services.search_tool.fusion import (
    Candidate,
    Completion,
    all_keyword_matches,
    fuse,
    keyword_only,
)

_COUNT_CACHE_SIZE = 512
_IDS_PER_FILTER = 50_000
"""A filter matching at most this many chunks has them remembered (`MatchCounts.ids`)."""
_IDS_HELD = 500_000
"""Remembered matching chunk ids over every filter, at most (tens of MB); least recently used
go first."""
_PARSE_INLINE = 50
"""Pages up to this many chunks are decoded on the event loop (a thread hop costs more)."""


class CollectionGone(Exception):
    """The collection's catalog row is gone (dropped, by this replica or another)."""


@dataclass(frozen=True)
class CollectionTotals:
    """The collection's catalog counters, read in the search's snapshot."""

    chunks: int
    tokens: int
    write_seq: int


CountKey = tuple[int, int, str]
Vectors = npt.NDArray[np.float32]


class MatchCounts:
    """Chunks matching a filter, remembered per (collection, write sequence, statement): a
    repeated filter costs nothing until the next write, on any replica. Also remembers the last
    write sequence seen per collection, so a search can tell before its first round trip whether
    a count is probably cached.

    For a filter matching up to `_IDS_PER_FILTER` chunks and asked again at the same write
    sequence, their ids too: HYBRID's keyword side sends them instead of scanning the chunk table
    for the filter again (a write sequence names one state of the collection, so they are exact
    for it)."""

    def __init__(self, size: int = _COUNT_CACHE_SIZE, ids_held: int = _IDS_HELD) -> None:
        self._size = size
        self._counts: OrderedDict[CountKey, int] = OrderedDict()
        self._seen: dict[int, int] = {}
        self._ids: OrderedDict[CountKey, tuple[str, int]] = OrderedDict()
        self._ids_held = 0
        self._ids_limit = ids_held

    def get(self, key: CountKey) -> int | None:
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
        return found

    def put(self, key: CountKey, count: int) -> None:
        self._counts[key] = count
        if len(self._counts) > self._size:
            self._counts.popitem(last=False)

    def ids(self, key: CountKey) -> str | None:
        """The chunks matching the filter of `key`, when remembered: their ids, one per line
        (an id holds no control character), as the statements take them."""
        found = self._ids.get(key)
        if found is None:
            return None
        self._ids.move_to_end(key)
        return found[0]

    def put_ids(self, key: CountKey, ids: list[str]) -> None:
        if len(ids) > _IDS_PER_FILTER:
            return
        replaced = self._ids.pop(key, None)
        self._ids_held -= replaced[1] if replaced is not None else 0
        self._ids[key] = ("\n".join(ids), len(ids))
        self._ids_held += len(ids)
        while self._ids_held > self._ids_limit and self._ids:
            _, (_, gone) = self._ids.popitem(last=False)
            self._ids_held -= gone

    def last_seen(self, collection_id: int) -> int | None:
        """The write sequence the last search of the collection read (None: none yet)."""
        return self._seen.get(collection_id)

    def saw(self, collection_id: int, write_seq: int) -> None:
        self._seen[collection_id] = write_seq


@dataclass(frozen=True)
class SearchLimits:
    hybrid_candidates: int = 100
    """Candidates per side that HYBRID fuses (at least offset + limit)."""
    keyword_count_cap: int = 10_000
    """KEYWORD counts matching chunks up to this many."""
    ef_search: int = 100
    """HNSW candidate list size (at least the candidates asked for)."""


@dataclass
class _Count:
    """A match count a search needs: its statement, and its cache key once the write sequence is
    known."""

    statement: sql.Composed
    params: list[object]

    def key(self, collection_id: int, write_seq: int) -> CountKey:
        return (collection_id, write_seq, self.statement.as_string(None) + repr(self.params))


class TableSearch:
    """One `EngineQuery` against one collection, in a `snapshot` transaction (which it ends with
    its last read)."""

    def __init__(
        self,
        collection_id: int,
        query: EngineQuery,
        *,
        conn: Snapshot,
        limits: SearchLimits,
        counts: MatchCounts,
    ) -> None:
        self._id = collection_id
        self._query = query
        self._conn = conn
        self._limits = limits
        self._counts = counts
        self._table = chunks_table(collection_id)
        self._where, self._where_params = compile_filter(query.filter, alias="c")
        self._depth = query.offset + query.limit
        hybrid = query.strategy is Strategy.HYBRID
        self._candidates = max(self._depth, limits.hybrid_candidates) if hybrid else self._depth
        semantic = query.strategy is Strategy.SEMANTIC
        self._terms = Counter() if semantic else bm25.query_terms(query.keyword_query)
        self._keyword_matches = 0
        self._captured: list[str] = []
        """The chunks the filter matched, when the keyword or hybrid statement was asked to
        return them (`capture`; read by `_keyword_list` and `_hybrid_lists`)."""

    async def run(self, pending: Awaitable[Vectors] | None = None) -> SearchPage:
        """Raises `CollectionGone` when the collection's catalog row is missing.

        `pending`: HYBRID's query vectors, still being computed (the query's own are ignored).
        The keyword side is sent first and runs in the database meanwhile; the dense side follows
        once they are ready."""
        query = self._query
        count = self._count_needed()
        seen = self._counts.last_seen(self._id)
        cached = (
            None if count is None or seen is None else self._counts.get(count.key(self._id, seen))
        )
        # first round trip: the totals, the count unless cached, both sides' candidates
        totals_cursor = await self._conn.execute(
            "SELECT chunk_count, token_count, write_seq FROM quarry_collections WHERE id = %s",
            (self._id,),
        )
        count_cursor, counted = None, None
        if count is not None and not cached:  # unknown, or probably no match: count now
            count_cursor = await self._conn.execute(count.statement, count.params)
            if query.strategy is not Strategy.KEYWORD:
                # a filter no chunk matches skips the dense side (HNSW would scan in vain)
                counted = await self._fetch_count(count_cursor)
                count_cursor = None
        overlapped = pending is not None and bool(self._terms) and counted != 0
        if pending is not None and not overlapped:  # no keyword side to start first
            query = self._query = replace(query, vectors=await self._vectors(pending))
        together = (
            not overlapped
            and query.strategy is Strategy.HYBRID
            and len(query.vectors) > 0
            and bool(self._terms)
            and counted != 0
        )
        remembered = None
        if count is not None and cached is not None and seen is not None:
            remembered = self._counts.ids(count.key(self._id, seen))
        # the filter's chunks are asked for once it repeats within a write sequence (its count
        # was cached): under a stream of writes no search pays for returning them
        capture = remembered is None and cached is not None and cached <= _IDS_PER_FILTER
        keyword_list: list[Candidate] | None
        completion: Completion | None
        if overlapped and pending is not None:
            keyword_cursor = await self._send_keyword(matching_ids=remembered, capture=capture)
            query = self._query = replace(query, vectors=await self._vectors(pending))
            dense_cursors = await self._send_dense(skip=False)
            totals = await self._totals(totals_cursor)
            self._counts.saw(self._id, totals.write_seq)
            if remembered is not None and totals.write_seq != seen and keyword_cursor is not None:
                # written since: the remembered chunks may not be the filter's any more
                await keyword_cursor.fetchall()
                keyword_cursor = await self._send_keyword()
            dense_lists = await self._dense_lists(dense_cursors)
            keyword_list = await self._keyword_list(keyword_cursor)
            if count is not None and capture:
                self._counts.put_ids(count.key(self._id, totals.write_seq), self._captured)
            matched = await self._matched(count, totals, seen, cached, count_cursor, counted)
            # second: each side's score of what only the other side found
            completion = await self._completion(dense_lists, keyword_list)
        elif together:  # both sides and the completion in one statement
            hybrid_cursor = await self._send_hybrid(matching_ids=remembered, capture=capture)
            totals = await self._totals(totals_cursor)
            self._counts.saw(self._id, totals.write_seq)
            if remembered is not None and totals.write_seq != seen:
                # written since: the remembered chunks may not be the filter's any more
                await hybrid_cursor.fetchall()
                hybrid_cursor = await self._send_hybrid()
            dense_lists, keyword_list, completion = await self._hybrid_lists(hybrid_cursor)
            if count is not None and capture:
                self._counts.put_ids(count.key(self._id, totals.write_seq), self._captured)
            matched = await self._matched(count, totals, seen, cached, count_cursor, counted)
        else:
            dense_cursors = await self._send_dense(skip=counted == 0)
            keyword_cursor = await self._send_keyword()
            totals = await self._totals(totals_cursor)
            self._counts.saw(self._id, totals.write_seq)
            dense_lists = await self._dense_lists(dense_cursors)
            keyword_list = await self._keyword_list(keyword_cursor)
            matched = await self._matched(count, totals, seen, cached, count_cursor, counted)
            # second: each side's score of what only the other side found
            completion = await self._completion(dense_lists, keyword_list)
        fused = fuse(dense_lists, keyword_list, query.fusion, completion)
        page = fused[query.offset : self._depth]
        # third: the page's chunks
        chunks = await self._chunks([f.id for f in page])
        hits = [
            Hit(chunks[f.id], f.score, f.dense_score, f.keyword_score)
            for f in page
            if f.id in chunks
        ]
        return SearchPage(hits=hits, total_count=max(matched, len(fused)))

    async def _vectors(self, pending: Awaitable[Vectors]) -> Vectors:
        """The query vectors once computed, within the query's time budget (the database's
        statements are bounded by it too, by `statement_timeout`)."""
        try:
            async with asyncio.timeout(self._query.timeout_s):
                return await pending
        except TimeoutError:
            raise DeadlineExceeded(
                f"the query was not embedded within the search's {self._query.timeout_s} s",
                reason="EMBEDDING_TIMEOUT",
            ) from None

    # -- counts -------------------------------------------------------------------------------

    def _count_needed(self) -> _Count | None:
        """SEMANTIC / HYBRID: the chunks matching the filter (None without a filter: the
        collection's count). KEYWORD: None (the keyword statement counts its matches)."""
        if self._query.strategy is Strategy.KEYWORD:
            return None
        if self._query.filter.is_empty:
            return None
        statement = sql.SQL("SELECT count(*) FROM {} c WHERE {}").format(self._table, self._where)
        return _Count(statement, list(self._where_params))

    async def _matched(
        self,
        count: _Count | None,
        totals: CollectionTotals,
        seen: int | None,
        cached: int | None,
        cursor: AsyncCursor[Any] | None,
        counted: int | None,
    ) -> int:
        """The count `count` asks for in this snapshot: fetched here, or cached for its write
        sequence, or counted now (the collection was written since the last search saw it)."""
        if count is None:
            return (
                self._keyword_matches if self._query.strategy is Strategy.KEYWORD else totals.chunks
            )
        key = count.key(self._id, totals.write_seq)
        if counted is not None:
            found = counted
        elif cursor is not None:
            found = await self._fetch_count(cursor)
        elif cached is not None and seen == totals.write_seq:
            return cached
        elif (remembered := self._counts.get(key)) is not None:
            return remembered
        else:
            found = await self._fetch_count(await self._conn.execute(count.statement, count.params))
        self._counts.put(key, found)
        return found

    @staticmethod
    async def _fetch_count(cursor: AsyncCursor[Any]) -> int:
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def _totals(self, cursor: AsyncCursor[Any]) -> CollectionTotals:
        row = await cursor.fetchone()
        if row is None:
            raise CollectionGone
        return CollectionTotals(int(row[0]), int(row[1]), int(row[2]))

    # -- dense side ---------------------------------------------------------------------------

    async def _send_dense(self, *, skip: bool) -> list[AsyncCursor[Any]] | None:
        """One statement per query vector: the HNSW index ordered by cosine distance under the
        filter. None for KEYWORD; [] when nothing can match."""
        query = self._query
        if query.strategy is Strategy.KEYWORD:
            return None
        if skip or len(query.vectors) == 0:
            return []
        statement = sql.SQL(
            "SELECT c.id, 1 - (c.embedding <=> %s::vector) FROM {} c WHERE {} "
            "ORDER BY c.embedding <=> %s::vector LIMIT %s"
        ).format(self._table, self._where)
        ef_search = str(max(self._limits.ef_search, self._candidates))
        await self._conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            (ef_search,),
        )
        cursors = []
        for vector in query.vectors:
            text = vector_text(vector)
            params = [text, *self._where_params, text, self._candidates]
            cursors.append(await self._conn.execute(statement, params))
        return cursors

    async def _dense_lists(self, cursors: list[AsyncCursor[Any]] | None) -> list[list[Candidate]]:
        """One candidate list per query vector (KEYWORD: none)."""
        if cursors is None:
            return []
        if not cursors:
            return [[] for _ in self._query.vectors]
        lists: list[list[Candidate]] = []
        for cursor in cursors:
            ranking = [Candidate(str(i), float(s)) for i, s in await cursor.fetchall()]
            ranking.sort(key=lambda c: -c.score)  # relaxed order: nearly sorted
            lists.append(ranking)
        if len(lists) > 1:
            lists = [ranking for ranking in lists if ranking]
        return lists

    # -- keyword side -------------------------------------------------------------------------

    async def _send_keyword(
        self, *, matching_ids: str | None = None, capture: bool = False
    ) -> AsyncCursor[Any] | None:
        """BM25 top candidates under the filter. None for SEMANTIC and for no query words.

        With a filter, the chunks matching it are found first (its indexes, or one pass over the
        chunk table's narrow pages) and only their postings are summed: checking each chunk that
        holds a query word one by one costs a random read per chunk, thousands for common words.
        `matching_ids` and `capture` as for `_send_hybrid`."""
        if self._query.strategy is Strategy.SEMANTIC or not self._terms:
            return None
        filtered = not self._query.filter.is_empty
        if not filtered:
            scored, params = self._scored()
        elif matching_ids is not None:
            scored, params = self._scored(among=matching_ids)
        else:
            matching = sql.SQL("SELECT c.id FROM {} c WHERE {}").format(self._table, self._where)
            scored, params = self._scored(within=(matching, list(self._where_params)))
        ranked = sql.SQL(
            "SELECT s.chunk_id, s.score, count(*) OVER () AS n FROM scored s"
            " ORDER BY s.score DESC, s.chunk_id LIMIT %s"
        )
        if capture and filtered and matching_ids is None:
            # the matching chunks follow the candidates, marked by a count of -1
            statement = sql.SQL(
                "{}, kw AS MATERIALIZED ({}) SELECT chunk_id, score, n FROM kw"
                " UNION ALL SELECT id, 0::float8, -1 FROM matching"
            ).format(scored, ranked)
        else:
            statement = sql.SQL("{} {}").format(scored, ranked)
        prepare = False if matching_ids is not None else None  # as in `_send_hybrid`
        return await self._conn.execute(statement, [*params, self._candidates], prepare=prepare)

    async def _keyword_list(self, cursor: AsyncCursor[Any] | None) -> list[Candidate] | None:
        """The keyword candidates; notes how many chunks the words and filter match (KEYWORD's
        total, up to the cap: every scored chunk, counted before the limit)."""
        if self._query.strategy is Strategy.SEMANTIC:
            return None
        if cursor is None:
            return []
        rows = await cursor.fetchall()
        candidates = [Candidate(str(i), float(s)) for i, s, n in rows if n >= 0]
        self._captured = [str(i) for i, _, n in rows if n < 0]
        if candidates:
            self._keyword_matches = min(int(rows[0][2]), self._limits.keyword_count_cap)
        return candidates

    def _scored(
        self,
        *,
        among: str | None = None,
        within: tuple[sql.Composed, list[object]] | None = None,
    ) -> tuple[sql.Composed, list[object]]:
        """`WITH ... scored AS (...)`: BM25 of every chunk holding a query term, summed from the
        postings of the query terms alone (`chunk_id`, `score`); of the chunks `among` (many,
        checked per posting), or of those the statement `within` selects (materialised once,
        then hash-joined), when given. Each term's weight is its idf from the collection's
        statistics (`bm25.idf`) times its count in the query; terms no chunk holds weigh nothing
        (`bm25.weights`). float8 throughout: a bare decimal literal is `numeric`, whose
        arithmetic is several times slower."""
        matching, matching_params = within if within is not None else (None, [])
        statement = sql.SQL(
            "WITH totals AS ("
            "SELECT (chunk_count - termless_count)::float8 AS n, coalesce(nullif("
            "token_count::float8 / nullif(chunk_count - termless_count, 0), 0), 1.0) AS avgdl"
            " FROM quarry_collections WHERE id = %s),"
            " q AS (SELECT t.term,"
            " ln((totals.n - t.df + 0.5::float8) / (t.df + 0.5::float8) + 1.0::float8) * w.n AS w"
            " FROM unnest(%s::text[], %s::int[]) AS w(term, n)"
            " JOIN {terms} t ON t.term = w.term CROSS JOIN totals WHERE t.df > 0),"
            " {matching}"
            " scored AS (SELECT p.chunk_id, sum({bm25}) AS score"
            " FROM q JOIN {postings} p ON p.term = q.term {among} {join} CROSS JOIN totals"
            " GROUP BY p.chunk_id)"
        ).format(
            terms=terms_table(self._id),
            matching=(
                sql.SQL("matching AS MATERIALIZED ({}),").format(matching)
                if matching is not None
                else sql.SQL("")
            ),
            bm25=_BM25_TERM,
            postings=postings_table(self._id),
            among=(
                # `|| ''` keeps the many ids out of the index condition (one index search per
                # id): checked against a hash of them while the terms' postings are read. One
                # text of ids, split by the server: an array parameter of thousands of ids
                # costs the client milliseconds to encode on every search
                sql.SQL("AND (p.chunk_id || '') = ANY(string_to_array(%s::text, E'\\n'))")
                if among is not None
                else sql.SQL("")
            ),
            join=(
                sql.SQL("JOIN matching m ON m.id = p.chunk_id")
                if matching is not None
                else sql.SQL("")
            ),
        )
        params: list[object] = [
            self._id,
            list(self._terms),
            list(self._terms.values()),
            *matching_params,
        ]
        if among is not None:
            params.append(among)
        return statement, params

    # -- HYBRID in one statement ------------------------------------------------------------

    async def _send_hybrid(
        self, *, matching_ids: str | None = None, capture: bool = False
    ) -> AsyncCursor[Any]:
        """HYBRID with query words and vectors: the keyword candidates, each query vector's dense
        candidates and the completion (the best cosine of each keyword-only candidate, the BM25 of
        each dense-only one) in one statement, rows tagged by what they are (`_hybrid_lists`). The
        same SQL as the separate statements, as CTEs, so one wait instead of two.

        With a filter, the keyword side sums the postings of the chunks matching it: those of
        `matching_ids` when given (remembered for this write sequence), else found by the filter
        (a scan of the chunk table), and then, with `capture`, returned too (to be remembered)."""
        query = self._query
        if self._query.filter.is_empty:
            scored, params = self._scored()
        elif matching_ids is not None:
            scored, params = self._scored(among=matching_ids)
        else:
            matching = sql.SQL("SELECT c.id FROM {} c WHERE {}").format(self._table, self._where)
            scored, params = self._scored(within=(matching, list(self._where_params)))
        await self._conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            (str(max(self._limits.ef_search, self._candidates)),),
        )
        parts: list[sql.Composable] = [
            scored,
            sql.SQL(
                ", kw AS MATERIALIZED (SELECT s.chunk_id AS id, s.score FROM scored s"
                " ORDER BY s.score DESC, s.chunk_id LIMIT %s)"
            ),
        ]
        params.append(self._candidates)
        dense_names = [sql.Identifier(f"d{i}") for i in range(len(query.vectors))]
        for name, vector in zip(dense_names, query.vectors, strict=True):
            parts.append(
                sql.SQL(
                    ", {} AS MATERIALIZED (SELECT c.id, 1 - (c.embedding <=> %s::vector) AS score"
                    " FROM {} c WHERE {} ORDER BY c.embedding <=> %s::vector LIMIT %s)"
                ).format(name, self._table, self._where)
            )
            text = vector_text(vector)
            params.extend([text, *self._where_params, text, self._candidates])
        dense_ids = sql.SQL(" UNION ").join(
            sql.SQL("SELECT id FROM {}").format(name) for name in dense_names
        )
        parts.append(
            sql.SQL(
                ", dense_ids AS ({dense_ids}),"
                " cos AS (SELECT c.id, max(1 - (c.embedding <=> v.v)) AS score FROM {table} c"
                " CROSS JOIN unnest(%s::vector[]) AS v(v)"
                " WHERE c.id IN (SELECT id FROM kw EXCEPT SELECT id FROM dense_ids)"
                " GROUP BY c.id)"
                " SELECT 0, id, score FROM kw"
            ).format(dense_ids=dense_ids, table=self._table)
        )
        params.append([vector_text(v) for v in query.vectors])
        for i, name in enumerate(dense_names):
            parts.append(
                sql.SQL(" UNION ALL SELECT {}, id, score FROM {}").format(sql.Literal(i + 1), name)
            )
        parts.append(sql.SQL(" UNION ALL SELECT -1, id, score FROM cos"))
        if capture and not self._query.filter.is_empty:
            parts.append(sql.SQL(" UNION ALL SELECT -3, id, 0::float8 FROM matching"))
        # the ids' array is planned for its size each time: a generic plan assumes a few rows
        prepare = False if matching_ids is not None else None
        return await self._conn.execute(sql.Composed(parts), params, prepare=prepare)

    async def _hybrid_lists(
        self, cursor: AsyncCursor[Any]
    ) -> tuple[list[list[Candidate]], list[Candidate], Completion | None]:
        """(dense lists, keyword list, completion) from `_send_hybrid`'s rows, each list in the
        order its statement produced it (as the separate statements return them); the filter's
        chunks, when captured, go to `_captured`."""
        keyword: list[Candidate] = []
        dense: list[list[Candidate]] = [[] for _ in self._query.vectors]
        cosines: dict[str, float] = {}
        matching: list[str] = []
        for side, chunk_id, score in await cursor.fetchall():
            if side == 0:
                keyword.append(Candidate(str(chunk_id), float(score)))
            elif side > 0:
                dense[side - 1].append(Candidate(str(chunk_id), float(score)))
            elif side == -1:
                cosines[str(chunk_id)] = float(score)
            else:
                matching.append(str(chunk_id))
        for ranking in dense:
            ranking.sort(key=lambda c: -c.score)  # relaxed order: nearly sorted
        if len(dense) > 1:
            dense = [ranking for ranking in dense if ranking]
        self._captured = matching
        completion = (
            Completion(cosines, all_keyword_matches(keyword, self._candidates)) if dense else None
        )
        return dense, keyword, completion

    # -- completion and page ------------------------------------------------------------------

    async def _completion(
        self, dense_lists: list[list[Candidate]], keyword_list: list[Candidate] | None
    ) -> Completion | None:
        """HYBRID: the best cosine over the query vectors of each keyword-only candidate (a
        dense-only candidate's BM25 is the fusion's bound)."""
        if keyword_list is None or not dense_lists:
            return None
        missing = keyword_only(dense_lists, keyword_list)
        cosines = None
        if missing and len(self._query.vectors):
            vectors = [vector_text(v) for v in self._query.vectors]
            statement = sql.SQL(
                "SELECT c.id, max(1 - (c.embedding <=> q.v)) FROM {} c"
                " CROSS JOIN unnest(%s::vector[]) AS q(v) WHERE c.id = ANY(%s) GROUP BY c.id"
            ).format(self._table)
            cosines = await self._conn.execute(statement, (vectors, missing))
        return Completion(
            await _by_id(cosines), all_keyword_matches(keyword_list, self._candidates)
        )

    async def _chunks(self, ids: Sequence[str]) -> dict[str, Any]:
        """The page's chunks by id (a chunk deleted meanwhile is left out)."""
        if not ids:
            return {}
        statement = sql.SQL("SELECT id, chunk_json FROM {} WHERE id = ANY(%s)").format(self._table)
        cursor = await self._conn.execute(statement, (list(ids),))
        await self._conn.end()  # the last read: the transaction's end travels with it
        rows = [(str(i), str(j)) for i, j in await cursor.fetchall()]
        if len(rows) <= _PARSE_INLINE:
            return {i: to_chunk(j) for i, j in rows}
        return await asyncio.to_thread(lambda: {i: to_chunk(j) for i, j in rows})


def _float8(value: float) -> sql.Composed:
    return sql.SQL("{}::float8").format(sql.Literal(value))


_BM25_TERM = sql.SQL(
    "q.w * {k1_plus_1} * p.tf / (p.tf + {k1} * ({one_minus_b} + {b} * p.doc_length / totals.avgdl))"
).format(
    k1_plus_1=_float8(bm25.K1 + 1.0),
    k1=_float8(bm25.K1),
    one_minus_b=_float8(1.0 - bm25.B),
    b=_float8(bm25.B),
)
"""One posting's BM25 contribution (query weight `q.w`, collection `totals`, posting `p`)."""


async def _by_id(cursor: AsyncCursor[Any] | None) -> dict[str, float]:
    if cursor is None:
        return {}
    return {str(i): float(s) for i, s in await cursor.fetchall()}
