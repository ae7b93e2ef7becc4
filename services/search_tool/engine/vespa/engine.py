"""`VespaEngine`: the `SearchEngine` over a deployed Quarry application package (`package`).

Reads run concurrently; writes to one collection are serialised by a lock in this process; the
one document several replicas share, a collection's registry entry, is written by test-and-set
(`registry`), and each chunk put is conditional on the collection's incarnation, so an upsert
racing a deletion and re-creation on another replica leaves nothing in the new collection. A
write's chunks go out together; when one fails, the others are cancelled and
awaited before the lock is released. Acked writes are visible to the next query in indexed mode,
so `upsert` returns only once Vespa acknowledged every chunk.

What a search needs besides its ranked requests is cached for `facts_ttl_s`: the registry entry,
each filter's count, GetCollection's answer; what another replica changed shows here at most that
much later, this process's own writes drop it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple, TypeVar

from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from services.search_tool.documents import (
    Chunk,
    ChunkRecord,
    from_epoch_microseconds,
)
from services.search_tool.engine.base import (
    FULL_COVERAGE,
    CollectionSpec,
    CollectionStats,
    Coverage,
    CursorRejected,
    Degradation,
    DocumentsPage,
    DocumentSummary,
    EngineQuery,
    Hit,
    SearchPage,
    StoredVersion,
    Strategy,
)
from services.search_tool.engine.vespa.documents import (
    HIT_FIELDS,
    chunk_document_id,
    chunk_fields,
    chunk_from_hit,
)
from services.search_tool.engine.vespa.listing import (
    MAX_ROUNDS,
    MAX_WANTED,
    VisitCursor,
    ending_digest,
    first_chunk_selection,
)
from services.search_tool.engine.vespa.package import (
    BM25_FEATURE,
    CHUNK,
    COLLECTION,
    KEYWORD_PROFILE,
    MAX_HITS,
    MAX_OFFSET,
    MAX_QUERY_VECTORS,
    METADATA_MAPS,
    SEMANTIC_PROFILE,
    cosine_feature,
    package_profile,
)
from services.search_tool.engine.vespa.queries import (
    chunk_counts_body,
    count_body,
    dense_body,
    describe_body,
    ids_body,
    keyword_body,
    scan_body,
)
from services.search_tool.engine.vespa.registry import ATTEMPTS as REGISTRY_ATTEMPTS
from services.search_tool.engine.vespa.registry import (
    CollectionRegistry,
    Registered,
    condition_of,
)
from services.search_tool.engine.vespa.selection import collection_selection, compile_selection
from services.search_tool.engine.vespa.transport import (
    RETRY_AFTER_S,
    ConditionFailed,
    ContinuationRefused,
    Endpoint,
    QueryRejected,
    VespaTransport,
)
from services.search_tool.engine.vespa.yql import vespa_field
from services.search_tool.filters import (
    CHUNK_FIELDS,
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
)
from services.search_tool.fusion import (
    Candidate,
    Completion,
    all_keyword_matches,
    fuse,
    keyword_only,
)

log = logging.getLogger(__name__)

_ID_BATCH = 200
_ID_FIELDS = ("chunk_id", "document_id", "content_hash")
_SUMMARY = ("chunk_id", "chunk_json")
FACTS_TTL_S = 5.0
"""Default longest a cached registry entry, filter count or GetCollection answer is reused."""
READINESS_PROBE = "quarry-readiness-probe"
"""A chunk id no chunk has: the readiness query matches nothing."""
READINESS_TIMEOUT_S = 2.0
"""Longest the readiness query may take before Vespa counts as not answering."""
COUNT_CACHE_SIZE = 256
"""Filter counts remembered (the oldest goes first)."""
_T = TypeVar("_T")


class _NoSearchableWord(Exception):
    """Vespa refused a query whose text has no searchable word (a null item)."""


class _Scored(NamedTuple):
    """One hit of a ranked request with both sides' scores (`matchfeatures`)."""

    chunk_id: str
    fields: Mapping[str, Any]
    """The hit's summary fields (`HIT_FIELDS`)."""
    cosines: tuple[float, ...]
    """Cosine to each query vector (`cosine_q<i>`; 0 beyond the query's vectors)."""
    bm25: float
    """`bm25(search_text)`: 0 when no word of the text occurs."""


