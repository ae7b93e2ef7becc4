"""When the LanceDB engine builds and rebuilds its indexes, and when a search may use them.

BM25 (native FTS on `search_text`) exists from a collection's creation; rows written after a build
are still searched (LanceDB scans the unindexed ones), and the index is rebuilt once enough of them
accumulate. The vector index (IVF-Flat, cosine: raw vectors, so distances stay exact inside the
probed partitions) is built only once a collection is large enough for a full scan to be slow,
with about √rows partitions. Filters leaving many rows probe a tenth of them, at least `nprobes`
(more when too few hits pass the filter); selective filters probe every partition, which keeps the
search exact — the only way to keep their recall — and is still faster than LanceDB's flat scan,
which reads every vector. About √rows partitions (rather than LanceDB's default, far fewer) keep
each probe small, so a tenth of them still finds nearly every exact neighbour (README: measured).

Every write adds a data fragment, and each query pays for every fragment it touches, so fragments
are compacted (LanceDB `optimize`, which also folds new rows into the indexes and removes table
versions older than `keep_versions_s`) whenever the indexes are rebuilt and once a collection is
split into `max_fragments` (on the write path) or `settle_fragments` (once writes pause). A
collection with a vector index needs a rebuild of it after each compaction (see
`refresh_indexes`); it takes seconds on a large collection, so the engine runs it in the
background.

Scalar indexes (BTREE, BITMAP for low-cardinality text and booleans) cover `id` (the page of a
hybrid search is fetched by id), `document_id` and every filterable column but breadcrumbs; they are
built with the collection (or when a metadata column first appears) and rebuilt with BM25. A
filter then resolves from the indexes instead of scanning its columns; rows written since a build
are still scanned, so results never depend on whether an index is current.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

import pyarrow as pa
from lancedb.index import FTS, Bitmap, BTree, IvfFlat

from services.search_tool.engine.lancedb.rows import SEARCH_TEXT_COLUMN, VECTOR_COLUMN
from services.search_tool.engine.lancedb.sql import METADATA_COLUMN_PREFIX

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
    probe_fraction: float = 0.1
    """...and at least this share of the partitions."""
    max_fragments: int = 64
    """Compact a collection once its rows are spread over this many data fragments."""
    keep_versions_s: float = 3600.0
    """Compaction removes table versions older than this (and the files only they use)."""
    settle_unindexed_factor: float = 1.0
    """Once writes pause (`Stale.SETTLE`), fold the rows written since the last builds into
    BM25 and the scalar indexes once they number this times √rows (316 at 100,000 rows; at
    least one). Until then a search on LanceDB's path scans them (at 100k, 1,000 of them
    made a filtered KEYWORD search 1.7-2x slower; measured), while each fold reads every row: a
    threshold of √rows keeps both costs in proportion as a collection grows (the per-search scan
    grows as √N, folds come every √N rows written). Folding after every small write cost a large
    collection a full rebuild, a compaction and a vector-index rebuild after every pause."""
    settle_fragments: int = 16
    """...and compact, once writes pause, a collection spread over this many data fragments
    (below `max_fragments`, which compacts on the write path, under the write lock)."""


def vector_partitions(rows: int) -> int:
    """IVF partitions for an index over `rows` vectors: about √rows, within 16…4096."""
    return max(16, min(4096, round(math.sqrt(rows))))


def probes_for(indexed_rows: int, policy: IndexPolicy) -> int:
    """Partitions a filtered or unfiltered search probes at least, for an index over
    `indexed_rows` vectors."""
    partitions = vector_partitions(indexed_rows)
    return min(partitions, max(policy.nprobes, math.ceil(partitions * policy.probe_fraction)))


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


async def has_unindexed_rows(table: Any) -> bool:
    """Whether some index leaves rows out (LanceDB then scans them on every query: KEYWORD over
    SciFact with 846 of 12,095 rows outside BM25 took 86 ms p50 instead of 3.9 ms; i31's note)."""
    return any((index.num_unindexed_rows or 0) > 0 for index in await table.list_indices())


async def vector_index_rows(table: Any) -> int | None:
    """Rows the vector index covers (those added as extra segments too), or None when there is
    no vector index."""
    stats = await table.index_stats(VECTOR_INDEX)
    return None if stats is None else int(stats.num_indexed_rows + stats.num_unindexed_rows)


@dataclass(frozen=True)
class Refreshed:
    """What `refresh_indexes` left to do."""

    vector_rows: int | None
    """Rows the vector index covers now, or None when there is none."""
    vector_rebuild_due: bool
    """The vector index should be (re)built; only when the caller asked not to build it."""


class Stale(Enum):
    """Which thresholds call an index or a collection's fragments stale."""

    WRITE = "write"
    """The write path's: `fts_refresh_rows` / `fts_min_refresh_rows`, `max_fragments`."""
    SETTLE = "settle"
    """Once writes pause: `settle_unindexed_factor`, `settle_fragments`."""
    ALL = "all"
    """Any unindexed row and a second fragment (bulk loads: `LanceDBEngine.refresh`)."""


async def refresh_indexes(
    table: Any,
    policy: IndexPolicy,
    *,
    stale: Stale = Stale.WRITE,
    build_vectors: bool = True,
) -> Refreshed:
    """Compact and rebuild what the `stale` thresholds call stale.

    Staleness is judged before compacting: compaction folds new rows into the indexes, which
    would hide them. LanceDB 0.40's `optimize` also retrains an IVF index into 2 partitions (a
    full scan on every query; measured), so the vector index is rebuilt after every compaction —
    here, or by the caller when `build_vectors` is False (it is slow on large tables; the engine
    does it in the background). The caller keeps two refreshes (or a refresh and a vector-index
    build) of one table apart; writes may run meanwhile (see `_compact`).
    """
    force = stale is Stale.ALL
    unindexed_due = 1 if force else await _stale_rows(table, policy, stale)
    indexes = {index.name: index for index in await table.list_indices()}
    fts = indexes.get(FTS_INDEX)
    rebuild_fts = fts is not None and (fts.num_unindexed_rows or 0) >= unindexed_due
    rebuild_scalars = {
        name: spec
        for name, spec in scalar_indexes(await table.schema()).items()
        if name not in indexes or (indexes[name].num_unindexed_rows or 0) >= unindexed_due
    }
    vectors = indexes.get(VECTOR_INDEX)
    due = force or rebuild_fts or bool(rebuild_scalars)
    if rebuild_fts:
        await _build_fts(table)
    for name, (column, config) in rebuild_scalars.items():
        await _build_scalar(table, name, column, config)
    # after the rebuilds: Lance compacts fragments an index covers apart from those it does not
    # (measured: 3 fragments, 2 of them indexed, became 2), and compaction keeps them indexed
    fragments_due = policy.settle_fragments if stale is Stale.SETTLE else policy.max_fragments
    compacted = await _compact(table, policy, due=due, fragments_due=fragments_due)
    rows = int(await table.count_rows())
    if vectors is None:
        rebuild_vectors = rows >= policy.vector_index_min_rows
    else:
        unindexed = vectors.num_unindexed_rows or 0
        rebuild_vectors = (
            compacted
            or unindexed >= (1 if force else policy.vector_refresh_rows)
            or (vectors.num_segments or 1) > 1
        )
    if rebuild_vectors and build_vectors:
        await build_vector_index(table, rows)
    return Refreshed(await vector_index_rows(table), rebuild_vectors and not build_vectors)


async def _compact(table: Any, policy: IndexPolicy, *, due: bool, fragments_due: int) -> bool:
    """Merge the data fragments when indexes are rebuilt anyway or once there are
    `fragments_due`; whether it did.

    A write may commit while the compaction runs (the background refresh does not hold the write
    lock). Lance resolves the race in the write's favour (measured with lance 13: appends,
    merge-inserts, deletes and added columns all commit; a compaction that overlapped an update,
    a delete or a new column fails with a retryable commit conflict): the compaction is then
    given up, the write stands, and the refresh after the next pause in writes compacts again.
    """
    fragments = int((await table.stats())["fragment_stats"]["num_fragments"])
    if fragments < 2 or (not due and fragments < fragments_due):
        return False
    try:
        stats = await table.optimize(cleanup_older_than=timedelta(seconds=policy.keep_versions_s))
    except RuntimeError as error:
        if not is_commit_conflict(error):
            raise
        log.info(
            "compaction preempted by a concurrent write",
            extra={"table": table.name, "fragments": fragments},
        )
        return False
    log.info(
        "collection compacted",
        extra={
            "table": table.name,
            "fragments_before": fragments,
            "fragments_removed": stats.compaction.fragments_removed,
            "versions_removed": stats.prune.old_versions_removed,
        },
    )
    return True


def is_commit_conflict(error: BaseException) -> bool:
    """Whether Lance refused a commit because another transaction committed first."""
    return "Retryable commit conflict" in str(error)


async def _stale_rows(table: Any, policy: IndexPolicy, stale: Stale) -> int:
    """Unindexed rows that make BM25 and the scalar indexes worth rebuilding."""
    rows = int(await table.count_rows())
    if stale is Stale.SETTLE:
        return max(1, int(policy.settle_unindexed_factor * math.sqrt(rows)))
    return min(policy.fts_refresh_rows, max(policy.fts_min_refresh_rows, rows // 10))


async def _build_fts(table: Any) -> None:
    await table.create_index(
        SEARCH_TEXT_COLUMN, config=FTS(with_position=False), replace=True, name=FTS_INDEX
    )
    log.info("bm25 index built", extra={"table": table.name})


async def _build_scalar(table: Any, name: str, column: str, config: BTree | Bitmap) -> None:
    await table.create_index(column, config=config, replace=True, name=name)
    log.debug("scalar index built", extra={"table": table.name, "column": column})


async def build_vector_index(table: Any, rows: int) -> None:
    """(Re)build the IVF-Flat index over `rows` vectors, with about √rows partitions."""
    partitions = vector_partitions(rows)
    await table.create_index(
        VECTOR_COLUMN,
        config=IvfFlat(distance_type="cosine", num_partitions=partitions),
        replace=True,
        name=VECTOR_INDEX,
    )
    log.info("vector index built", extra={"table": table.name, "partitions": partitions})
