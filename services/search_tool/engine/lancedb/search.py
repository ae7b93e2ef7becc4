"""One search of one LanceDB table: both sides filtered by the engine, fused, paged.

Candidates are ranked and fused by row address. HYBRID's keyword side reads its candidates'
vectors (and, beside a flat dense scan, their chunks) and SEMANTIC its candidates' chunks in the
ranking query itself; the page's other chunks are then taken by address. A concurrent write can
move rows in between (a compaction, an update): the page then comes back short, and the search
runs once more against the new version.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.errors import DeadlineExceeded
from services.search_tool.documents import Chunk
from services.search_tool.engine.base import EngineQuery, Hit, SearchPage, Strategy
from services.search_tool.engine.lancedb.held import (
    Held,
    HeldCollections,
    held_cosines,
    ranked_dense,
)
from services.search_tool.engine.lancedb.indexes import IndexPolicy, probes_for
from services.search_tool.engine.lancedb.retrieval import (
    ALL_PARTITIONS,
    FetchedRows,
    best_cosines,
    chunks_at,
    cosines_at,
    dense_candidates,
    keyword_candidates,
)
from services.search_tool.engine.lancedb.rows import to_chunk
from services.search_tool.engine.lancedb.sql import compile_filter
from services.search_tool.fusion import (
    Candidate,
    Completion,
    all_keyword_matches,
    fuse,
    keyword_only,
)

_COUNT_CACHE_SIZE = 512


class _RowsMoved(Exception):
    """Rows of a page moved between ranking and fetching (a concurrent write)."""


@dataclass(frozen=True)
class SearchLimits:
    """How deep each side of a search goes."""

    policy: IndexPolicy
    """When a filtered dense search probes every IVF partition, and how many otherwise."""
    hybrid_candidates: int = 100
    """Candidates per side that HYBRID fuses (at least offset + limit)."""
    keyword_count_cap: int = 10_000
    """KEYWORD counts matching chunks up to this many."""


class FilterCounts:
    """Rows matching a filter, remembered per (collection, table version, filter) for the most
    recently used filters: a repeated filter costs nothing until the next write."""

    def __init__(self, size: int = _COUNT_CACHE_SIZE) -> None:
        self._size = size
        self._counts: OrderedDict[tuple[str, int, str | None], int] = OrderedDict()

    async def count(self, name: str, table: Any, where: str | None) -> int:
        key = (name, await table.version(), where)
        cached = self._counts.get(key)
        if cached is not None:
            self._counts.move_to_end(key)
            return cached
        matched = int(await table.count_rows(where))
        self._counts[key] = matched
        if len(self._counts) > self._size:
            self._counts.popitem(last=False)
        return matched

    def forget(self, name: str) -> None:
        """Drop what is remembered about a collection."""
        self._counts = OrderedDict((k, v) for k, v in self._counts.items() if k[0] != name)


async def search_table(
    name: str,
    table: Any,
    query: EngineQuery,
    *,
    limits: SearchLimits,
    counts: FilterCounts,
    indexed_rows: Callable[[], int | None],
    pending_vectors: Awaitable[npt.NDArray[np.float32]] | None = None,
    held: HeldCollections | None = None,
) -> SearchPage:
    """Run `query` within its time budget. `indexed_rows` tells the rows the vector index covers
    now (None: no vector index, dense search scans every row the filter leaves). With
    `pending_vectors`, they replace `query.vectors` once ready; the keyword side does not wait for
    them. A collection `held` in memory at the table's version is searched there."""
    try:
        async with asyncio.timeout(query.timeout_s):
            search = _TableSearch(
                name, table, query, limits, counts, indexed_rows, pending_vectors, held
            )
            try:
                return await search.run(final=False)
            except _RowsMoved:
                return await search.run(final=True)
    except TimeoutError:
        raise DeadlineExceeded(
            f"search in {name!r} took longer than {query.timeout_s} s",
            metadata={"collection": name},
        ) from None


