"""The embedded engine: LanceDB 0.40, in process, persistent under a data directory.

One table per collection. Dense search is exact (flat cosine over the rows the filter leaves, so
selective filters keep full recall); keyword search is LanceDB's native BM25 index on
`search_text`, which also scans rows added since the index was built, and is rebuilt once enough
of them accumulate. Filters are prefilters compiled to SQL (`lancedb_sql`). Fusion happens here, in
Python, over both candidate lists (`fusion`). Writes to one collection are serialised by a lock;
reads run concurrently. LanceDB's async API runs its work on its own threads, off the event loop.
Never fork a process after opening an engine: LanceDB does not survive it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from services.common.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound
from services.search_tool.documents import Chunk, ChunkRecord, metadata_type, widen
from services.search_tool.engine.base import (
    CollectionSpec,
    CollectionStats,
    EngineQuery,
    Hit,
    SearchPage,
    StoredVersion,
    Strategy,
    query_vectors,
)
from services.search_tool.engine.lancedb_indexes import (
    IndexPolicy,
    build_vector_index,
    ensure_indexes,
    probes_for,
    refresh_indexes,
    vector_index_rows,
)
from services.search_tool.engine.lancedb_rows import (
    CHUNK_JSON_COLUMN,
    CONTENT_HASH_COLUMN,
    base_schema,
    embedding_of,
    filterable_fields,
    metadata_field,
    metadata_types,
    to_chunk,
    to_table,
)
from services.search_tool.engine.lancedb_sql import compile_filter, literal
from services.search_tool.filters import FieldType, FilterExpression
from services.search_tool.fusion import Candidate, fuse

log = logging.getLogger(__name__)

_ID_BATCH = 500
ALL_PARTITIONS = 1_000_000
_COUNT_CACHE_SIZE = 512


class _RowsMoved(Exception):
    """Rows of a page moved between ranking and fetching (a concurrent write)."""


class LanceDBEngine:
    """`SearchEngine` over a LanceDB database directory."""

    def __init__(
        self,
        connection: lancedb.AsyncConnection,
        *,
        policy: IndexPolicy | None = None,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
        marker_dir: Path | None = None,
    ) -> None:
        self._db = connection
        self._policy = policy or IndexPolicy()
        self._vector_rows: dict[str, int | None] = {}
        """Rows each collection's vector index covers; None: no vector index."""
        self._described: dict[str, tuple[int, CollectionStats]] = {}
        self._counts: OrderedDict[tuple[str, int, str | None], int] = OrderedDict()
        self._hybrid_candidates = hybrid_candidates
        self._keyword_count_cap = keyword_count_cap
        self._tables: dict[str, Any] = {}
        self._schemas: dict[str, pa.Schema] = {}
        """Each open table's schema: only this engine's writes change it (`_widen_schema`)."""
        self._write_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._open_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._index_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        """Held by a background vector-index build and by compaction (they conflict)."""
        self._rebuilds: dict[str, asyncio.Task[None]] = {}
        self._rebuild_again: set[str] = set()
        self._markers = marker_dir
        """Where a pending vector-index rebuild is remembered across restarts (None: nowhere)."""

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        *,
        policy: IndexPolicy | None = None,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
    ) -> LanceDBEngine:
        """Open (creating when missing) the database under `data_dir`."""
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        connection = await lancedb.connect_async(str(data_dir))
        return cls(
            connection,
            policy=policy,
            hybrid_candidates=hybrid_candidates,
            keyword_count_cap=keyword_count_cap,
            marker_dir=data_dir / ".quarry",
        )

    async def close(self) -> None:
        """Stops vector-index builds in flight (remembered: they run again after a restart)."""
        for task in list(self._rebuilds.values()):
            task.cancel()
        await asyncio.gather(*self._rebuilds.values(), return_exceptions=True)
        self._tables.clear()
        self._schemas.clear()
        self._db.close()  # type: ignore[no-untyped-call]

    async def list_collections(self) -> list[str]:
        names: list[str] = []
        token: str | None = None
        while True:
            page = await self._db.list_tables(page_token=token)
            names.extend(page.tables)
            token = page.page_token
            if not token:
                return sorted(names)

    async def ensure_collection(self, name: str, spec: CollectionSpec) -> None:
        """Create when missing; an existing collection must come from the same embedding model."""
        async with self._write_locks[name], self._open_locks[name]:
            if name not in self._tables and name not in await self.list_collections():
                schema = base_schema(spec.embedding_model, spec.dimensions)
                table = await self._db.create_table(name, schema=schema)
                await ensure_indexes(table)
                self._tables[name] = table
                self._vector_rows[name] = None
                log.info("collection created", extra={"collection": name})
                return
        table = await self._table(name)
        model, dimensions = embedding_of(await table.schema())
        if (model, dimensions) != (spec.embedding_model, spec.dimensions):
            raise FailedPrecondition(
                f"collection {name!r} holds {dimensions}-d vectors of {model!r}; the embedder "
                f"makes {spec.dimensions}-d vectors of {spec.embedding_model!r}",
                reason="EMBEDDING_MISMATCH",
                metadata={"collection": name},
            )

    async def drop_collection(self, name: str) -> None:
        async with self._write_locks[name]:
            await self._table(name)
            rebuild = self._rebuilds.get(name)
            if rebuild is not None:
                rebuild.cancel()
                await asyncio.gather(rebuild, return_exceptions=True)
            self._forget_rebuild(name)
            async with self._open_locks[name]:
                self._tables.pop(name, None)
                self._schemas.pop(name, None)
                self._described.pop(name, None)
                self._vector_rows.pop(name, None)
                self._counts = OrderedDict((k, v) for k, v in self._counts.items() if k[0] != name)
                await self._db.drop_table(name)

    async def fields(self, name: str) -> Mapping[str, FieldType]:
        return filterable_fields(await self._schema(name))

    async def _schema(self, name: str) -> pa.Schema:
        schema = self._schemas.get(name)
        if schema is None:
            schema = await (await self._table(name)).schema()
            self._schemas[name] = schema
        return schema

    async def upsert(
        self, name: str, records: Sequence[ChunkRecord], *, absent: AbstractSet[str] = frozenset()
    ) -> int:
        """A merge on `id` for records that may be stored, a plain append for those the caller
        knows are not (an append is ~18 ms cheaper per request, and does not grow with the
        collection as the merge's lookup of existing ids does)."""
        if not records:
            return 0
        async with self._write_locks[name]:
            table = await self._table(name)
            schema = await self._widen_schema(name, table, records)
            new = [r for r in records if r.chunk.id in absent]
            maybe_stored = [r for r in records if r.chunk.id not in absent]
            if new:
                await table.add(to_table(new, schema))
            if maybe_stored:
                await (
                    table.merge_insert("id")
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute(to_table(maybe_stored, schema))
                )
            refreshed = await refresh_indexes(
                table,
                self._policy,
                build_vectors=False,
                compaction_lock=self._index_locks[name],
            )
            self._vector_rows[name] = refreshed.vector_rows
            if refreshed.vector_rebuild_due:
                self._schedule_vector_rebuild(name, table)
        return len(records)

    async def refresh(self, name: str) -> None:
        """Fold every row written since the last builds into the indexes (after bulk loads)."""
        async with self._write_locks[name]:
            table = await self._table(name)
            await self.vector_index_settled(name)
            async with self._index_locks[name]:
                refreshed = await refresh_indexes(table, self._policy, force=True)
            self._vector_rows[name] = refreshed.vector_rows
            self._forget_rebuild(name)

    async def vector_index_settled(self, name: str) -> None:
        """Wait for a background vector-index build of `name`, if one runs."""
        while (task := self._rebuilds.get(name)) is not None:
            await asyncio.wait({task})

    def _schedule_vector_rebuild(self, name: str, table: Any) -> None:
        """Build the vector index in the background: writes and searches go on meanwhile (on
        the old index, or a flat scan); a build asked for while one runs runs once more after."""
        self._remember_rebuild(name)
        if name in self._rebuilds:
            self._rebuild_again.add(name)
            return
        task = asyncio.create_task(self._rebuild_vectors(name, table))
        self._rebuilds[name] = task

    async def _rebuild_vectors(self, name: str, table: Any) -> None:
        try:
            async with self._index_locks[name]:
                while True:
                    self._rebuild_again.discard(name)
                    rows = int(await table.count_rows())
                    await build_vector_index(table, rows)
                    self._vector_rows[name] = await vector_index_rows(table)
                    if name not in self._rebuild_again:
                        break
            self._forget_rebuild(name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("vector index build failed", extra={"collection": name})
        finally:
            self._rebuilds.pop(name, None)

    def _marker(self, name: str) -> Path | None:
        return None if self._markers is None else self._markers / f"{name}.vector-rebuild"

    def _remember_rebuild(self, name: str) -> None:
        marker = self._marker(name)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def _forget_rebuild(self, name: str) -> None:
        marker = self._marker(name)
        if marker is not None:
            marker.unlink(missing_ok=True)

    async def stored_versions(
        self, name: str, document_ids: Sequence[str]
    ) -> dict[str, StoredVersion]:
        table = await self._table(name)
        ids: dict[str, set[str]] = defaultdict(set)
        hashes: dict[str, set[str]] = defaultdict(set)
        for batch in _batches(document_ids):
            rows = await (
                table.query()
                .where(f"document_id IN ({', '.join(literal(d) for d in batch)})")
                .select(["id", "document_id", CONTENT_HASH_COLUMN])
                .to_arrow()
            )
            for row in rows.to_pylist():
                ids[row["document_id"]].add(row["id"])
                hashes[row["document_id"]].add(row[CONTENT_HASH_COLUMN] or "")
        return {
            doc: StoredVersion(
                frozenset(chunks), next(iter(hashes[doc])) if len(hashes[doc]) == 1 else ""
            )
            for doc, chunks in ids.items()
        }

    async def delete_chunks(self, name: str, chunk_ids: Sequence[str]) -> int:
        if not chunk_ids:
            return 0
        deleted = 0
        async with self._write_locks[name]:
            table = await self._table(name)
            for batch in _batches(chunk_ids):
                result = await table.delete(f"id IN ({', '.join(literal(c) for c in batch)})")
                deleted += result.num_deleted_rows
        return deleted

    async def delete_matching(
        self, name: str, *, document_ids: Sequence[str], where: FilterExpression | None
    ) -> int:
        predicates = [
            f"document_id IN ({', '.join(literal(d) for d in batch)})"
            for batch in _batches(document_ids)
        ]
        compiled = compile_filter(where) if where is not None else None
        if compiled is not None:
            predicates.append(compiled)
        elif where is not None:
            predicates.append("true")
        deleted = 0
        async with self._write_locks[name]:
            table = await self._table(name)
            for predicate in predicates:
                result = await table.delete(predicate)
                deleted += result.num_deleted_rows
        return deleted

    async def search(self, name: str, query: EngineQuery) -> SearchPage:
        table = await self._table(name)
        if not isinstance(query.vectors, np.ndarray):  # awaitable twice, should the search rerun
            query = replace(query, vectors=asyncio.ensure_future(query.vectors))
        try:
            async with asyncio.timeout(query.timeout_s):
                try:
                    return await self._search(name, table, query, final=False)
                except _RowsMoved:
                    return await self._search(name, table, query, final=True)
        except TimeoutError:
            raise DeadlineExceeded(
                f"search in {name!r} took longer than {query.timeout_s} s",
                metadata={"collection": name},
            ) from None

    async def describe(self, name: str) -> CollectionStats:
        """Scans four columns once per table version; repeated calls between writes are free."""
        table = await self._table(name)
        version = await table.version()
        cached = self._described.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        stats = await _describe(name, table)
        self._described[name] = (version, stats)
        return stats

    async def _search(
        self, name: str, table: Any, query: EngineQuery, *, final: bool
    ) -> SearchPage:
        """Candidates are ranked and fused by row address (reading no column but the score);
        the page's rows are then taken by address. A concurrent write can move rows in between
        (a compaction, an update): the page then comes back short, and the search runs once
        more (`final`) against the new version."""
        where = compile_filter(query.filter)
        budget = timedelta(seconds=query.timeout_s) if query.timeout_s else None
        depth = query.offset + query.limit
        hybrid = query.strategy is Strategy.HYBRID
        candidates = max(depth, self._hybrid_candidates) if hybrid else depth

        async def dense_side() -> tuple[int | None, list[list[Candidate]]]:
            if query.strategy is Strategy.KEYWORD:
                return None, []
            indexed = self._vector_rows.get(name)
            counting = asyncio.ensure_future(self._count(name, table, where))
            try:
                vectors = await query_vectors(query)
            except BaseException:
                counting.cancel()
                raise
            if len(vectors) == 0:
                return await counting, []
            if indexed is None:
                found = await _dense(table, vectors, where, candidates, budget, None)
                return await counting, found
            matched = await counting
            nprobes = self._nprobes(matched, indexed)
            return matched, await _dense(table, vectors, where, candidates, budget, nprobes)

        keyword_matches: int | None = None

        async def keyword_side() -> list[Candidate] | None:
            nonlocal keyword_matches
            if query.strategy is Strategy.SEMANTIC:
                return None
            if query.strategy is Strategy.HYBRID:
                ranked, _ = await _keyword(table, query.keyword_text, where, candidates, budget)
                return ranked
            # KEYWORD reports how many chunks match (up to the cap): one ranking to the cap
            # gives both the count and, at its head, the candidates
            cap = max(candidates, self._keyword_count_cap)
            ranked, keyword_matches = await _keyword(
                table, query.keyword_text, where, cap, budget, keep=candidates
            )
            return ranked

        (matched, dense_lists), keyword_list = await asyncio.gather(dense_side(), keyword_side())
        fused = fuse(dense_lists, keyword_list, query.fusion)
        page = fused[query.offset : depth]
        rows = await _chunks_at(table, [int(f.id) for f in page], budget)
        if len(rows) < len(page) and not final:
            raise _RowsMoved
        hits: list[Hit] = []
        seen: set[str] = set()
        for fused_hit in page:
            chunk = rows.get(int(fused_hit.id))
            if chunk is None or chunk.id in seen:
                continue
            seen.add(chunk.id)
            hits.append(Hit(chunk, fused_hit.score, fused_hit.dense_score, fused_hit.keyword_score))
        if matched is None:
            matched = keyword_matches or 0
        return SearchPage(hits=hits, total_count=max(matched, len(fused)))

    async def _count(self, name: str, table: Any, where: str | None) -> int:
        """Rows matching `where`, remembered per table version for recently used filters."""
        key = (name, await table.version(), where)
        cached = self._counts.get(key)
        if cached is not None:
            self._counts.move_to_end(key)
            return cached
        matched = int(await table.count_rows(where))
        self._counts[key] = matched
        if len(self._counts) > _COUNT_CACHE_SIZE:
            self._counts.popitem(last=False)
        return matched

    def _nprobes(self, matched: int, indexed_rows: int) -> tuple[int, int]:
        """(minimum, maximum) IVF probes for a filter that leaves `matched` rows, over an index
        built on `indexed_rows`.

        A selective filter probes every partition: IVF-Flat then is exact, and faster than a flat
        scan because the filter's row mask skips vectors it does not need.
        """
        if matched <= self._policy.exact_search_max_rows:
            return ALL_PARTITIONS, ALL_PARTITIONS
        return probes_for(indexed_rows, self._policy), 0

    async def _table(self, name: str) -> Any:
        table = self._tables.get(name)
        if table is not None:
            return table
        async with self._open_locks[name]:
            if name in self._tables:
                return self._tables[name]
            try:
                table = await self._db.open_table(name)
            except (ValueError, FileNotFoundError) as error:
                raise NotFound(
                    f"collection {name!r} does not exist", metadata={"collection": name}
                ) from error
            await ensure_indexes(table)
            self._vector_rows[name] = await vector_index_rows(table)
            self._tables[name] = table
            marker = self._marker(name)
            if marker is not None and marker.exists():  # a build the last process did not finish
                self._schedule_vector_rebuild(name, table)
            return table

    async def _widen_schema(
        self, name: str, table: Any, records: Sequence[ChunkRecord]
    ) -> pa.Schema:
        schema = await self._schema(name)
        known = metadata_types(schema)
        new: dict[str, FieldType] = {}
        for record in records:
            for key, value in record.chunk.metadata.items():
                incoming = metadata_type(value)
                if key in known:
                    if widen(known[key], incoming) is not known[key]:
                        raise InvalidArgument.for_field(
                            f"metadata.{key}", f"is {known[key]} in this collection, not {incoming}"
                        )
                    continue
                merged = widen(new[key], incoming) if key in new else incoming
                if merged is None:
                    raise InvalidArgument.for_field(
                        f"metadata.{key}", f"mixes {new[key]} and {incoming} values"
                    )
                new[key] = merged
        if not new:
            return schema
        try:
            await table.add_columns([metadata_field(k, t) for k, t in sorted(new.items())])
        finally:
            self._schemas.pop(name, None)
        log.info("metadata keys added", extra={"keys": sorted(new)})
        return await self._schema(name)


async def _describe(name: str, table: Any) -> CollectionStats:
    schema = await table.schema()
    model, dimensions = embedding_of(schema)
    rows = await (
        table.query().select(["document_id", "source", "entity_type", "created_at"]).to_arrow()
    )
    created = rows.column("created_at")
    return CollectionStats(
        name=name,
        document_count=pc.count_distinct(rows.column("document_id")).as_py(),
        chunk_count=rows.num_rows,
        sources=_documents_per(rows, "source"),
        entity_types=_documents_per(rows, "entity_type"),
        fields=filterable_fields(schema),
        earliest_created_at=pc.min(created).as_py(),
        latest_created_at=pc.max(created).as_py(),
        embedding_model=model,
        embedding_dimensions=dimensions,
    )


async def _dense(
    table: Any,
    query_vectors: npt.NDArray[np.float32],
    where: str | None,
    limit: int,
    budget: timedelta | None,
    nprobes: tuple[int, int] | None,
) -> list[list[Candidate]]:
    """One ranked list of (row address, cosine similarity) per query vector, best first."""
    vectors = [np.asarray(v, dtype=np.float32) for v in query_vectors]
    target: Any = vectors if len(vectors) > 1 else vectors[0]
    builder = (
        table.query()
        .nearest_to(target)
        .distance_type("cosine")
        .select(["_distance"])
        .with_row_id()
        .limit(limit)
    )
    if nprobes is None:
        builder = builder.bypass_vector_index()
    elif nprobes[0] == nprobes[1]:
        builder = builder.nprobes(nprobes[0])
    else:
        builder = builder.maximum_nprobes(nprobes[1]).minimum_nprobes(nprobes[0])
    if where:
        builder = builder.where(where)
    result = await builder.to_arrow(timeout=budget)
    ids = [str(address) for address in result.column("_rowid").to_pylist()]
    distances = result.column("_distance").to_pylist()
    owners = (
        result.column("query_index").to_pylist()
        if "query_index" in result.column_names
        else [0] * len(ids)
    )
    lists: list[list[Candidate]] = [[] for _ in vectors]
    for chunk, distance, owner in zip(ids, distances, owners, strict=True):
        lists[int(owner or 0)].append(Candidate(chunk, 1.0 - float(distance)))
    for ranking in lists:
        ranking.sort(key=lambda c: -c.score)
    return [ranking for ranking in lists if ranking] if len(vectors) > 1 else lists


async def _keyword(
    table: Any,
    text: str,
    where: str | None,
    limit: int,
    budget: timedelta | None,
    *,
    keep: int | None = None,
) -> tuple[list[Candidate], int]:
    """(row address, BM25) of the best keyword matches, best first — the first `keep` of them
    (all by default) — and how many matched, up to `limit`."""
    builder = table.query().nearest_to_text(text).select(["_score"]).with_row_id().limit(limit)
    if where:
        builder = builder.where(where)
    result = await builder.to_arrow(timeout=budget)
    head = result if keep is None else result.slice(0, keep)
    ids = [str(address) for address in head.column("_rowid").to_pylist()]
    scores = head.column("_score").to_pylist()
    ranked = [Candidate(chunk, float(score)) for chunk, score in zip(ids, scores, strict=True)]
    return ranked, int(result.num_rows)


async def _chunks_at(
    table: Any, addresses: Sequence[int], budget: timedelta | None
) -> dict[int, Chunk]:
    """The chunks stored at these addresses (an address a write has moved finds nothing)."""
    if not addresses:
        return {}
    taken = await (
        table.take_row_ids(list(addresses))
        .select([CHUNK_JSON_COLUMN])
        .with_row_id()
        .to_arrow(timeout=budget)
    )
    rows = zip(
        taken.column("_rowid").to_pylist(), taken.column(CHUNK_JSON_COLUMN).to_pylist(), strict=True
    )
    return {address: to_chunk(chunk_json) for address, chunk_json in rows}


def _documents_per(rows: pa.Table, column: str) -> dict[str, int]:
    if rows.num_rows == 0:
        return {}
    grouped = rows.group_by(column).aggregate([("document_id", "count_distinct")])
    counts = zip(
        grouped.column(column).to_pylist(),
        grouped.column("document_id_count_distinct").to_pylist(),
        strict=True,
    )
    return {value or "": int(count) for value, count in counts if value}


def _batches(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[i : i + _ID_BATCH] for i in range(0, len(values), _ID_BATCH)]
