"""`LanceDBEngine`: the `SearchEngine` over a LanceDB database directory.

It owns the open tables, their schemas and the locks: writes to one collection are serialised,
reads run concurrently. The work itself lives beside it: `rows` (schema and conversion), `sql`
(filters), `indexes` (when indexes are built), `vector_builds` (background vector-index builds),
`search` and `retrieval` (one search), `describe` (GetCollection).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from services.common.errors import FailedPrecondition, NotFound
from services.search_tool.documents import Chunk, ChunkRecord
from services.search_tool.engine.base import (
    CollectionSpec,
    CollectionStats,
    DocumentSummary,
    EngineQuery,
    SearchPage,
    StoredVersion,
)
from services.search_tool.engine.lancedb.describe import describe_table
from services.search_tool.engine.lancedb.held import HeldCollections
from services.search_tool.engine.lancedb.indexes import (
    IndexPolicy,
    Stale,
    build_vector_index,
    ensure_indexes,
    has_unindexed_rows,
    refresh_indexes,
)
from services.search_tool.engine.lancedb.maintenance import IndexMaintenance
from services.search_tool.engine.lancedb.rows import (
    CONTENT_HASH_COLUMN,
    added_metadata_fields,
    base_schema,
    document_summaries,
    embedding_of,
    filterable_fields,
    to_chunk,
    to_table,
)
from services.search_tool.engine.lancedb.search import (
    FilterCounts,
    ScoredCandidates,
    SearchLimits,
    scored_candidates,
    search_table,
)
from services.search_tool.engine.lancedb.sql import METADATA_COLUMN_PREFIX, compile_filter, literal
from services.search_tool.engine.lancedb.vector_builds import (
    VectorIndexBuilder,
    VectorIndexBuilds,
)
from services.search_tool.filters import FieldType, FilterExpression

log = logging.getLogger(__name__)

MAX_FILTERED_DESCRIPTIONS = 256
"""Descriptions under distinct caller filters remembered (a deployment has a handful)."""
_ID_BATCH = 500


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
        vector_index_builder: VectorIndexBuilder = build_vector_index,
        settle_after_s: float | None = None,
        vectors_in_memory: int = 100_000,
        keywords_in_memory: bool = True,
    ) -> None:
        self._db = connection
        self._held = HeldCollections(vectors_in_memory, keywords=keywords_in_memory)
        """Collections of at most `vectors_in_memory` chunks, per table version (`held.py`)."""
        self._maintenance = IndexMaintenance(self.settle, quiet_s=settle_after_s)
        self._policy = policy or IndexPolicy()
        self._limits = SearchLimits(self._policy, hybrid_candidates, keyword_count_cap)
        self._counts = FilterCounts()
        self._vectors = VectorIndexBuilds(marker_dir=marker_dir, builder=vector_index_builder)
        self._described: dict[str, tuple[int, CollectionStats]] = {}
        self._described_under: OrderedDict[tuple[str, int, str], CollectionStats] = OrderedDict()
        """Descriptions under a caller filter, by (table, version, compiled filter): an agent
        asks once per run, with the same few caller filters."""
        self._tables: dict[str, Any] = {}
        self._schemas: dict[str, pa.Schema] = {}
        """Each open table's schema: only this engine's writes change it (`_widen_schema`)."""
        self._write_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._deferred: dict[str, asyncio.Task[None]] = {}
        """Write-path index rebuilds waiting for index work in flight (`_refresh_after_write`)."""
        self._open_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        *,
        policy: IndexPolicy | None = None,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
        vector_index_builder: VectorIndexBuilder = build_vector_index,
        settle_after_s: float | None = None,
        vectors_in_memory: int = 100_000,
        keywords_in_memory: bool = True,
    ) -> LanceDBEngine:
        """Open (creating when missing) the database under `data_dir`; pending vector-index
        builds are remembered under `data_dir/.quarry/`. With `settle_after_s`, a collection's
        indexes are refreshed in the background once it has had no write for that long."""
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        connection = await lancedb.connect_async(str(data_dir))
        return cls(
            connection,
            policy=policy,
            hybrid_candidates=hybrid_candidates,
            keyword_count_cap=keyword_count_cap,
            marker_dir=data_dir / ".quarry",
            vector_index_builder=vector_index_builder,
            settle_after_s=settle_after_s,
            vectors_in_memory=vectors_in_memory,
            keywords_in_memory=keywords_in_memory,
        )

    async def close(self) -> None:
        """Stops vector-index builds in flight (remembered: they run again after a restart) and
        pending index maintenance (unindexed rows stay searchable)."""
        await self._maintenance.close()
        await self._cancel_deferred(list(self._deferred))
        await self._vectors.close()
        await self._held.close()
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
                try:
                    table = await self._db.create_table(name, schema=schema)
                    await ensure_indexes(table)
                except Exception:  # e.g. a full disk: no half-made table stays listed
                    with contextlib.suppress(Exception):
                        await self._db.drop_table(name)
                    raise
                self._tables[name] = table
                self._vectors.set_covered_rows(name, None)
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
        await self._maintenance.drop(name)
        async with self._write_locks[name]:
            await self._openable(name)
            await self._maintenance.drop(name)  # opening may have found it unindexed
            await self._cancel_deferred([name])
            await self._vectors.drop(name)
            async with self._open_locks[name]:
                self._tables.pop(name, None)
                self._schemas.pop(name, None)
                self._described.pop(name, None)
                for key in [k for k in self._described_under if k[0] == name]:
                    del self._described_under[key]
                self._counts.forget(name)
                self._held.forget(name)
                await self._db.drop_table(name)

    async def fields(self, name: str) -> Mapping[str, FieldType]:
        return filterable_fields(await self._schema(name))

    async def upsert(
        self, name: str, records: Sequence[ChunkRecord], *, absent: AbstractSet[str] = frozenset()
    ) -> int:
        """A merge on `id` for records that may be stored, a plain append for those the caller
        knows are not (an append skips the merge's lookup of existing ids, which grows with the
        collection)."""
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
            await self._refresh_after_write(name, table)
        self._maintenance.wrote(name)
        return len(records)

    async def _refresh_after_write(self, name: str, table: Any) -> None:
        """The write path's threshold rebuilds (`refresh_indexes`). When index work on `name` is
        in flight (a refresh, a vector-index build) the write does not wait for it: the rebuilds
        run in the background once it is over (one pending at a time)."""
        if not self._vectors.index_work_claimed(name):
            await self._threshold_refresh(name, table)  # takes the free lock without waiting
            return
        pending = self._deferred.get(name)
        if pending is None or pending.done():
            self._deferred[name] = asyncio.create_task(
                self._threshold_refresh(name, table), name=f"deferred refresh {name}"
            )

    async def _threshold_refresh(self, name: str, table: Any) -> None:
        try:
            async with self._vectors.index_work(name):
                refreshed = await refresh_indexes(table, self._policy, build_vectors=False)
        except Exception:
            if self._deferred.get(name) is not asyncio.current_task():
                raise  # on the write path: the caller sees it
            log.exception("deferred index refresh failed", extra={"collection": name})
            return
        self._vectors.set_covered_rows(name, refreshed.vector_rows)
        if refreshed.vector_rebuild_due:
            self._vectors.schedule(name, table)

    async def refresh(self, name: str) -> None:
        """Fold every row written since the last builds into the indexes and compact (after bulk
        loads; once writes pause, the background maintenance runs `settle`).

        It holds only the collection's index-work lock, never the write lock: writes and
        searches go on meanwhile (a write that lands during the compaction wins the commit and
        the compaction is given up until the next refresh; `indexes._compact`)."""
        await self._refresh(name, Stale.ALL)

    async def settle(self, name: str) -> None:
        """What the background maintenance runs once writes to `name` pause: fold the rows
        written since the last builds into the indexes once they number
        `settle_unindexed_factor` × √rows, compact once the collection has `settle_fragments`
        data fragments (`indexes.IndexPolicy`); a small write into a large collection leaves its
        rows scanned until more follow."""
        await self._refresh(name, Stale.SETTLE)

    async def _refresh(self, name: str, stale: Stale) -> None:
        table = await self._table(name)
        await self._vectors.settled(name)
        async with self._vectors.index_work(name):
            refreshed = await refresh_indexes(table, self._policy, stale=stale)
        self._vectors.set_covered_rows(name, refreshed.vector_rows)
        self._vectors.built(name)

    async def maintenance_settled(self, name: str) -> None:
        """Wait until the background index maintenance due for `name`'s writes so far has run
        (returns at once when none is due or `settle_after_s` is unset)."""
        await self._maintenance.settled(name)

    async def vector_index_settled(self, name: str) -> None:
        """Wait for background index work of `name`: vector-index builds and the write path's
        rebuilds deferred behind them."""
        while True:
            deferred = self._deferred.get(name)
            if deferred is not None and not deferred.done():
                await asyncio.wait({deferred})
                continue
            await self._vectors.settled(name)
            deferred = self._deferred.get(name)
            if deferred is None or deferred.done():
                return

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
        predicates = [f"id IN ({', '.join(literal(c) for c in b)})" for b in _batches(chunk_ids)]
        return await self._delete(name, predicates)

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
        return await self._delete(name, predicates)

    async def search(self, name: str, query: EngineQuery) -> SearchPage:
        table = await self._table(name)
        return await search_table(
            name,
            table,
            query,
            limits=self._limits,
            counts=self._counts,
            indexed_rows=lambda: self._vectors.covered_rows(name),
            held=self._held,
        )

    async def search_embedding(
        self, name: str, query: EngineQuery, vectors: Awaitable[npt.NDArray[np.float32]]
    ) -> SearchPage:
        """`search` whose keyword side (and filter count) starts before `vectors` are ready: on
        100,000 chunks under a filter the keyword query (~4 ms) runs while MiniLM embeds the
        query (~8 ms)."""
        try:
            table = await self._table(name)
        except BaseException:
            if inspect.iscoroutine(vectors):
                vectors.close()  # never started: no "never awaited" warning
            raise
        return await search_table(
            name,
            table,
            query,
            limits=self._limits,
            counts=self._counts,
            indexed_rows=lambda: self._vectors.covered_rows(name),
            pending_vectors=vectors,
            held=self._held,
        )

    async def scored_candidates(
        self, name: str, query: EngineQuery
    ) -> tuple[ScoredCandidates, dict[str, Chunk]]:
        """The candidates `search` would fuse, with both sides' scores and their chunks (for
        choosing fusion parameters offline; not part of the `SearchEngine` interface)."""
        return await scored_candidates(
            await self._table(name),
            query,
            limits=self._limits,
            counts=self._counts,
            indexed_rows=lambda: self._vectors.covered_rows(name),
        )

    async def describe(
        self, name: str, *, where: FilterExpression | None = None
    ) -> CollectionStats:
        """Scans four columns once per table version; repeated calls between writes are free.
        Under a filter (`where`), the matching rows are scanned once per (table version, filter);
        the last `MAX_FILTERED_DESCRIPTIONS` are remembered."""
        table = await self._table(name)
        compiled = compile_filter(where) if where is not None else None
        if compiled is not None:
            key = (name, await table.version(), compiled)
            stats = self._described_under.get(key)
            if stats is None:
                stats = await describe_table(name, table, compiled)
                self._described_under[key] = stats
                if len(self._described_under) > MAX_FILTERED_DESCRIPTIONS:
                    self._described_under.popitem(last=False)
            else:
                self._described_under.move_to_end(key)
            return stats
        version = await table.version()
        cached = self._described.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        stats = await describe_table(name, table)
        self._described[name] = (version, stats)
        return stats

    async def list_documents(
        self, name: str, *, where: FilterExpression | None
    ) -> list[DocumentSummary]:
        table = await self._table(name)
        schema = await self._schema(name)
        compiled = compile_filter(where) if where is not None else None
        query = table.query().select(["document_id"])
        if compiled is not None:
            query = query.where(compiled)
        matching = (await query.to_arrow()).column("document_id").to_pylist()
        if not matching:
            return []
        columns = ["document_id", "chunk_index", "source"] + [
            f.name for f in schema if f.name.startswith(METADATA_COLUMN_PREFIX)
        ]
        rows = await table.query().select(columns).to_arrow()
        return document_summaries(rows.to_pylist(), set(matching))

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]:
        query = (await self._table(name)).query().select(["chunk_json"]).limit(limit)
        compiled = compile_filter(where)
        if compiled is not None:
            query = query.where(compiled)
        rows = await query.to_arrow()
        texts = rows.column("chunk_json").to_pylist()
        # Parsing is CPU work (~60 µs a chunk: seconds for a 100,000-chunk count): in a thread.
        return await asyncio.to_thread(lambda: [to_chunk(text) for text in texts])

    async def _delete(self, name: str, predicates: Sequence[str]) -> int:
        deleted = 0
        async with self._write_locks[name]:
            table = await self._table(name)
            for predicate in predicates:
                result = await table.delete(predicate)
                deleted += result.num_deleted_rows
        if deleted:
            self._maintenance.wrote(name)
        return deleted

    async def _cancel_deferred(self, names: Sequence[str]) -> None:
        tasks = [task for name in names if (task := self._deferred.pop(name, None)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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
            self._tables[name] = table
            await self._vectors.opened(name, table)
            if await has_unindexed_rows(table):
                self._maintenance.due(name)
            return table

    async def _openable(self, name: str) -> None:
        """NotFound unless `name` is listed; a listed table that fails to open (damaged) may
        still be dropped."""
        try:
            await self._table(name)
        except Exception:
            if name not in await self.list_collections():
                raise
            log.warning("dropping a collection that cannot be opened", extra={"collection": name})

    async def _schema(self, name: str) -> pa.Schema:
        schema = self._schemas.get(name)
        if schema is None:
            schema = await (await self._table(name)).schema()
            self._schemas[name] = schema
        return schema

    async def _widen_schema(
        self, name: str, table: Any, records: Sequence[ChunkRecord]
    ) -> pa.Schema:
        schema = await self._schema(name)
        added = added_metadata_fields(schema, records)
        if not added:
            return schema
        try:
            await table.add_columns(added)
        finally:
            self._schemas.pop(name, None)
        keys = [f.name.removeprefix(METADATA_COLUMN_PREFIX) for f in added]
        log.info("metadata keys added", extra={"keys": keys})
        return await self._schema(name)


def _batches(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[i : i + _ID_BATCH] for i in range(0, len(values), _ID_BATCH)]