@dataclass(frozen=True)
class ScoredCandidates:
    """Everything a search fuses: candidates by row address, with both sides' scores."""

    dense: list[list[Candidate]]
    """One list per query vector, best first (empty for KEYWORD)."""
    keyword: list[Candidate] | None
    """BM25 candidates, best first (None for SEMANTIC)."""
    completion: Completion | None
    """HYBRID: each side's score of the candidates only the other side found."""


async def scored_candidates(
    table: Any,
    query: EngineQuery,
    *,
    limits: SearchLimits,
    counts: FilterCounts,
    indexed_rows: Callable[[], int | None],
) -> tuple[ScoredCandidates, dict[str, Chunk]]:
    """What `search_table` would fuse for `query`, and the chunk at each candidate address:
    fusion parameters are chosen by replaying these (`bench/eval_scifact.py`)."""
    search = _TableSearch("", table, query, limits, counts, indexed_rows)
    scored, _ = await search.candidates()
    addresses = {int(c.id) for ranking in scored.dense for c in ranking}
    addresses.update(int(c.id) for c in scored.keyword or ())
    chunks = await chunks_at(table, sorted(addresses), None)
    return scored, {str(address): chunk for address, chunk in chunks.items()}


class _TableSearch:
    def __init__(
        self,
        name: str,
        table: Any,
        query: EngineQuery,
        limits: SearchLimits,
        counts: FilterCounts,
        indexed_rows: Callable[[], int | None],
        pending_vectors: Awaitable[npt.NDArray[np.float32]] | None = None,
        held: HeldCollections | None = None,
    ) -> None:
        self._pending_vectors = pending_vectors
        self._in_memory = held
        self._held: Held | None = None
        """The collection held in memory at the version this search started at, if any."""
        self._name = name
        self._table = table
        self._query = query
        self._limits = limits
        self._counts = counts
        self._indexed_rows = indexed_rows
        self._where = compile_filter(query.filter)
        self._budget = timedelta(seconds=query.timeout_s) if query.timeout_s else None
        self._depth = query.offset + query.limit
        hybrid = query.strategy is Strategy.HYBRID
        self._candidates = max(self._depth, limits.hybrid_candidates) if hybrid else self._depth
        self._rows = FetchedRows()
        """Chunks (and vectors) the ranking queries read; the rest of the page is taken."""

    async def candidates(self) -> tuple[ScoredCandidates, int]:
        """What the search fuses, and how many chunks match (an upper bound for HYBRID)."""
        self._rows = FetchedRows()
        (matched, dense_lists), (keyword_list, keyword_matches) = await asyncio.gather(
            self._dense_side(), self._keyword_side()
        )
        completion = await self._completion(dense_lists, keyword_list)
        if matched is None:
            matched = keyword_matches or 0
        return ScoredCandidates(dense_lists, keyword_list, completion), matched

    async def run(self, *, final: bool) -> SearchPage:
        """One page; raises `_RowsMoved` when the page comes back short, unless `final`."""
        query = self._query
        if self._in_memory is not None:
            self._held = await self._in_memory.lookup(self._name, self._table)
            if self._held is not None and self._held.keywords is not None:
                from_memory = await self._from_memory(self._in_memory, self._held)
                if from_memory is not None:
                    return from_memory
        scored, matched = await self.candidates()
        fused = fuse(scored.dense, scored.keyword, query.fusion, scored.completion)
        page = fused[query.offset : self._depth]
        chunks = await self._chunks([int(f.id) for f in page])
        if len(chunks) < len(page) and not final:
            raise _RowsMoved
        return SearchPage(hits=_hits(page, chunks), total_count=max(matched, len(fused)))

    async def _from_memory(self, collections: HeldCollections, held: Held) -> SearchPage | None:
        """The page from the collection held in memory with its keyword index and chunks, at the
        version the search started at (None: a filter's rows were written meanwhile, LanceDB's
        turn). Reads nothing from LanceDB but a filter's rows the first time it is seen."""
        query = self._query
        view = await collections.view(self._name, self._table, held, self._where)
        if view is None:
            return None
        dense_lists: list[list[Candidate]] = []
        if query.strategy is not Strategy.KEYWORD:
            query = await self._embedded()
            if len(query.vectors):
                if not held.ranks(query.vectors):
                    return None
                dense_lists = await ranked_dense(view, query.vectors, self._candidates)
        keyword_list: list[Candidate] | None = None
        matched = len(view.addresses)
        if query.strategy is not Strategy.SEMANTIC:
            keyword_list, matches = held.keyword_candidates(
                query.keyword_query, self._candidates, view
            )
            if query.strategy is Strategy.KEYWORD:  # counted as LanceDB's ranking counts them
                matched = min(matches, self._count_cap())
        completion = None
        if keyword_list is not None and dense_lists:
            missing = sorted(int(i) for i in keyword_only(dense_lists, keyword_list))
            cosines = held_cosines(held.whole, missing, query.vectors) or {}
            completion = Completion(
                dense=cosines,
                all_keyword_matches=all_keyword_matches(keyword_list, self._candidates),
            )
        fused = fuse(dense_lists, keyword_list, query.fusion, completion)
        page = fused[query.offset : self._depth]
        chunks = held.chunks_at([int(f.id) for f in page]) or {}
        return SearchPage(hits=_hits(page, chunks), total_count=max(matched, len(fused)))

    async def _chunks(self, addresses: list[int]) -> dict[int, Chunk]:
        """The chunks at these addresses: those the ranking queries read, the others taken."""
        known = self._rows.chunk_json
        chunks = {a: to_chunk(known[a]) for a in addresses if a in known}
        missing = [a for a in addresses if a not in known]
        if missing:
            chunks.update(await chunks_at(self._table, missing, self._budget))
        return chunks

    async def _completion(
        self, dense_lists: list[list[Candidate]], keyword_list: list[Candidate] | None
    ) -> Completion | None:
        """HYBRID: the cosines of the keyword-only candidates, from the vectors the keyword query
        read or from the held matrix (a dense-only candidate's BM25 is `fuse`'s bound)."""
        if keyword_list is None or not dense_lists:
            return None
        missing = keyword_only(dense_lists, keyword_list)
        known = self._rows.vectors
        # in address order, as a take returns them: the same matrix gives the same cosines
        at_hand = sorted(int(i) for i in missing if int(i) in known)
        unread = [int(i) for i in missing if int(i) not in known]
        vectors = self._query.vectors
        cosines = best_cosines(at_hand, _stacked([known[a] for a in at_hand]), vectors)
        from_memory = None
        # still at the held version after the keyword query: its addresses are the held rows'
        if self._held is not None and await self._table.version() == self._held.version:
            from_memory = held_cosines(self._held.whole, unread, vectors)
        if from_memory is not None:
            cosines.update(from_memory)
        elif unread:
            cosines.update(await cosines_at(self._table, unread, vectors, self._budget))
        return Completion(
            dense=cosines, all_keyword_matches=all_keyword_matches(keyword_list, self._candidates)
        )

    async def _dense_side(self) -> tuple[int | None, list[list[Candidate]]]:
        """(rows matching the filter, one candidate list per query vector); KEYWORD: (None, [])."""
        if self._query.strategy is Strategy.KEYWORD:
            return None, []
        await self._embedded()  # the keyword side runs meanwhile
        indexed = self._indexed_rows()
        vectors = self._query.vectors
        if len(vectors) == 0:
            return await self._counts.count(self._name, self._table, self._where), []
        # SEMANTIC's candidates are its page: their chunks come with them (HYBRID's would cost
        # the slowest query more than taking the page's few dense-only ones later)
        rows = self._rows if self._query.strategy is Strategy.SEMANTIC else None
        if self._in_memory is not None and self._held is not None:
            held = await self._in_memory.dense(
                self._name, self._table, self._held, vectors, self._candidates, self._where
            )
            if held is not None:  # in memory: exact, no scan, no index probe
                return await self._counts.count(self._name, self._table, self._where), held
        if indexed is None:  # a flat scan: counting runs beside it
            matched, found = await asyncio.gather(
                self._counts.count(self._name, self._table, self._where),
                dense_candidates(
                    self._table,
                    vectors,
                    self._where,
                    self._candidates,
                    self._budget,
                    None,
                    rows=rows,
                ),
            )
            return matched, found
        matched = await self._counts.count(self._name, self._table, self._where)
        nprobes = self._nprobes(matched, indexed)
        found = await dense_candidates(
            self._table, vectors, self._where, self._candidates, self._budget, nprobes, rows=rows
        )
        return matched, found

    async def _keyword_side(self) -> tuple[list[Candidate] | None, int | None]:
        """(candidates, chunks matching the words and the filter — KEYWORD only, up to the cap);
        SEMANTIC: (None, None)."""
        query = self._query
        if query.strategy is Strategy.SEMANTIC:
            return None, None
        if query.strategy is Strategy.HYBRID:
            # with the vectors held, the dense side is a product: the keyword query is the slow
            # one and reads no rows (its candidates' cosines come from the held matrix)
            # the keyword candidates' vectors give the keyword-only ones' cosines without a
            # round of their own. Their chunks too beside a flat dense scan, the slowest query by
            # far (SciFact: 9 ms against 2); with a vector index (100k chunks under a filter)
            # the chunks would lengthen the search, the page's are taken at the end instead
            ranked, _ = await keyword_candidates(
                self._table,
                query.keyword_query,
                self._where,
                self._candidates,
                self._budget,
                rows=self._rows if self._held is None else None,
                chunks=self._indexed_rows() is None,
            )
            return ranked, None
        # one ranking to the cap gives both the count and, at its head, the candidates
        cap = self._count_cap()
        return await keyword_candidates(
            self._table, query.keyword_query, self._where, cap, self._budget, keep=self._candidates
        )

    async def _embedded(self) -> EngineQuery:
        """The query with its vectors, once the pending embedding (if any) is ready."""
        if self._pending_vectors is not None:
            vectors = await self._pending_vectors
            self._pending_vectors = None
            self._query = replace(self._query, vectors=vectors)
        return self._query

    def _count_cap(self) -> int:
        """How far KEYWORD counts matching chunks (`SearchLimits.keyword_count_cap`)."""
        return max(self._candidates, self._limits.keyword_count_cap)

    def _nprobes(self, matched: int, indexed_rows: int) -> tuple[int, int]:
        """(minimum, maximum) IVF probes for a filter that leaves `matched` rows.

        A selective filter probes every partition: IVF-Flat then is exact, and faster than a flat
        scan because the filter's row mask skips vectors it does not need.
        """
        if matched <= self._limits.policy.exact_search_max_rows:
            return ALL_PARTITIONS, ALL_PARTITIONS
        return probes_for(indexed_rows, self._limits.policy), 0


def _hits(page: list[Any], chunks: dict[int, Chunk]) -> list[Hit]:
    """The page's fused hits with their chunks (once each; a hit whose row is gone is left out)."""
    hits: list[Hit] = []
    seen: set[str] = set()
    for fused_hit in page:
        chunk = chunks.get(int(fused_hit.id))
        if chunk is None or chunk.id in seen:
            continue
        seen.add(chunk.id)
        hits.append(Hit(chunk, fused_hit.score, fused_hit.dense_score, fused_hit.keyword_score))
    return hits


def _stacked(vectors: list[Any]) -> Any:
    """One matrix of row vectors (an empty one for none)."""
    return np.stack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
