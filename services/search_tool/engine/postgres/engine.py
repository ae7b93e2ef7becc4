"""`PostgresEngine`: the `SearchEngine` over PostgreSQL with pgvector and pg_trgm.

Stateless: every replica of the search tool may read and write every collection at once. Writes
are transactions that keep the BM25 statistics with the chunks (`schema.py`); two writers of one
document are serialised by a transaction-scoped advisory lock on (collection, document), and
`replace_documents` swaps a document's chunks for its new version in one transaction, so
concurrent upserts of one document leave exactly one version. The schema is migrated once however
many replicas start together (`services.common.postgres.migrate`).

Errors leave classified (`services.common.postgres.classify`): the database down → UNAVAILABLE
with RetryInfo (and readiness NOT_SERVING through `watch`), the pool full → RESOURCE_EXHAUSTED,
a statement past the request's deadline → DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg.errors
from psycopg import AsyncConnection, sql
from psycopg_pool import PoolClosed, PoolTimeout

from services.common.errors import FailedPrecondition, NotFound, QuarryError, Unavailable
from services.common.postgres import (
    DATABASE_UNAVAILABLE,
    DatabaseHealth,
    Pool,
    PostgresSettings,
    Snapshot,
    classify,
    migrate,
    open_pool,
    snapshot,
    transaction,
)
from services.search_tool.documents import Chunk, ChunkRecord
from services.search_tool.engine import bm25
from services.search_tool.engine.base import (
    CollectionSpec,
    CollectionStats,
    DocumentSummary,
    EngineQuery,
    SearchPage,
    StoredVersion,
)
from services.search_tool.engine.postgres.rows import (
    COLUMNS,
    Row,
    new_metadata_types,
    to_chunk,
    to_row,
)
from services.search_tool.engine.postgres.schema import (
    COMPONENT,
    MIGRATIONS,
    chunks_table,
    collection_ddl,
    drop_ddl,
    postings_table,
    terms_table,
)
from services.search_tool.engine.postgres.search import (
    CollectionGone,
    MatchCounts,
    SearchLimits,
    TableSearch,
)
from services.search_tool.engine.postgres.sql import compile_filter
from services.search_tool.filters import CHUNK_FIELDS, METADATA_PREFIX, FieldType, FilterExpression

log = logging.getLogger(__name__)

T = TypeVar("T")
_WRITE_ATTEMPTS = 4
"""Attempts of a write that lost a deadlock or serialisation conflict to another writer."""
_UPSERT = sql.SQL(
    "INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT (id) DO UPDATE SET {updates}"
)


@dataclass(frozen=True)
class _Collection:
    id: int
    embedding_model: str
    dimensions: int


@dataclass(frozen=True)
class _Removed:
    """What deleted or replaced rows held: their count and BM25 contribution."""

    chunks: int
    tokens: int
    terms: Counter[str]
    termless: int
    """Chunks without a term (those BM25's N and mean length leave out)."""


class PostgresEngine:
    """`SearchEngine` over one PostgreSQL database."""

    def __init__(
        self,
        pool: Pool,
        settings: PostgresSettings,
        *,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
        ef_search: int = 100,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._limits = SearchLimits(hybrid_candidates, keyword_count_cap, ef_search)
        self._counts = MatchCounts()
        self._collections: dict[str, _Collection] = {}
        self._known_fields: dict[int, dict[str, FieldType]] = {}
        """The fields `fields` last read, by collection id (`known_fields`)."""
        self._migrated = False
        self._migrate_lock = asyncio.Lock()
        self._health: DatabaseHealth | None = None

    @classmethod
    async def open(
        cls,
        settings: PostgresSettings,
        *,
        dsn: str | None = None,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
    ) -> PostgresEngine:
        """An engine over the database the settings name (the DSN from the environment or a
        Secret file unless `dsn` is given). Does not wait for the database: the schema is migrated
        on first use or when `watch` sees the database."""
        pool = await open_pool(settings, dsn=dsn, name="search_tool")
        return cls(
            pool,
            settings,
            hybrid_candidates=hybrid_candidates,
            keyword_count_cap=keyword_count_cap,
        )

    def watch(
        self, on_change: Callable[[bool], Awaitable[None]], *, interval_s: float = 2.0
    ) -> None:
        """Report reachability (with the schema migrated) to `on_change`, in the background."""

        async def changed(up: bool) -> None:
            if up:
                try:
                    await self.ensure_schema()
                except Exception:
                    log.exception("schema migration failed")
                    return
            await on_change(up)

        self._health = DatabaseHealth(self._pool, changed, interval_s=interval_s)
        self._health.start()

    async def close(self) -> None:
        if self._health is not None:
            await self._health.close()
        await self._pool.close()

    async def ensure_schema(self) -> None:
        """Apply the engine's migrations (once per process; once per database under the lock)."""
        if self._migrated:
            return
        async with self._migrate_lock:
            if self._migrated:
                return
            try:
                async with self._pool.connection(timeout=self._settings.pool_timeout_s) as conn:
                    applied = await migrate(conn, COMPONENT, MIGRATIONS)
            except QuarryError:
                raise
            except Exception as error:
                classified = classify(error, pool=self._pool, settings=self._settings)
                if classified is None:
                    raise
                raise classified from error
            if applied:
                log.info("search tool schema migrated", extra={"versions": applied})
            self._migrated = True

    # -- collections ----------------------------------------------------------------------------

    async def list_collections(self) -> list[str]:
        rows = await self._fetch(sql.SQL("SELECT name FROM quarry_collections ORDER BY name"), [])
        return [str(r[0]) for r in rows]

    async def ensure_collection(self, name: str, spec: CollectionSpec) -> None:
        async def work(conn: AsyncConnection[Any]) -> _Collection:
            await self._lock_name(conn, name)
            found = await self._lookup(conn, name)
            if found is not None:
                return found
            cursor = await conn.execute(
                "INSERT INTO quarry_collections (name, embedding_model, dimensions)"
                " VALUES (%s, %s, %s) RETURNING id",
                (name, spec.embedding_model, spec.dimensions),
            )
            row = await cursor.fetchone()
            assert row is not None
            created = _Collection(int(row[0]), spec.embedding_model, spec.dimensions)
            for statement in collection_ddl(created.id, spec.dimensions):
                await conn.execute(statement)
            log.info("collection created", extra={"collection": name})
            return created

        collection = await self._write(work)
        self._collections[name] = collection
        if (collection.embedding_model, collection.dimensions) != (
            spec.embedding_model,
            spec.dimensions,
        ):
            raise FailedPrecondition(
                f"collection {name!r} holds {collection.dimensions}-d vectors of "
                f"{collection.embedding_model!r}; the embedder makes {spec.dimensions}-d vectors "
                f"of {spec.embedding_model!r}",
                reason="EMBEDDING_MISMATCH",
                metadata={"collection": name},
            )

    async def drop_collection(self, name: str) -> None:
        async def work(conn: AsyncConnection[Any]) -> None:
            await self._lock_name(conn, name)
            found = await self._lookup(conn, name)
            if found is None:
                raise _missing(name)
            await conn.execute("DELETE FROM quarry_collections WHERE id = %s", (found.id,))
            for statement in drop_ddl(found.id):
                await conn.execute(statement)

        try:
            await self._write(work)
        finally:
            self._collections.pop(name, None)

    async def fields(self, name: str) -> Mapping[str, FieldType]:
        collection = await self._collection(name)
        fields = await self._fields(collection)
        self._known_fields[collection.id] = fields
        return fields

    def known_fields(self, name: str) -> Mapping[str, FieldType] | None:
        """What `fields` last read for the collection this process knows by `name` (None: not
        read yet). Keyed by the collection's id: one dropped and made again under its name is
        a new collection, whose fields are read afresh once a search finds the old one gone."""
        collection = self._collections.get(name)
        return None if collection is None else self._known_fields.get(collection.id)

    async def _fields(self, collection: _Collection) -> dict[str, FieldType]:
        types = await self._metadata_types(collection)
        fields = dict(CHUNK_FIELDS)
        for key, field_type in sorted(types.items()):
            fields[METADATA_PREFIX + key] = field_type
        return fields

    async def _metadata_types(
        self, collection: _Collection, conn: AsyncConnection[Any] | None = None
    ) -> dict[str, FieldType]:
        statement = sql.SQL(
            "SELECT key, type FROM quarry_collection_fields WHERE collection_id = %s"
        )
        if conn is not None:
            rows = await (await conn.execute(statement, (collection.id,))).fetchall()
        else:
            rows = await self._fetch(statement, [collection.id])
        return {str(k): FieldType(str(t)) for k, t in rows}

    # -- writes ---------------------------------------------------------------------------------

    async def upsert(
        self, name: str, records: Sequence[ChunkRecord], *, absent: AbstractSet[str] = frozenset()
    ) -> int:
        """Insert or replace records by chunk id. `absent` is not trusted: another replica may
        have written those ids since the caller looked, so every id is checked (by its key)."""
        if not records:
            return 0
        written, _ = await self._store(name, records, replace=False)
        return written

    async def replace_documents(self, name: str, records: Sequence[ChunkRecord]) -> tuple[int, int]:
        """Make `records` the whole of their documents: upsert them and delete every other chunk
        of those documents, in one transaction under the documents' locks. Returns (chunks
        written, chunks deleted)."""
        if not records:
            return 0, 0
        return await self._store(name, records, replace=True)

    async def _store(
        self, name: str, records: Sequence[ChunkRecord], *, replace: bool
    ) -> tuple[int, int]:
        collection = await self._collection(name)
        counts = await asyncio.to_thread(
            lambda: [bm25.term_counts(r.indexed_text) for r in records]
        )
        ordered = sorted(zip(records, counts, strict=True), key=lambda pair: pair[0].chunk.id)
        documents = sorted({r.chunk.document_id for r in records})
        ids = [r.chunk.id for r, _ in ordered]
        table = chunks_table(collection.id)

        async def work(conn: AsyncConnection[Any]) -> tuple[int, int]:
            await self._lock_documents(conn, collection, documents)
            types = await self._widen(conn, collection, records)
            if replace:
                old = await self._select_for_update(conn, table, "document_id", documents)
            else:
                old = await self._select_for_update(conn, table, "id", ids)
            keep = set(ids)
            stale = [chunk_id for chunk_id in old if chunk_id not in keep]
            if stale:
                await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(table), (stale,)
                )
            rows = [to_row(record, types, count) for record, count in ordered]
            statement = _UPSERT.format(
                table=table,
                columns=sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS),
                values=sql.SQL(", ").join(
                    sql.SQL("%s::vector") if c == "embedding" else sql.Placeholder()
                    for c in COLUMNS
                ),
                updates=sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                    for c in COLUMNS
                    if c != "id"
                ),
            )
            async with conn.cursor() as cursor:
                await cursor.executemany(statement, [row.values for row in rows])
            await self._replace_postings(conn, collection, list(old), rows, ids)
            removed = _removed(old.values())
            added_terms: Counter[str] = Counter()
            for row in rows:
                added_terms.update(row.counts.counts.keys())
            await self._apply_statistics(
                conn,
                collection,
                chunks=len(rows) - removed.chunks,
                tokens=sum(r.counts.length for r in rows) - removed.tokens,
                termless=sum(1 for r in rows if not r.counts.length) - removed.termless,
                terms=_delta(added_terms, removed.terms),
            )
            return len(rows), len(stale)

        return await self._write(work, name)

    async def delete_chunks(self, name: str, chunk_ids: Sequence[str]) -> int:
        if not chunk_ids:
            return 0
        return await self._delete(name, sql.SQL("c.id = ANY(%s)"), [list(chunk_ids)])

    async def delete_matching(
        self, name: str, *, document_ids: Sequence[str], where: FilterExpression | None
    ) -> int:
        parts: list[sql.Composable] = []
        params: list[object] = []
        if document_ids:
            parts.append(sql.SQL("c.document_id = ANY(%s)"))
            params.append(list(document_ids))
        if where is not None:
            compiled, where_params = compile_filter(where, alias="c")
            parts.append(compiled)
            params.extend(where_params)
        if not parts:
            return 0
        return await self._delete(name, sql.SQL(" OR ").join(parts), params)

    async def _delete(self, name: str, condition: sql.Composable, params: list[object]) -> int:
        collection = await self._collection(name)
        statement = sql.SQL(
            "DELETE FROM {} c WHERE {} RETURNING c.id, c.term_freqs, c.doc_length"
        ).format(chunks_table(collection.id), condition)

        async def work(conn: AsyncConnection[Any]) -> int:
            rows = await (await conn.execute(statement, params)).fetchall()
            if not rows:
                return 0
            await self._replace_postings(conn, collection, [str(r[0]) for r in rows], [], [])
            removed = _removed({str(i): (f, int(n)) for i, f, n in rows}.values())
            await self._apply_statistics(
                conn,
                collection,
                chunks=-removed.chunks,
                tokens=-removed.tokens,
                termless=-removed.termless,
                terms=Counter({t: -n for t, n in removed.terms.items()}),
            )
            return len(rows)

        deleted: int = await self._write(work, name)
        return deleted

    async def _lock_documents(
        self, conn: AsyncConnection[Any], collection: _Collection, documents: Sequence[str]
    ) -> None:
        """Transaction-scoped advisory locks on (collection, document), taken in one order."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(%s::int4, h) FROM"
            " (SELECT DISTINCT hashtext(d) AS h FROM unnest(%s::text[]) AS d ORDER BY 1) AS x",
            (collection.id % 2_147_483_647, list(documents)),
        )

    async def _replace_postings(
        self,
        conn: AsyncConnection[Any],
        collection: _Collection,
        removed_ids: list[str],
        rows: Sequence[Row],
        ids: Sequence[str],
    ) -> None:
        """Drop the postings of the chunks replaced or deleted, add those of the rows written
        (`rows` in the order of `ids`)."""
        table = postings_table(collection.id)
        if removed_ids:
            await conn.execute(
                sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(table), (removed_ids,)
            )
        terms: list[str] = []
        chunk_ids: list[str] = []
        tfs: list[int] = []
        lengths: list[int] = []
        for chunk_id, row in zip(ids, rows, strict=True):
            for term, tf in row.counts.counts.items():
                terms.append(term)
                chunk_ids.append(chunk_id)
                tfs.append(tf)
                lengths.append(row.counts.length)
        if terms:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (term, chunk_id, tf, doc_length)"
                    " SELECT * FROM unnest(%s::text[], %s::text[], %s::int[], %s::int[])"
                ).format(table),
                (terms, chunk_ids, tfs, lengths),
            )

    async def _select_for_update(
        self, conn: AsyncConnection[Any], table: sql.Identifier, column: str, values: list[str]
    ) -> dict[str, tuple[Any, int]]:
        statement = sql.SQL(
            "SELECT id, term_freqs, doc_length FROM {} WHERE {} = ANY(%s) ORDER BY id FOR UPDATE"
        ).format(table, sql.Identifier(column))
        rows = await (await conn.execute(statement, (values,))).fetchall()
        return {str(i): (f, int(n)) for i, f, n in rows}

    async def _widen(
        self, conn: AsyncConnection[Any], collection: _Collection, records: Sequence[ChunkRecord]
    ) -> dict[str, FieldType]:
        """The collection's metadata types after recording the keys `records` bring (a key
        another writer recorded meanwhile with another type is InvalidArgument)."""
        known = await self._metadata_types(collection, conn)
        new = new_metadata_types(known, records)
        if not new:
            return known
        await conn.execute(
            "INSERT INTO quarry_collection_fields (collection_id, key, type)"
            " SELECT %s, k, t FROM unnest(%s::text[], %s::text[]) AS x(k, t) ORDER BY k"
            " ON CONFLICT DO NOTHING",
            (collection.id, list(new), [t.value for t in new.values()]),
        )
        recorded = await self._metadata_types(collection, conn)
        new_metadata_types(recorded, records)  # raises if another writer typed a key otherwise
        log.info("metadata keys added", extra={"keys": sorted(new)})
        return recorded

    async def _apply_statistics(
        self,
        conn: AsyncConnection[Any],
        collection: _Collection,
        *,
        chunks: int,
        tokens: int,
        termless: int,
        terms: Mapping[str, int],
    ) -> None:
        """Fold a write's change into the BM25 statistics (terms in one order, the totals last:
        concurrent writers queue on the hot rows for the shortest time)."""
        changed = sorted((t, n) for t, n in terms.items() if n)
        if changed:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} AS t (term, df)"
                    " SELECT term, n FROM unnest(%s::text[], %s::int[]) AS x(term, n) ORDER BY term"
                    " ON CONFLICT (term) DO UPDATE SET df = t.df + EXCLUDED.df"
                ).format(terms_table(collection.id)),
                ([t for t, _ in changed], [n for _, n in changed]),
            )
        await conn.execute(
            "UPDATE quarry_collections SET chunk_count = chunk_count + %s,"
            " token_count = token_count + %s, termless_count = termless_count + %s,"
            " write_seq = write_seq + 1 WHERE id = %s",
            (chunks, tokens, termless, collection.id),
        )

    # -- reads ----------------------------------------------------------------------------------

    async def stored_versions(
        self, name: str, document_ids: Sequence[str]
    ) -> dict[str, StoredVersion]:
        collection = await self._collection(name)
        rows = await self._fetch(
            sql.SQL(
                "SELECT document_id, id, content_hash FROM {} WHERE document_id = ANY(%s)"
            ).format(chunks_table(collection.id)),
            [list(document_ids)],
            name,
        )
        ids: dict[str, set[str]] = {}
        hashes: dict[str, set[str]] = {}
        for document, chunk, content_hash in rows:
            ids.setdefault(str(document), set()).add(str(chunk))
            hashes.setdefault(str(document), set()).add(str(content_hash or ""))
        return {
            doc: StoredVersion(
                frozenset(chunks), next(iter(hashes[doc])) if len(hashes[doc]) == 1 else ""
            )
            for doc, chunks in ids.items()
        }

    async def search(self, name: str, query: EngineQuery) -> SearchPage:
        return await self._search(name, query)

    async def search_embedding(
        self, name: str, query: EngineQuery, vectors: Awaitable[npt.NDArray[np.float32]]
    ) -> SearchPage:
        """`search` whose keyword side is sent to the database before `vectors` are ready: under
        a filter at 100,000 chunks the keyword statement (~20 ms) runs while the query is
        embedded (~10 ms). The embedding starts at once, inside the search's time budget; its
        error is the search's error, and it is cancelled when the search ends without it."""
        pending = asyncio.ensure_future(vectors)
        try:
            return await self._search(name, query, pending)
        finally:
            if not pending.done():
                pending.cancel()
            elif not pending.cancelled():
                pending.exception()  # retrieved: an unneeded failure is not logged as unhandled

    async def _search(
        self,
        name: str,
        query: EngineQuery,
        pending: Awaitable[npt.NDArray[np.float32]] | None = None,
    ) -> SearchPage:
        """One search in one snapshot (`TableSearch.run`, with `pending` vectors if given)."""
        collection = await self._collection(name)

        async def work(conn: Snapshot) -> SearchPage:
            search = TableSearch(
                collection.id, query, conn=conn, limits=self._limits, counts=self._counts
            )
            return await search.run(pending)

        try:
            return await self._read(work, name, timeout_s=query.timeout_s)
        except CollectionGone:
            self._collections.pop(name, None)
            raise _missing(name) from None

    async def describe(
        self, name: str, *, where: FilterExpression | None = None
    ) -> CollectionStats:
        collection = await self._collection(name)
        table = chunks_table(collection.id)
        predicate, params = compile_filter(where, alias="c")
        summary = await self._fetch(
            sql.SQL(
                "SELECT count(DISTINCT c.document_id), count(*), min(c.created_at),"
                " max(c.created_at) FROM {} c WHERE {}"
            ).format(table, predicate),
            params,
            name,
        )
        sources = await self._documents_per(table, "source", predicate, params, name)
        entity_types = await self._documents_per(table, "entity_type", predicate, params, name)
        fields = await self._fields(collection)
        if where is not None and not where.is_empty:
            present = await self._fetch(
                sql.SQL("SELECT DISTINCT jsonb_object_keys(c.metadata) FROM {} c WHERE {}").format(
                    table, predicate
                ),
                params,
                name,
            )
            keys = {METADATA_PREFIX + str(r[0]) for r in present}
            fields = {
                k: v for k, v in fields.items() if not k.startswith(METADATA_PREFIX) or k in keys
            }
        documents, chunks, earliest, latest = summary[0]
        return CollectionStats(
            name=name,
            document_count=int(documents),
            chunk_count=int(chunks),
            sources=sources,
            entity_types=entity_types,
            fields=fields,
            earliest_created_at=_utc(earliest),
            latest_created_at=_utc(latest),
            embedding_model=collection.embedding_model,
            embedding_dimensions=collection.dimensions,
        )

    async def _documents_per(
        self,
        table: sql.Identifier,
        column: str,
        predicate: sql.Composable,
        params: list[object],
        name: str,
    ) -> dict[str, int]:
        rows = await self._fetch(
            sql.SQL(
                "SELECT c.{0}, count(DISTINCT c.document_id) FROM {1} c"
                " WHERE c.{0} <> '' AND {2} GROUP BY c.{0}"
            ).format(sql.Identifier(column), table, predicate),
            params,
            name,
        )
        return {str(value): int(count) for value, count in rows}

    async def list_documents(
        self, name: str, *, where: FilterExpression | None
    ) -> list[DocumentSummary]:
        collection = await self._collection(name)
        table = chunks_table(collection.id)
        predicate, params = compile_filter(where, alias="c")
        rows = await self._fetch(
            sql.SQL(
                "SELECT d.document_id, count(*),"
                " (array_agg(d.source ORDER BY d.chunk_index))[1],"
                " (array_agg(d.metadata ORDER BY d.chunk_index))[1]"
                " FROM {0} d WHERE d.document_id IN (SELECT c.document_id FROM {0} c WHERE {1})"
                " GROUP BY d.document_id"
            ).format(table, predicate),
            params,
            name,
        )
        return [
            DocumentSummary(
                id=str(document),
                source=str(source or ""),
                chunk_count=int(count),
                metadata=dict(metadata or {}),
            )
            for document, count, source, metadata in rows
        ]

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]:
        collection = await self._collection(name)
        predicate, params = compile_filter(where, alias="c")
        rows = await self._fetch(
            sql.SQL("SELECT c.chunk_json FROM {} c WHERE {} LIMIT %s").format(
                chunks_table(collection.id), predicate
            ),
            [*params, limit],
            name,
        )
        texts = [str(r[0]) for r in rows]
        return await asyncio.to_thread(lambda: [to_chunk(text) for text in texts])

    # -- plumbing -------------------------------------------------------------------------------

    async def _collection(self, name: str) -> _Collection:
        cached = self._collections.get(name)
        if cached is not None:
            return cached

        async def work(conn: Snapshot) -> _Collection | None:
            return await self._lookup(conn, name)

        found = await self._read(work, name)
        if found is None:
            raise _missing(name)
        self._collections[name] = found
        return found

    async def _lookup(self, conn: AsyncConnection[Any] | Snapshot, name: str) -> _Collection | None:
        cursor = await conn.execute(
            "SELECT id, embedding_model, dimensions FROM quarry_collections WHERE name = %s",
            (name,),
        )
        if isinstance(conn, Snapshot):
            await conn.end()
        row = await cursor.fetchone()
        return None if row is None else _Collection(int(row[0]), str(row[1]), int(row[2]))

    async def _lock_name(self, conn: AsyncConnection[Any], name: str) -> None:
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('quarry.collection:' || %s, 0))",
            (name,),
        )

    async def _fetch(
        self,
        statement: sql.Composed | sql.SQL,
        params: list[object],
        name: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> list[tuple[Any, ...]]:
        async def work(conn: Snapshot) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(statement, params)
            await conn.end()
            return list(await cursor.fetchall())

        rows: list[tuple[Any, ...]] = await self._read(work, name, timeout_s=timeout_s)
        return rows

    async def _read(
        self,
        work: Callable[[Snapshot], Awaitable[T]],
        name: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> T:
        """Read-only work in one snapshot, its statements pipelined (`snapshot`)."""
        await self._guard(self.ensure_schema(), name)

        async def once() -> T:
            async with snapshot(self._pool, self._settings, timeout_s=timeout_s) as conn:
                return await work(conn)

        try:
            return await self._guard(once(), name)
        except Unavailable as error:
            # a read may have met a connection the server dropped (a restart within a second of
            # its last use, handed out unchecked): asked again, every connection is checked first
            if error.reason != DATABASE_UNAVAILABLE or isinstance(
                error.__cause__, PoolTimeout | PoolClosed
            ):
                raise  # not a dropped connection: no connection could be had at all
            return await self._guard(once(), name)

    async def _transact(
        self,
        work: Callable[[AsyncConnection[Any]], Awaitable[T]],
        name: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> T:
        await self._guard(self.ensure_schema(), name)

        async def once() -> T:
            async with transaction(self._pool, self._settings, timeout_s=timeout_s) as conn:
                return await work(conn)

        return await self._guard(once(), name)

    async def _write(
        self, work: Callable[[AsyncConnection[Any]], Awaitable[T]], name: str | None = None
    ) -> T:
        """A write transaction, run again when it lost a deadlock or serialisation conflict."""
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                return await self._transact(work, name)
            except Unavailable as error:
                if error.reason != "DATABASE_CONFLICT" or attempt == _WRITE_ATTEMPTS:
                    raise
                await asyncio.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    async def _guard(self, work: Awaitable[T], name: str | None) -> T:
        """Run `work`; a table dropped under it is NotFound, an unreachable database is told to
        the health watch at once."""
        try:
            return await work
        except psycopg.errors.UndefinedTable:
            if name is not None:
                self._collections.pop(name, None)
                raise _missing(name) from None
            raise
        except Unavailable as error:
            if self._health is not None:
                self._health.failed(error)
            raise


def _missing(name: str) -> NotFound:
    return NotFound(f"collection {name!r} does not exist", metadata={"collection": name})


def _removed(rows: Any) -> _Removed:
    terms: Counter[str] = Counter()
    chunks = tokens = termless = 0
    for term_freqs, length in rows:
        chunks += 1
        tokens += int(length)
        termless += int(length) == 0
        terms.update((term_freqs or {}).keys())
    return _Removed(chunks, tokens, terms, termless)


def _delta(added: Counter[str], removed: Counter[str]) -> dict[str, int]:
    """Per term, chunks gained minus chunks lost (negative counts kept, unlike `Counter -`)."""
    delta: dict[str, int] = dict(added)
    for term, count in removed.items():
        delta[term] = delta.get(term, 0) - count
    return delta


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.astimezone(UTC)
