"""The search tool's domain facade: collections, ingest, delete, search, describe, embed.

The servicer calls only this; it never touches the engine or the embedder itself. Every request is
validated here before anything is read or written, with InvalidArgument naming the bad field.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
from opentelemetry import trace

from services.common.admission import WorkQueue
from services.common.errors import DataLoss, FieldViolation, InvalidArgument, NotFound
from services.common.names import collection_name_problem
from services.search_tool.calibration import can_calibrate
from services.search_tool.calibrations import DIRECTORY as CALIBRATION_DIRECTORY
from services.search_tool.calibrations import FusionCalibrations
from services.search_tool.chunking import Chunker
from services.search_tool.config import SearchToolSettings
from services.search_tool.counting import CountRequest, DocumentCount, count_documents
from services.search_tool.documents import Document, document_id_problem
from services.search_tool.embedding import Embedder
from services.search_tool.embedding.query_vectors import QueryVectors
from services.search_tool.engine.base import (
    CollectionStats,
    CursorRejected,
    DocumentPaging,
    DocumentSummary,
    EmbeddingOverlap,
    EngineQuery,
    Fusion,
    KnownFields,
    SearchEngine,
    SearchPage,
    Strategy,
)
from services.search_tool.faults import StorageFaults
from services.search_tool.filters import (
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
    RawFilter,
    combine_filters,
    effective_filter,
    validate_filters,
)
from services.search_tool.fusion import read_by_the_embedder
from services.search_tool.ingest import IngestLimits, Ingestor, IngestResult
from services.search_tool.limits import RequestLimits
from services.search_tool.reading import DocumentRead, ReadRequest, read_document

MAX_VARIATIONS = 9
MAX_LIMIT = 200
MAX_OFFSET = 1_000
"""Deepest page served (Vespa's default `maxOffset` too, so both engines agree)."""
DEFAULT_LIMIT = 10
BUILDING_LEASE_S = 600.0
"""How long a collection reports `building` after the last request that said more will follow."""
DEFAULT_PAGE_SIZE = 1000
MAX_PAGE_SIZE = 10_000


@dataclass(frozen=True)
class DocumentPage:
    """One page of ListDocuments."""

    documents: list[DocumentSummary]
    """Ordered by id, or in the engine's own order when it pages the listing (`DocumentPaging`)."""
    next_page_token: str
    """Where the next page starts (`page_token_after` of this page's last id, or the engine's
    cursor), tied to the listing's collection and filters, when more follow; else empty."""


@dataclass(frozen=True)
class SearchRequest:
    """One search as the caller asked for it, before validation."""

    collection: str
    """Collection to search."""
    primary: str
    """Feeds both keyword and dense retrieval."""
    variations: tuple[str, ...] = ()
    """Extra dense queries, at most 9."""
    keyword_expansion: str = ""
    """Words for the keyword side only, searched after `primary`'s (a model's passage)."""
    strategy: Strategy = Strategy.HYBRID
    """Which sides run."""
    filter: RawFilter = field(default_factory=RawFilter)
    """The filter that narrows this search (e.g. the model's), as sent."""
    caller_filter: RawFilter = field(default_factory=RawFilter)
    """The filter of whoever the search is made for, as sent; `filter` can only narrow it."""
    limit: int = 0
    """1..200; 0 means 10."""
    offset: int = 0
    """Hits to skip."""
    deadline_s: float | None = None
    """Time the caller still allows, if it set a deadline."""
    validate_only: bool = False
    """Check everything, search nothing."""


@dataclass(frozen=True)
class SearchOutcome:
    """A page of results and how long the search took."""

    page: SearchPage
    """Hits, total, coverage."""
    took_ms: float
    """Wall time inside the search tool, embedding included."""


@dataclass(frozen=True)
class Embeddings:
    """Vectors and the model that made them."""

    vectors: npt.NDArray[np.float32]
    """`(n, dimensions)`, L2-normalised."""
    model: str
    """Model name."""
    dimensions: int
    """Vector size."""


class SearchService:
    """Everything the SearchToolService RPCs do, without protobuf."""

    def __init__(
        self, engine: SearchEngine, embedder: Embedder, settings: SearchToolSettings
    ) -> None:
        self._engine = engine
        self._embedder = embedder
        self._settings = settings
        self.query_vectors = QueryVectors(embedder, settings.embedding.query_cache_entries)
        """Vectors of the query texts searched lately (`embedding/query_vectors.py`)."""
        chunker = Chunker(
            embedder.tokenizer,
            chunk_tokens=settings.chunking.chunk_tokens,
            overlap_tokens=settings.chunking.overlap_tokens,
            context_chunks=settings.chunking.keyword_context_chunks,
        )
        limits = IngestLimits(
            max_document_bytes=settings.max_document_bytes,
            max_documents=settings.max_documents_per_request,
            batch_documents=settings.write_batch_documents,
            chunking_recipe=settings.chunking.recipe,
            sizes=settings.limits,
            model_max_tokens=settings.embedding.max_tokens,
        )
        self._ingestor = Ingestor(
            engine, embedder, chunker, limits, language_of=settings.keyword.language_of
        )
        queue = settings.work_queue
        self._queue = WorkQueue(
            "the search tool's work queue",
            workers=queue.workers,
            waiting=queue.waiting,
            retry_after_s=queue.retry_after_s,
            setting="search_tool.work_queue.workers + waiting",
        )
        self._building: dict[str, float] = {}
        embedded = settings.engine.kind in ("embedded", "lancedb")
        self.faults = StorageFaults(settings.data_dir if embedded else None)
        """Storage faults of an operation on a collection, named (see `faults`)."""
        self.calibrations: FusionCalibrations | None = None
        """Each collection's own HYBRID weights (`calibrations`); None: the configured fusion
        everywhere (calibration off, or an engine without both sides' scores)."""
        if settings.fusion.calibrate and can_calibrate(engine):
            self.calibrations = FusionCalibrations(
                engine,  # type: ignore[arg-type]  # can_calibrate checked scored_candidates
                embedder,
                settings.fusion,
                settings.data_dir / CALIBRATION_DIRECTORY if embedded else None,
                building=self.is_building,
                language_of=settings.keyword.language_of,
            )

    @property
    def engine(self) -> SearchEngine:
        return self._engine

    def keyword_language(self, collection: str) -> str:
        """The language `collection`'s words are stemmed in (`search_tool.keyword`)."""
        return self._settings.keyword.language_of(collection)

    async def close(self) -> None:
        if self.calibrations is not None:
            await self.calibrations.close()
        await self._engine.close()

    async def upsert_documents(
        self, collection: str, documents: Sequence[Document], *, building: bool = False
    ) -> IngestResult:
        """`building`: more requests of the same build follow (see `is_building`)."""
        validate_collection_name(collection)
        if building:
            self._building[collection] = time.monotonic() + BUILDING_LEASE_S
        result = await self._ingestor.upsert(collection, documents)
        if not building:
            self._building.pop(collection, None)
        return result

    def is_building(self, collection: str) -> bool:
        """A client said more documents follow, and its last such request is under 10 min old."""
        expires = self._building.get(collection)
        if expires is None:
            return False
        if time.monotonic() >= expires:
            del self._building[collection]
            return False
        return True

    async def list_documents(
        self,
        collection: str,
        raw_filter: RawFilter,
        *,
        caller_filter: RawFilter | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> DocumentPage:
        """Documents after the position `page_token` names (a token this service issued for this
        collection and filter; anything else is INVALID_ARGUMENT naming `page_token`).

        Ordered by id, unless the engine pages the listing itself (`DocumentPaging`, Vespa):
        then in the engine's stable order, each page costing about its own size."""
        validate_collection_name(collection)
        caller = caller_filter or RawFilter()
        tie = _filter_tie(collection, caller, raw_filter)
        position = _page_position(page_token, tie, self._settings.limits) if page_token else None
        size = page_size or DEFAULT_PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise InvalidArgument.for_field(
                "page_size", f"must be between 1 and {MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE})"
            )
        fields = await self._engine.fields(collection)
        where = effective_filter(caller, raw_filter, fields, limits=self._settings.limits)
        narrowed = None if where.is_empty else where
        if isinstance(self._engine, DocumentPaging) and not isinstance(position, _AfterId):
            try:
                paged = await self._engine.list_documents_page(
                    collection, where=narrowed, size=size, cursor=position or ""
                )
            except CursorRejected as rejected:
                raise InvalidArgument.for_field("page_token", str(rejected)) from None
            if paged is not None:
                token = _page_token({"cursor": paged.cursor, "f": tie}) if paged.cursor else ""
                return DocumentPage(paged.documents, token)
            if position is not None:  # a cursor for a filter the engine does not page
                raise InvalidArgument.for_field("page_token", _FOREIGN_TOKEN)
        elif isinstance(position, str):  # an engine cursor, and this engine pages nothing
            raise InvalidArgument.for_field("page_token", _FOREIGN_TOKEN)
        after_id = position.id if isinstance(position, _AfterId) else ""
        summaries = await self._engine.list_documents(collection, where=narrowed)
        after = sorted((s for s in summaries if s.id > after_id), key=lambda s: s.id)
        page = after[:size]
        more = len(after) > size
        return DocumentPage(page, page_token_after(page[-1].id, tie) if more else "")

    async def delete_documents(
        self,
        collection: str,
        document_ids: Sequence[str],
        raw_filter: RawFilter,
        caller_filter: RawFilter | None = None,
    ) -> int:
        """Delete `document_ids` and the chunks matching `raw_filter`; with a caller filter, only
        what also matches it: `(document_ids OR filter) AND caller_filter`."""
        validate_collection_name(collection)
        if not document_ids and not raw_filter.groups:
            raise InvalidArgument(
                "name document_ids or a filter (or both)",
                violations=[
                    FieldViolation("document_ids", "document_ids and filter are both empty"),
                    FieldViolation("filter", "document_ids and filter are both empty"),
                ],
            )
        _validate_document_ids(document_ids, self._settings.limits)
        fields = await self._engine.fields(collection)
        limits = self._settings.limits
        caller, narrowing = validate_filters(
            caller_filter or RawFilter(), raw_filter, fields, limits=limits
        )
        if caller.is_empty:
            return await self._engine.delete_matching(
                collection,
                document_ids=list(document_ids),
                where=None if narrowing.is_empty else narrowing,
            )
        targets = narrowing.groups
        if document_ids:
            by_id = Condition("document_id", FieldType.STRING, Operator.IN, tuple(document_ids))
            targets = (FilterGroup((by_id,)), *targets)
        where = combine_filters(caller, FilterExpression(targets), max_groups=limits.filter_groups)
        return await self._engine.delete_matching(collection, document_ids=[], where=where)

    async def search(self, request: SearchRequest) -> SearchOutcome:
        started = time.perf_counter()
        limit = _validate_search(request, self._settings.limits)
        if request.validate_only:
            await self._filter(request)
            empty = SearchPage(hits=[], total_count=0)
            return SearchOutcome(empty, (time.perf_counter() - started) * 1000)
        async with self._queue.slot():
            return await self._search(request, limit, started)

    async def _search(self, request: SearchRequest, limit: int, started: float) -> SearchOutcome:
        expression = await self._filter(request, known=True)
        timeout = self._settings.engine.search_timeout_s
        if request.deadline_s is not None:
            timeout = min(timeout, max(request.deadline_s, 0.001))
        query = EngineQuery(
            strategy=request.strategy,
            keyword_text=keyword_text(request),
            vectors=np.zeros((0, self._embedder.dimensions), dtype=np.float32),
            filter=expression,
            limit=limit,
            offset=request.offset,
            fusion=self._fusion_for(request),
            timeout_s=timeout,
            keyword_language=self.keyword_language(request.collection),
        )
        if request.strategy is Strategy.HYBRID and isinstance(self._engine, EmbeddingOverlap):
            vectors = self._query_vectors(request)  # embedded while the keyword side runs
            page = await self._engine.search_embedding(request.collection, query, vectors)
        else:
            query = replace(query, vectors=await self._query_vectors(request))
            page = await self._engine.search(request.collection, query)
        return SearchOutcome(page, (time.perf_counter() - started) * 1000)

    async def read_document(self, request: ReadRequest) -> DocumentRead:
        """A document's chunks by index range, inside the caller's filter (see `reading`)."""
        validate_collection_name(request.collection)
        async with self._queue.slot():
            fields = await self._engine.fields(request.collection)
            return await read_document(self._engine, request, fields, self._settings.limits)

    async def count_documents(self, request: CountRequest) -> DocumentCount:
        """Documents matching a filter under the caller's, with breakdowns (see `counting`)."""
        validate_collection_name(request.collection)
        async with self._queue.slot():
            fields = await self._engine.fields(request.collection)
            return await count_documents(self._engine, request, fields, self._settings.limits)

    async def get_collection(
        self, collection: str, caller_filter: RawFilter | None = None
    ) -> CollectionStats:
        """What the collection holds; with a caller filter, only what that filter lets its holder
        see (facts from outside it never leave the search tool)."""
        validate_collection_name(collection)
        if caller_filter is None or not caller_filter.groups:
            return await self._engine.describe(collection)
        fields = await self._engine.fields(collection)
        where = effective_filter(caller_filter, RawFilter(), fields, limits=self._settings.limits)
        return await self._engine.describe(collection, where=where)

    async def list_collections(self) -> list[CollectionStats]:
        """Every collection; a damaged one is listed with `damage` set (its counts 0) instead of
        failing the list for everyone."""
        listed = []
        for name in await self._engine.list_collections():
            try:
                with self.faults.on(name):
                    listed.append(await self._engine.describe(name))
            except DataLoss as damaged:
                listed.append(CollectionStats(name, 0, 0, damage=damaged.message))
            except NotFound:
                continue  # dropped since it was listed
        return listed

    async def delete_collection(self, collection: str) -> None:
        validate_collection_name(collection)
        await self._engine.drop_collection(collection)
        if self.calibrations is not None:
            self.calibrations.forget(collection)

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        if not texts:
            raise InvalidArgument.for_field("texts", "at least one text is required")
        most = self._settings.max_embed_texts
        if len(texts) > most:
            raise InvalidArgument.for_field("texts", f"at most {most} texts per call")
        longest = self._settings.limits.embed_text_chars
        for i, text in enumerate(texts):
            if not text.strip():
                raise InvalidArgument.for_field(f"texts[{i}]", "must not be empty")
            if len(text) > longest:
                raise InvalidArgument.for_field(
                    f"texts[{i}]", f"{len(text)} characters; the limit is {longest}"
                )
        total, budget = sum(len(t) for t in texts), self._settings.limits.embed_total_chars
        if total > budget:
            raise InvalidArgument.for_field(
                "texts",
                f"{total} characters in all; search_tool.limits.embed_total_chars is {budget} "
                "(split the texts over several calls)",
            )
        pieces = self._word_pieces(texts)
        most_pieces = self._settings.limits.embed_total_word_pieces
        if pieces > most_pieces:
            raise InvalidArgument.for_field(
                "texts",
                f"{pieces} word pieces for the model to read; "
                f"search_tool.limits.embed_total_word_pieces is {most_pieces} "
                "(split the texts over several calls)",
            )
        async with self._queue.slot():
            vectors = await self._embedder.embed(list(texts))
        return Embeddings(vectors, self._embedder.model_name, self._embedder.dimensions)

    def _word_pieces(self, texts: Sequence[str]) -> int:
        """What the model reads for `texts`: each text's word pieces and its two markers, at
        most `embedding.max_tokens` (the model truncates there). Counting a call's at most
        `embed_total_chars` characters takes well under a millisecond per thousand."""
        most = self._settings.embedding.max_tokens
        tokenizer = self._embedder.tokenizer
        return sum(min(len(tokenizer.spans(text)) + 2, most) for text in texts)

    async def _filter(self, request: SearchRequest, *, known: bool = False) -> FilterExpression:
        """The request's filters validated against the collection's fields; with `known`, the
        fields the engine remembers when they name every field the filters use (`KnownFields`:
        a search then waits for the database once less)."""
        fields = None
        if known and isinstance(self._engine, KnownFields):
            fields = self._engine.known_fields(request.collection)
            named = (
                c.field
                for f in (request.caller_filter, request.filter)
                for g in f.groups
                for c in g
            )
            if fields is not None and not all(name in fields for name in named):
                fields = None  # maybe added by another replica since
        if fields is None:
            fields = await self._engine.fields(request.collection)
        return effective_filter(
            request.caller_filter, request.filter, fields, limits=self._settings.limits
        )

    def _fusion_for(self, request: SearchRequest) -> Fusion:
        """HYBRID: the collection's calibrated fusion when it has one, else the configured; its
        dense weight as much as the embedder reads of the query (`fusion.read_by_the_embedder`)."""
        if request.strategy is not Strategy.HYBRID:
            return self._settings.fusion.to_fusion()
        if self.calibrations is not None:
            fusion = self.calibrations.fusion_for(request.collection)
        else:
            fusion = self._settings.fusion.to_fusion()
        return read_by_the_embedder(fusion, request.primary, self._embedder.scripts)

    async def _query_vectors(self, request: SearchRequest) -> npt.NDArray[np.float32]:
        if request.strategy is Strategy.KEYWORD:
            return np.zeros((0, self._embedder.dimensions), dtype=np.float32)
        vectors, kept = await self.query_vectors.embed([request.primary, *request.variations])
        trace.get_current_span().set_attribute("quarry.search.query_vectors_kept", kept)
        return vectors


def validate_collection_name(name: str) -> None:
    """The one collection-name rule (`services.common.names`), naming `collection`."""
    problem = collection_name_problem(name)
    if problem is not None:
        raise InvalidArgument.for_field("collection", problem)


_FOREIGN_TOKEN = "is not a token this service issued (pass next_page_token as is)"


@dataclass(frozen=True)
class _AfterId:
    """A page token of a listing ordered by id: the next page starts after this id."""

    id: str


def _filter_tie(collection: str, caller: RawFilter, model: RawFilter) -> str:
    """What a page token is tied to: the collection and both filters as the request gave them
    (a token carried to another filter would list the wrong documents silently)."""
    wording = repr((collection, caller, model)).encode()
    return hashlib.sha256(wording).hexdigest()[:16]


def _page_token(payload: dict[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload, ensure_ascii=False).encode()).decode()


def page_token_after(document_id: str, tie: str = "") -> str:
    """The opaque `ListDocuments` page token of the page after `document_id` (tied to the
    listing's filter, `_filter_tie`, when given)."""
    return _page_token({"after": document_id, "f": tie} if tie else {"after": document_id})


def _page_position(token: str, tie: str, limits: RequestLimits) -> _AfterId | str:
    """What a page token names: the id the next page starts after, or the engine's cursor.
    INVALID_ARGUMENT naming `page_token` for any token this service did not issue, or issued
    for another collection or filter (a garbage token used to return the first page)."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()).decode())
    except (ValueError, UnicodeError, binascii.Error):
        decoded = None
    if not isinstance(decoded, dict):
        raise InvalidArgument.for_field("page_token", _FOREIGN_TOKEN)
    if decoded.get("f", tie) != tie:
        raise InvalidArgument.for_field(
            "page_token",
            "was issued for another collection or filter (a listing keeps the filter it began "
            "with; start again without a token to list another)",
        )
    document_id, cursor = decoded.get("after"), decoded.get("cursor")
    if isinstance(cursor, str) and cursor and "f" in decoded and document_id is None:
        return cursor
    if not isinstance(document_id, str) or document_id_problem(
        document_id, limits.document_id_bytes
    ):
        raise InvalidArgument.for_field("page_token", _FOREIGN_TOKEN)
    return _AfterId(document_id)


def _validate_document_ids(document_ids: Sequence[str], limits: RequestLimits) -> None:
    """Ids to delete follow the rule ids to ingest follow; every bad one is named."""
    violations = [
        FieldViolation(f"document_ids[{i}]", problem)
        for i, document_id in enumerate(document_ids)
        if (problem := document_id_problem(document_id, limits.document_id_bytes)) is not None
    ]
    if violations:
        raise InvalidArgument.for_violations(violations, shown=10)


def _validate_search(request: SearchRequest, limits: RequestLimits) -> int:
    """The effective limit; raises InvalidArgument listing every bad field."""
    violations: list[FieldViolation] = []
    if (problem := collection_name_problem(request.collection)) is not None:
        violations.append(FieldViolation("collection", problem))
    if not request.primary.strip():
        violations.append(FieldViolation("query.primary", "must not be empty"))
    violations.extend(_query_length("query.primary", request.primary, limits))
    if len(request.variations) > MAX_VARIATIONS:
        violations.append(
            FieldViolation("query.variations", f"at most {MAX_VARIATIONS} variations")
        )
    for i, variation in enumerate(request.variations[:MAX_VARIATIONS]):
        if not variation.strip():
            violations.append(FieldViolation(f"query.variations[{i}]", "must not be empty"))
        violations.extend(_query_length(f"query.variations[{i}]", variation, limits))
    violations.extend(_query_length("query.keyword_expansion", request.keyword_expansion, limits))
    limit = request.limit or DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        violations.append(
            FieldViolation("limit", f"must be between 1 and {MAX_LIMIT} (0 means 10)")
        )
    if not 0 <= request.offset <= MAX_OFFSET:
        violations.append(
            FieldViolation(
                "offset", f"must be between 0 and {MAX_OFFSET}; refine the query instead"
            )
        )
    if violations:
        raise InvalidArgument.for_violations(violations)
    return limit


KEYWORD_EXPANSION_WEIGHT = 0.25
"""What a word of `keyword_expansion` weighs in BM25 against a word of the primary query. A model's
passage in the keyword query at the primary's own weight lost on prose collections (its generic
words outweighed the query's); at a quarter it kept what its names gain on API documentation and
lost nowhere beyond noise (docs/first-search.md, session 22)."""


def keyword_text(request: SearchRequest) -> str:
    """What the keyword side searches: the primary query, then the keyword expansion's words at
    `KEYWORD_EXPANSION_WEIGHT` of the primary's. Every engine's BM25 counts a repeated query word
    again (`bm25.query_terms`, as Lance does), and every fusion scales BM25 by its own candidates,
    so the primary sent 1 / weight times with the expansion once is that weighting."""
    expansion = " ".join(request.keyword_expansion.split())
    if not expansion:
        return request.primary
    repeats = round(1 / KEYWORD_EXPANSION_WEIGHT)
    return " ".join([request.primary] * repeats + [expansion])


def _query_length(path: str, text: str, limits: RequestLimits) -> list[FieldViolation]:
    if len(text) <= limits.query_chars:
        return []
    return [FieldViolation(path, f"{len(text)} characters; the limit is {limits.query_chars}")]
