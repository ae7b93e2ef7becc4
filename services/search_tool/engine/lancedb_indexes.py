"""When the LanceDB engine builds and rebuilds its indexes, and when a search may use them.

BM25 (native FTS on `search_text`) exists from a collection's creation; rows written after a build
are still searched (LanceDB scans the unindexed ones), and the index is rebuilt once enough of them
accumulate. The vector index (IVF-Flat, cosine: raw vectors, so distances stay exact inside the
probed partitions) is built only once a collection is large enough for a full scan to be slow.
Filters leaving many rows probe `nprobes` partitions (more when too few hits pass the filter);
selective filters probe every partition, which keeps the search exact — the only way to keep their
recall — and is still faster than LanceDB's flat scan, which reads every vector.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lancedb.index import FTS, IvfFlat

from services.search_tool.engine.lancedb_rows import SEARCH_TEXT_COLUMN, VECTOR_COLUMN

log = logging.getLogger(__name__)

FTS_INDEX = "search_text_bm25"
VECTOR_INDEX = "vector_ivf"


@dataclass(frozen=True)
class IndexPolicy:
    """Thresholds that decide index builds and their use."""

    fts_refresh_rows: int = 20_000
    """Rebuild BM25 once this many rows are unindexed."""
    vector_index_min_rows: int = 50_000
    """Build the vector index once a collection has this many chunks."""
    vector_refresh_rows: int = 20_000
    """Rebuild the vector index once this many rows are unindexed."""
    exact_search_max_rows: int = 5_000
    """Filters leaving at most this many rows probe every partition (an exact search)."""
    nprobes: int = 20
    """IVF partitions probed at least; more are probed when a filter leaves too few hits."""


async def ensure_fts(table: Any) -> None:
    """Build the BM25 index when it is missing (a new table, or a crash right after creation)."""
    if not any(index.name == FTS_INDEX for index in await table.list_indices()):
        await _build_fts(table)


async def has_vector_index(table: Any) -> bool:
    return any(index.name == VECTOR_INDEX for index in await table.list_indices())


async def refresh_indexes(table: Any, policy: IndexPolicy, *, force: bool = False) -> bool:
    """Rebuild what is stale (everything unindexed when `force`); whether a vector index exists."""
    fts = await table.index_stats(FTS_INDEX)
    if fts is not None and fts.num_unindexed_rows >= (1 if force else policy.fts_refresh_rows):
        await _build_fts(table)
    vectors = await table.index_stats(VECTOR_INDEX)
    if vectors is None:
        if await table.count_rows() < policy.vector_index_min_rows:
            return False
    elif vectors.num_unindexed_rows < (1 if force else policy.vector_refresh_rows):
        return True
    await _build_vector_index(table)
    return True


async def _build_fts(table: Any) -> None:
    await table.create_index(
        SEARCH_TEXT_COLUMN, config=FTS(with_position=False), replace=True, name=FTS_INDEX
    )
    log.info("bm25 index built", extra={"table": table.name})


async def _build_vector_index(table: Any) -> None:
    await table.create_index(
        VECTOR_COLUMN, config=IvfFlat(distance_type="cosine"), replace=True, name=VECTOR_INDEX
    )
    log.info("vector index built", extra={"table": table.name})
