"""When the LanceDB engine builds and rebuilds its indexes, and when a search may use them.

BM25 (native FTS on `search_text`) exists from a collection's creation; rows written after a build
are still searched (LanceDB scans the unindexed ones), and the index is rebuilt once enough of them
accumulate. The vector index (IVF-Flat, cosine: raw vectors, so distances stay exact inside the
probed partitions) is built only once a collection is large enough for a full scan to be slow.
Filters leaving many rows probe `nprobes` partitions (more when too few hits pass the filter);
selective filters probe every partition, which keeps the search exact — the only way to keep their
recall — and is still faster than LanceDB's flat scan, which reads every vector.

Scalar indexes (BTREE, BITMAP for low-cardinality text and booleans) cover `id` (the page of a
hybrid search is fetched by id), `document_id` and every filterable column but breadcrumbs; they are
built with the collection (or when a metadata column first appears) and rebuilt with BM25. A
filter then resolves from the indexes instead of scanning its columns; rows written since a build
are still scanned, so results never depend on whether an index is current.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lancedb.index import FTS, Bitmap, BTree, IvfFlat

from services.search_tool.engine.lancedb_rows import SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from services.search_tool.engine.lancedb_sql import METADATA_COLUMN_PREFIX

log = logging.getLogger(__name__)

FTS_INDEX = "search_text_bm25"
VECTOR_INDEX = "vector_ivf"
SCALAR_INDEX_PREFIX = "scalar_"
_BTREE_COLUMNS = ("id", "document_id", "created_at", "updated_at")
_BITMAP_COLUMNS = ("source", "entity_type")


@dataclass(frozen=True)
class IndexPolicy:
    """Thresholds that decide index builds and their use."""

    fts_refresh_rows: int = 20_000
    """Rebuild BM25 (and the scalar indexes) once this many rows are unindexed, at most."""
    fts_min_refresh_rows: int = 500
    """...and already once this many are, while they are a tenth of the collection or more: small
    collections get indexed after their first ingest instead of being scanned on every query."""
    vector_index_min_rows: int = 50_000
    """Build the vector index once a collection has this many chunks."""
    vector_refresh_rows: int = 20_000
    """Rebuild the vector index once this many rows are unindexed."""
    exact_search_max_rows: int = 5_000
    """Filters leaving at most this many rows probe every partition (an exact search)."""
    nprobes: int = 20
    """IVF partitions probed at least; more are probed when a filter leaves too few hits."""


async def ensure_indexes(table: Any) -> None:
    """Build BM25 and the scalar indexes that are missing (a new table, an older one, a crash)."""
    built = {index.name for index in await table.list_indices()}
    if FTS_INDEX not in built:
        await _build_fts(table)
    for name, (column, config) in scalar_indexes(await table.schema()).items():
        if name not in built:
            await _build_scalar(table, name, column, config)


def scalar_indexes(schema: pa.Schema) -> dict[str, tuple[str, BTree | Bitmap]]:
    """Index name → (column, config) for every scalar index a table with `schema` should have."""
    wanted: dict[str, tuple[str, BTree | Bitmap]] = {}
    for field in schema:
        name = field.name
        if name in _BITMAP_COLUMNS or (
            name.startswith(METADATA_COLUMN_PREFIX) and pa.types.is_boolean(field.type)
        ):
            wanted[SCALAR_INDEX_PREFIX + name] = (name, Bitmap())
        elif name in _BTREE_COLUMNS or name.startswith(METADATA_COLUMN_PREFIX):
            wanted[SCALAR_INDEX_PREFIX + name] = (name, BTree())
    return wanted


async def has_vector_index(table: Any) -> bool:
    return any(index.name == VECTOR_INDEX for index in await table.list_indices())


async def refresh_indexes(table: Any, policy: IndexPolicy, *, force: bool = False) -> bool:
    """Rebuild what is stale (everything unindexed when `force`); whether a vector index exists."""
    stale = 1 if force else await _stale_rows(table, policy)
    indexes = {index.name: index for index in await table.list_indices()}
    fts = indexes.get(FTS_INDEX)
    if fts is not None and (fts.num_unindexed_rows or 0) >= stale:
        await _build_fts(table)
    for name, (column, config) in scalar_indexes(await table.schema()).items():
        index = indexes.get(name)
        if index is None or (index.num_unindexed_rows or 0) >= stale:
            await _build_scalar(table, name, column, config)
    vectors = await table.index_stats(VECTOR_INDEX)
    if vectors is None:
        if await table.count_rows() < policy.vector_index_min_rows:
            return False
    elif vectors.num_unindexed_rows < (1 if force else policy.vector_refresh_rows):
        return True
    await _build_vector_index(table)
    return True


async def _stale_rows(table: Any, policy: IndexPolicy) -> int:
    """Unindexed rows that make BM25 and the scalar indexes worth rebuilding."""
    tenth = int(await table.count_rows()) // 10
    return min(policy.fts_refresh_rows, max(policy.fts_min_refresh_rows, tenth))


async def _build_fts(table: Any) -> None:
    await table.create_index(
        SEARCH_TEXT_COLUMN, config=FTS(with_position=False), replace=True, name=FTS_INDEX
    )
    log.info("bm25 index built", extra={"table": table.name})


async def _build_scalar(table: Any, name: str, column: str, config: BTree | Bitmap) -> None:
    await table.create_index(column, config=config, replace=True, name=name)
    log.debug("scalar index built", extra={"table": table.name, "column": column})


async def _build_vector_index(table: Any) -> None:
    await table.create_index(
        VECTOR_COLUMN, config=IvfFlat(distance_type="cosine"), replace=True, name=VECTOR_INDEX
    )
    log.info("vector index built", extra={"table": table.name})