class VespaEngine:
    """`SearchEngine` over Vespa."""

    def __init__(
        self,
        transport: VespaTransport,
        *,
        hybrid_candidates: int = 100,
        keyword_count_cap: int = 10_000,
        facts_ttl_s: float = FACTS_TTL_S,
    ) -> None:
        self._transport = transport
        self._hybrid_candidates = hybrid_candidates
        self._keyword_count_cap = keyword_count_cap
        self._facts_ttl_s = facts_ttl_s
        self._write_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._registry = CollectionRegistry(transport, facts_ttl_s)
        self._counts: dict[tuple[str, str], tuple[float, int]] = {}
        self._described: dict[str, tuple[float, CollectionStats]] = {}

    @classmethod
    async def open(cls, endpoint: Endpoint, **limits: Any) -> VespaEngine:
        transport = VespaTransport(endpoint)
        await transport.open()
        return cls(transport, **limits)

    async def unready_reason(self) -> str | None:
        """None when Vespa answers queries and runs this application package, else why not: an
        unranked `hits: 0` query on a fast-search attribute (nothing to match, nothing to scan)
        naming the rank profile only this package has (`package.package_profile`); with the
        feed cluster apart (`feed_url`), also a document get there (404 is an answer)."""
        body = {
            "yql": f'select chunk_id from {CHUNK} where chunk_id contains "{READINESS_PROBE}"',
            "hits": 0,
            "ranking": package_profile(),
        }
        try:
            await self._transport.query(body, READINESS_TIMEOUT_S)
            if self._transport.feeds_apart:  # the feed cluster must answer document/v1 too
                await self._transport.get(COLLECTION, READINESS_PROBE)
        except QueryRejected as rejected:
            return (
                f"Vespa does not run this application package (rank profile "
                f"{package_profile()} missing: {rejected.message})"
            )
        except (Unavailable, DeadlineExceeded, FailedPrecondition) as error:
            return error.message
        return None

    @contextlib.asynccontextmanager
    async def _writing(self, name: str) -> AsyncIterator[None]:
        """The collection's write lock; when the write ends, what this process remembers of
        the collection's contents (counts, GetCollection's answer) goes."""
        async with self._write_locks[name]:
            try:
                yield
            finally:
                self._described.pop(name, None)
                self._counts = {k: v for k, v in self._counts.items() if k[0] != name}

    @property
    def transport(self) -> VespaTransport:
        """The HTTP edge (its `writes_in_flight` shows whether writes are still running)."""
        return self._transport

    async def close(self) -> None:
        await self._transport.close()

    async def list_collections(self) -> list[str]:
        """Every registered name, in unranked pages of `MAX_HITS` until a short page; more than
        a query can page (`maxOffset`) fails with FailedPrecondition rather than a silent part."""
        names: list[str] = []
        while True:
            if len(names) > MAX_OFFSET:
                raise FailedPrecondition(
                    f"more than {MAX_OFFSET + MAX_HITS} collections are registered; the Vespa "
                    "engine lists at most maxOffset + maxHits of them",
                    reason="VESPA_MAX_OFFSET",
                    metadata={"max_offset": str(MAX_OFFSET)},
                )
            root = await self._transport.query(
                {
                    "yql": f"select name from {COLLECTION} where true",
                    "hits": MAX_HITS,
                    "offset": len(names),
                    "ranking": "unranked",
                }
            )
            page = [str(h["fields"]["name"]) for h in root.get("children", []) if "fields" in h]
            names.extend(page)
            if len(page) < MAX_HITS:
                return sorted(set(names))

    async def ensure_collection(self, name: str, spec: CollectionSpec) -> None:
        async with self._write_locks[name]:
            await self._registry.ensure(name, spec)

    async def drop_collection(self, name: str) -> None:
        """The registry entry is marked (the fence other replicas' upserts check, `registry`),
        Vespa removes the chunks itself (a selection delete), then the entry goes."""
        async with self._writing(name):
            await self._registry.mark_dropping(name)
            removed = await self._transport.delete_where(CHUNK, collection_selection(name))
            await self._registry.delete(name)
            log.info("collection dropped", extra={"collection": name, "chunks": removed})

    async def fields(self, name: str) -> Mapping[str, FieldType]:
        types = (await self._spec(name)).types
        fields = dict(CHUNK_FIELDS)
        fields.update({f"{METADATA_PREFIX}{k}": t for k, t in sorted(types.items())})
        return fields

    async def upsert(
        self, name: str, records: Sequence[ChunkRecord], *, absent: AbstractSet[str] = frozenset()
    ) -> int:
        """Puts are idempotent by chunk id, so `absent` changes nothing here. Each put is
        conditional on the incarnation of the entry read first (`registry`); after all were
        answered the entry is read again, and when it is marked, gone or of another incarnation
        (deleted, maybe created again, meanwhile) what this upsert wrote is deleted again."""
        if not records:
            return 0
        async with self._writing(name):
            entry = await self._registry.widen(name, records)
            written = await _together(
                self._put_chunk(name, entry.incarnation, r, entry.types) for r in records
            )
            if not all(written) or not await self._registry.still_there(name, entry.incarnation):
                # deleted meanwhile by another replica: its chunk deletion may have run before
                # these writes landed, so they would outlive the collection (or sit in the one
                # created again under the same name)
                await self._delete_own(name, entry.incarnation, [r.chunk.id for r in records])
                raise NotFound(
                    f"collection {name!r} was deleted while this upsert wrote; what it wrote "
                    "was deleted again",
                    reason="VESPA_COLLECTION_DROPPED",
                    metadata={"collection": name},
                )
        return len(records)

    async def _put_chunk(
        self,
        name: str,
        incarnation: str,
        record: ChunkRecord,
        types: Mapping[str, FieldType],
    ) -> bool:
        """Write one chunk into `incarnation`: with `create` and the condition that a chunk
        stored under its id is of the same incarnation. Refused (412), the stored chunk is of
        another one: when the entry, read fresh, is still `incarnation`, that chunk is older
        (a newer incarnation exists only once this one's entry is gone) and is replaced, on
        condition that it is still the one read; else this upsert is the older one and the chunk
        is left alone: False. At most `ATTEMPTS` rounds, then Unavailable."""
        document_id = chunk_document_id(name, record.chunk.id)
        fields = chunk_fields(name, record, types)
        if incarnation:
            fields["incarnation"] = incarnation
        condition = condition_of(incarnation)
        for _ in range(REGISTRY_ATTEMPTS):
            try:
                await self._transport.put(
                    CHUNK, document_id, fields, condition=condition, create=True
                )
                return True
            except ConditionFailed:
                pass
            stored = await self._transport.get(CHUNK, document_id)
            if not await self._registry.still_there(name, incarnation):
                return False
            if stored is None:  # deleted since the refusal: written as new
                condition = condition_of(incarnation)
                continue
            found = str(stored.get("incarnation") or "")
            log.info(
                "a chunk of an older incarnation under this id: replacing it",
                extra={"collection": name, "incarnation": found or None},
            )
            condition = condition_of(found)
        raise Unavailable(
            f"chunk {record.chunk.id!r} of collection {name!r} kept changing under this write "
            f"({REGISTRY_ATTEMPTS} test-and-set rounds); retry",
            retry_after_s=RETRY_AFTER_S,
            reason="VESPA_CHUNK_CONTENDED",
            metadata={"collection": name, "chunk_id": record.chunk.id},
        )

    async def _delete_own(self, name: str, incarnation: str, chunk_ids: Sequence[str]) -> None:
        """Delete these chunks where they are still of `incarnation` (a chunk the collection
        created again holds under the same id is not this upsert's to delete); 412 (another
        incarnation's, or none) leaves it."""

        async def delete(chunk_id: str) -> None:
            with contextlib.suppress(ConditionFailed):
                await self._transport.delete(
                    CHUNK, chunk_document_id(name, chunk_id), condition=condition_of(incarnation)
                )

        await _together(delete(c) for c in chunk_ids)

    async def stored_versions(
        self, name: str, document_ids: Sequence[str]
    ) -> dict[str, StoredVersion]:
        await self._spec(name)
        ids: dict[str, set[str]] = defaultdict(set)
        hashes: dict[str, set[str]] = defaultdict(set)
        for batch in _batches(document_ids):
            for fields in await self._all_ids(name, _in("document_id", batch)):
                ids[fields["document_id"]].add(fields["chunk_id"])
                hashes[fields["document_id"]].add(fields.get("content_hash") or "")
        return {
            doc: StoredVersion(
                frozenset(chunks), next(iter(hashes[doc])) if len(hashes[doc]) == 1 else ""
            )
            for doc, chunks in ids.items()
        }

    async def delete_chunks(self, name: str, chunk_ids: Sequence[str]) -> int:
        deleted = 0
        async with self._writing(name):
            for batch in _batches(chunk_ids):
                existing = [f["chunk_id"] for f in await self._all_ids(name, _in("id", batch))]
                await self._delete_ids(name, existing)
                deleted += len(existing)
        return deleted

    async def delete_matching(
        self, name: str, *, document_ids: Sequence[str], where: FilterExpression | None
    ) -> int:
        deleted = 0
        async with self._writing(name):
            await self._spec(name)
            for batch in _batches(document_ids):  # ids by attribute lookup, deleted by id
                deleted += await self._delete_ids_matching(name, _in("document_id", batch))
            if where is not None:
                deleted += await self._delete_all_matching(name, where)
        return deleted

    async def search(self, name: str, query: EngineQuery) -> SearchPage:
        """At most two ranked requests at once (`queries`: the dense side with each hit's BM25,
        the keyword side with each hit's cosines) and, when the total is not cached, a count
        beside them; the sides are fused by `fusion.py`, as in the embedded engine."""
        await self._spec(name)
        depth = query.offset + query.limit
        if depth > MAX_HITS:
            raise InvalidArgument.for_field(
                "offset", f"offset + limit may be at most {MAX_HITS} with the Vespa engine"
            )
        hybrid = query.strategy is Strategy.HYBRID
        hits = max(depth, self._hybrid_candidates) if hybrid else depth
        dense = query.strategy is not Strategy.KEYWORD and len(query.vectors) > 0
        keyword = query.strategy is not Strategy.SEMANTIC
        vectors = query.vectors if dense else query.vectors[:0]
        dense_task = (
            self._dense(name, query, hits, query.keyword_query if keyword else None)
            if dense
            else _nothing()
        )
        keyword_task = (
            self._ranked(
                keyword_body(
                    name, query.filter, query.keyword_query, hits, vectors if dense else None
                ),
                query,
                keyword=True,
            )
            if keyword
            else _nothing()
        )
        count_text = query.keyword_query if query.strategy is Strategy.KEYWORD else None
        dense_side, keyword_side, (total, count_coverage) = await asyncio.gather(
            dense_task, keyword_task, self._count(name, query, count_text)
        )
        coverage = count_coverage
        scored: dict[str, _Scored] = {}
        dense_lists: list[list[Candidate]] = []
        if dense_side is not None:
            found, side_coverage = dense_side
            coverage = coverage.merged(side_coverage)
            scored.update(found)
            dense_lists = [_by_cosine(found.values(), i, hits) for i in range(len(vectors))]
        keyword_list = None
        if keyword_side is not None:
            found, side_coverage = keyword_side
            coverage = coverage.merged(side_coverage)
            keyword_list = [Candidate(s.chunk_id, s.bm25) for s in found.values()][:hits]
            for chunk_id, hit in found.items():
                scored.setdefault(chunk_id, hit)
        completion = None
        if keyword_list is not None and dense_lists:
            completion = _completion(dense_lists, keyword_list, scored, len(vectors), hits)
        fused = fuse(dense_lists, keyword_list, query.fusion, completion)
        page = [
            Hit(chunk_from_hit(scored[f.id].fields), f.score, f.dense_score, f.keyword_score)
            for f in fused[query.offset : depth]
        ]
        if count_text is not None:
            total = min(total, self._keyword_count_cap)
        return SearchPage(hits=page, total_count=max(total, len(fused)), coverage=coverage)

    async def describe(
        self, name: str, *, where: FilterExpression | None = None
    ) -> CollectionStats:
        """Counts, facets and date range: three grouping/count queries at once. Without a filter
        (GetCollection, every agent run) the answer is cached for `facts_ttl_s`; this process's
        own writes to the collection drop it at once."""
        cached = self._described.get(name) if where is None else None
        if cached is not None and time.monotonic() - cached[0] < self._facts_ttl_s:
            return cached[1]
        stats = await self._describe(name, where)
        if where is None:
            self._described[name] = (time.monotonic(), stats)
        return stats

    async def _describe(self, name: str, where: FilterExpression | None) -> CollectionStats:
        stored = await self._spec(name)
        spec, types = stored.spec, stored.types
        expression = where or FilterExpression()
        try:
            chunks, grouped, dated = await asyncio.gather(
                self._transport.query(count_body(name, expression)),
                self._transport.query(describe_body(name, expression)),
                self._transport.query(describe_body(name, expression, dated=True)),
            )
        except QueryRejected as rejected:
            raise _rejected(rejected, expression, "caller_filter") from None
        groups = _grouplists(grouped)
        dates = _root_group(dated).get("fields", {})
        earliest, latest = dates.get("min(created_at)"), dates.get("max(created_at)")
        if not expression.is_empty:  # only the metadata keys the matching documents have
            present = {k for m in METADATA_MAPS.values() for k in groups.get(f"{m}.key", {})}
            types = {k: t for k, t in types.items() if k in present}
        fields = dict(CHUNK_FIELDS)
        fields.update({f"{METADATA_PREFIX}{k}": t for k, t in sorted(types.items())})
        return CollectionStats(
            name=name,
            document_count=_total(grouped),
            chunk_count=_total(chunks),
            sources={k: v for k, v in groups.get("source", {}).items() if k},
            entity_types={k: v for k, v in groups.get("entity_type", {}).items() if k},
            fields=fields,
            earliest_created_at=_moment(earliest) if _total(dated) else None,
            latest_created_at=_moment(latest) if _total(dated) else None,
            embedding_model=spec.embedding_model,
            embedding_dimensions=spec.dimensions,
        )

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]:
        """Up to `limit` whole chunks matching `where` (`_read`: unranked query pages, a visit
        past Vespa's `maxOffset`)."""
        await self._spec(name)
        found = await self._read(name, where, fields=HIT_FIELDS, limit=limit)
        return [chunk_from_hit(f) for f in found]

    async def _dense(
        self, name: str, query: EngineQuery, hits: int, keyword_text: str | None
    ) -> tuple[dict[str, _Scored], Coverage]:
        """The dense request; when its rank-only text has no searchable word (Vespa refuses a
        null item), again without it (every BM25 is then 0 anyway)."""
        vectors = query.vectors
        limit = min(MAX_HITS, hits * len(vectors))
        try:
            return await self._ranked(
                dense_body(name, query.filter, vectors, hits, limit, keyword_text),
                query,
                keyword=keyword_text is not None,
            )
        except _NoSearchableWord:
            return await self._ranked(dense_body(name, query.filter, vectors, hits, limit), query)

    async def _ranked(
        self, body: dict[str, Any], query: EngineQuery, *, keyword: bool = False
    ) -> tuple[dict[str, _Scored], Coverage]:
        """(chunk id → the hit and both sides' scores, best first; coverage) of one request."""
        try:
            root = await self._transport.query(body, query.timeout_s)
        except QueryRejected as rejected:
            if keyword and "null" in rejected.message.lower():
                if body["ranking"] == SEMANTIC_PROFILE:
                    raise _NoSearchableWord from None
                return {}, FULL_COVERAGE  # text without a searchable word: nothing matches
            raise _rejected(rejected, query.filter) from None
        found: dict[str, _Scored] = {}
        for hit in root.get("children", []):
            fields = hit.get("fields", {})
            if "chunk_id" not in fields:
                continue
            features = fields.get("matchfeatures") or {}
            found[fields["chunk_id"]] = _Scored(
                fields["chunk_id"],
                fields,
                tuple(
                    float(features.get(cosine_feature(i), 0.0)) for i in range(MAX_QUERY_VECTORS)
                ),
                # the keyword profile ranks by BM25: its relevance is the score itself
                float(hit["relevance"])
                if body["ranking"] == KEYWORD_PROFILE
                else float(features.get(BM25_FEATURE, 0.0)),
            )
        return found, _coverage(root)

    async def _count(
        self, name: str, query: EngineQuery, keyword_text: str | None
    ) -> tuple[int, Coverage]:
        """Chunks matching the filter (and, for KEYWORD, any word of the text). A filter's count
        is cached for `facts_ttl_s` (every search of an agent run repeats its filter); a count
        under text is not (it changes with every query)."""
        key = (name, json.dumps(count_body(name, query.filter), sort_keys=True))
        now = time.monotonic()
        if keyword_text is None:
            cached = self._counts.get(key)
            if cached is not None and now - cached[0] < self._facts_ttl_s:
                return cached[1], FULL_COVERAGE
        try:
            root = await self._transport.query(
                count_body(name, query.filter, keyword_text), query.timeout_s
            )
        except QueryRejected as rejected:
            if keyword_text is not None and "null" in rejected.message.lower():
                return 0, FULL_COVERAGE
            raise _rejected(rejected, query.filter) from None
        coverage = _coverage(root)
        if keyword_text is None and not coverage.degraded:
            self._counts[key] = (now, _total(root))
            while len(self._counts) > COUNT_CACHE_SIZE:
                self._counts.pop(next(iter(self._counts)))
        return _total(root), coverage

    async def list_documents(
        self, name: str, *, where: FilterExpression | None
    ) -> list[DocumentSummary]:
        await self._spec(name)
        matching = {
            f["document_id"] for f in await self._all_ids(name, where or FilterExpression())
        }
        counts: dict[str, int] = defaultdict(int)
        first: dict[str, Any] = {}
        for batch in _batches(sorted(matching)):
            # chunk_json alone: a summary needs no title or text
            for fields in await self._read(name, _in("document_id", batch), fields=_SUMMARY):
                chunk = chunk_from_hit(fields)
                counts[chunk.document_id] += 1
                if chunk.chunk_index == 0 or chunk.document_id not in first:
                    first[chunk.document_id] = chunk
        return [
            DocumentSummary(
                id=document,
                source=first[document].source,
                chunk_count=count,
                metadata=dict(first[document].metadata),
            )
            for document, count in counts.items()
        ]

    async def list_documents_page(
        self, name: str, *, where: FilterExpression | None, size: int, cursor: str
    ) -> DocumentsPage | None:
        """`DocumentPaging`: a visit of the first chunks (`listing.py`), then one grouping
        request per 200 listed documents for their chunk counts."""
        await self._spec(name)
        selection = first_chunk_selection(name, where)
        if selection is None:
            return None
        at = VisitCursor.decode(cursor) if cursor else VisitCursor()
        firsts: list[Chunk] = []
        following: VisitCursor | None = at
        for _ in range(MAX_ROUNDS):
            room = size - len(firsts)
            wanted = at.wanted or min(room, MAX_WANTED)
            try:
                visited, continuation = await self._transport.visit_page(
                    CHUNK, selection, _SUMMARY, wanted=wanted, continuation=at.continuation
                )
            except ContinuationRefused as refused:
                raise CursorRejected(str(refused)) from None
            ending = ending_digest(continuation)
            # the same request again covers the same buckets when it ends where it did before;
            # else writes moved it: serve the response from its start (repeats, never skips)
            after = at.after if ending == at.ending else ""
            chunks = sorted(
                (c for c in map(chunk_from_hit, visited) if c.document_id > after),
                key=lambda c: c.document_id,
            )
            firsts.extend(chunks[:room])
            if len(chunks) > room:  # the page is full inside this response: stay on it
                following = VisitCursor(at.continuation, wanted, firsts[-1].document_id, ending)
                break
            if not continuation:  # the visit is complete
                following = None
                break
            at = following = VisitCursor(continuation)
            if len(firsts) == size:
                break
        counts = await self._chunk_counts(name, [c.document_id for c in firsts])
        documents = [
            DocumentSummary(
                id=c.document_id,
                source=c.source,
                chunk_count=counts.get(c.document_id, 1),
                metadata=dict(c.metadata),
            )
            for c in firsts
        ]
        return DocumentsPage(documents, following.encode() if following is not None else "")

    async def _chunk_counts(self, name: str, document_ids: Sequence[str]) -> dict[str, int]:
        """Each document's stored chunks: `group(document_id)` over `document_id in (…)`, by
        attribute, 200 ids a request (`en/reference/querying/grouping-language.html`; `max` set,
        since `grouping.defaultMaxGroups` would cut the list)."""
        counts: dict[str, int] = {}
        for batch in _batches(document_ids):
            root = await self._transport.query(chunk_counts_body(name, _in("document_id", batch)))
            counts.update(_grouplists(root).get("document_id", {}))
        return counts

    async def _all_ids(self, name: str, expression: FilterExpression) -> list[dict[str, Any]]:
        """`chunk_id`, `document_id`, `content_hash` of every chunk matching `expression`."""
        return await self._read(name, expression, fields=_ID_FIELDS)

    async def _read(
        self,
        name: str,
        expression: FilterExpression,
        *,
        fields: tuple[str, ...],
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """`fields` of the chunks matching `expression` (at most `limit`).

        Unranked query pages of `MAX_HITS` by offset (fast: the filter uses the attributes).
        A query cannot page past `maxOffset`, so when more match, the chunks are read again
        by visiting with the filter's document selection (`selection.py`: a linear scan of the
        cluster, no offset limit); a filter without one fails with FailedPrecondition naming
        the limit, rather than return a silent subset (a count would claim to be exact)."""
        found: list[dict[str, Any]] = []
        while limit is None or len(found) < limit:
            if len(found) > MAX_OFFSET:
                return await self._visit(name, expression, fields=fields, limit=limit)
            hits = MAX_HITS if limit is None else min(MAX_HITS, limit - len(found))
            body = scan_body(name, expression, hits, len(found), fields=fields)
            try:
                root = await self._transport.query(body)
            except QueryRejected as rejected:
                raise _rejected(rejected, expression) from None
            page = [h["fields"] for h in root.get("children", []) if "fields" in h]
            found.extend(page)
            if len(page) < hits:
                break
        return found

    async def _visit(
        self,
        name: str,
        expression: FilterExpression,
        *,
        fields: tuple[str, ...],
        limit: int | None,
    ) -> list[dict[str, Any]]:
        selection = compile_selection(name, expression)
        if selection is None:
            raise FailedPrecondition(
                f"more than {MAX_OFFSET + MAX_HITS} chunks match and this filter has no "
                "document selection to visit them with; the Vespa engine reads at most "
                f"maxOffset + maxHits = {MAX_OFFSET + MAX_HITS} chunks by query: narrow the filter",
                reason="VESPA_MAX_OFFSET",
                metadata={"collection": name, "max_offset": str(MAX_OFFSET)},
            )
        log.info("more chunks match than a query can page: visiting", extra={"collection": name})
        return await self._transport.visit(CHUNK, selection, fields, limit)

    async def _delete_all_matching(self, name: str, expression: FilterExpression) -> int:
        """Delete what matches: by a document selection Vespa runs itself when the filter has
        one with the same meaning (`selection`), else the ids the YQL filter selects, page by
        page, until nothing matches (acked deletes are visible)."""
        selection = compile_selection(name, expression)
        if selection is not None:
            return await self._transport.delete_where(CHUNK, selection)
        log.info(
            "delete by filter through YQL ids (no equivalent document selection)",
            extra={"collection": name},
        )
        return await self._delete_ids_matching(name, expression)

    async def _delete_ids_matching(self, name: str, expression: FilterExpression) -> int:
        """Query the ids of what matches (attributes), delete each by id, until none is left."""
        deleted = 0
        while True:
            root = await self._transport.query(ids_body(name, expression, MAX_HITS))
            ids = [h["fields"]["chunk_id"] for h in root.get("children", []) if "fields" in h]
            if not ids:
                return deleted
            await self._delete_ids(name, ids)
            deleted += len(ids)

    async def _delete_ids(self, name: str, chunk_ids: Sequence[str]) -> None:
        await _together(
            self._transport.delete(CHUNK, chunk_document_id(name, c)) for c in chunk_ids
        )

    async def _spec(self, name: str) -> Registered:
        return await self._registry.require(name)


def _by_cosine(hits: Iterable[_Scored], index: int, limit: int) -> list[Candidate]:
    """The dense list of query vector `index`: the hits by their cosine to it, best first."""
    ranked = sorted(hits, key=lambda hit: -hit.cosines[index])[:limit]
    return [Candidate(hit.chunk_id, hit.cosines[index]) for hit in ranked]


def _completion(
    dense_lists: list[list[Candidate]],
    keyword_list: list[Candidate],
    scored: Mapping[str, _Scored],
    vectors: int,
    asked: int,
) -> Completion:
    """The best cosine of each keyword-only candidate, from the cosines every keyword hit carries
    (a dense-only candidate's BM25 is the fusion's bound, as in the embedded engine)."""
    missing = keyword_only(dense_lists, keyword_list)
    return Completion(
        dense={c: max(scored[c].cosines[:vectors]) for c in missing},
        all_keyword_matches=all_keyword_matches(keyword_list, asked),
    )


async def _together(calls: Iterable[Awaitable[_T]]) -> list[_T]:
    """Run `calls` at once; when one fails, cancel the others and wait until they have ended
    before raising its error, so nothing of this write is still in flight afterwards."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _nothing() -> None:
    return None


def _in(field: str, values: Sequence[str]) -> FilterExpression:
    condition = Condition(field, FieldType.STRING, Operator.IN, tuple(values))
    return FilterExpression((FilterGroup((condition,)),))


def _batches(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[i : i + _ID_BATCH] for i in range(0, len(values), _ID_BATCH)]


def _rejected(
    rejected: QueryRejected, expression: FilterExpression, field: str = "filter"
) -> Exception:
    """A 400 names the filter (`field`) when Vespa's message names a Vespa field of it."""
    for group in expression.groups:
        for condition in group.conditions:
            if vespa_field(condition.field) in rejected.message:
                return InvalidArgument.for_field(
                    field,
                    f"Vespa rejected the condition on {condition.field}: {rejected.message}",
                )
    return FailedPrecondition(
        f"Vespa rejected the query (is the application package deployed?): {rejected.message}",
        reason="VESPA_REJECTED",
    )


def _coverage(root: Mapping[str, Any]) -> Coverage:
    """`root.coverage` of a query response (`en/reference/querying/default-result-format.html`):
    `coverage` (integer percent, a lower bound below 100), `documents` (active documents
    searched), `full`, and the `degraded` flags. Not full with no flag set: nodes missing."""
    coverage = root.get("coverage")
    if not isinstance(coverage, Mapping):
        return FULL_COVERAGE
    full = bool(coverage.get("full", True))
    degraded = coverage.get("degraded")
    reasons = {
        Degradation(flag)
        for flag in _DEGRADATION_FLAGS
        if isinstance(degraded, Mapping) and degraded.get(flag) is True
    }
    if not full and not reasons:
        reasons.add(Degradation.PARTIAL)
    percent = 100.0 if full else min(float(coverage.get("coverage", 0)), 100.0)
    if not full and percent >= 100.0:  # rounded up by Vespa: still not everything
        percent = 99.99
    return Coverage(percent, int(coverage.get("documents", 0)), frozenset(reasons))


_DEGRADATION_FLAGS = tuple(d.value for d in Degradation if d is not Degradation.PARTIAL)


def _total(root: Mapping[str, Any]) -> int:
    return int(root.get("fields", {}).get("totalCount", 0))


def _root_group(root: Mapping[str, Any]) -> Mapping[str, Any]:
    for child in root.get("children", []):
        if str(child.get("id", "")).startswith("group:root"):
            return dict(child)
    return {}


def _grouplists(root: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """`grouplist:<field>` → group value → `count()`, from a grouping response."""
    lists: dict[str, dict[str, int]] = {}
    for grouplist in _root_group(root).get("children", []):
        label = str(grouplist.get("label") or str(grouplist.get("id", "")).split(":", 1)[-1])
        lists[label] = {
            str(group.get("value", "")): int(group.get("fields", {}).get("count()", 0))
            for group in grouplist.get("children", [])
        }
    return lists


def _moment(micros: Any) -> Any:
    return None if micros is None else from_epoch_microseconds(int(micros))
