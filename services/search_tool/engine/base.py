"""The engine interface: what the search tool needs from a store, embedded (LanceDB) or Vespa.

Every method is async: the embedded engine keeps its blocking work off the event loop, a remote
engine awaits the network. A search is one `EngineQuery` value, compiled by the engine into its own
language (LanceDB SQL predicates, Vespa YQL) with its own timeout; the engine returns final, fused,
paged hits plus the total and how much of the corpus answered (`coverage`, below 1.0 only when a
remote engine times out on some content nodes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from services.common.keyword_form import ENGLISH, keyword_form
from services.search_tool.documents import Chunk, ChunkRecord, MetadataValue
from services.search_tool.filters import FieldType, FilterExpression


class Strategy(StrEnum):
    """How candidates are retrieved."""

    SEMANTIC = "semantic"
    KEYWORD = "keyword"
    HYBRID = "hybrid"


class FusionMethod(StrEnum):
    """How the dense and keyword candidate lists become one ranking."""

    RRF = "rrf"
    LINEAR = "linear"
    MINMAX = "minmax"
    ZSCORE = "zscore"


@dataclass(frozen=True)
class Fusion:
    """The fusion method and its parameter."""

    method: FusionMethod = FusionMethod.RRF
    """Reciprocal-rank fusion or a blend of normalised scores (`fusion.py` defines each)."""
    rrf_k: int = 60
    """RRF constant: score = sum over lists of 1 / (k + rank)."""
    alpha: float = 0.5
    """Weight of the dense side in a blend; the keyword side gets 1 - alpha."""


@dataclass(frozen=True)
class EngineQuery:
    """One search, as the engine receives it: validated, embedded, ready to compile."""

    strategy: Strategy
    """Which sides run."""
    keyword_text: str
    """Text for BM25 (the primary query)."""
    vectors: npt.NDArray[np.float32]
    """Dense query vectors `(n, d)`: the primary first, then the variations. Empty for KEYWORD."""
    filter: FilterExpression = field(default_factory=FilterExpression)
    """Chunks must match this; evaluated by the engine."""
    limit: int = 10
    """Page size, 1..200."""
    offset: int = 0
    """Hits to skip."""
    fusion: Fusion = field(default_factory=Fusion)
    """How HYBRID (and several dense vectors) are fused."""
    timeout_s: float | None = None
    """Per-query time budget; None means no limit."""
    keyword_language: str = ENGLISH
    """The collection's language, which the keyword text is stemmed in (`keyword_form`)."""

    @cached_property
    def keyword_query(self) -> str:
        """`keyword_text` in the form the keyword index holds text (`keyword_form`: Chinese,
        Japanese and Korean runs as character pairs, Cyrillic words stemmed, words stemmed in
        `keyword_language`; as `ChunkRecord.indexed_text`); any other text as is. What every
        engine's keyword side searches for; made once a query (Vespa reads it up to three
        times: the keyword list, the dense request's and the count)."""
        return keyword_form(self.keyword_text, self.keyword_language)


@dataclass(frozen=True)
class Hit:
    """A chunk with its relevance."""

    chunk: Chunk
    """The matching chunk."""
    score: float
    """The fused score results are ordered by (higher is better)."""
    dense_score: float | None = None
    """Cosine similarity, when the dense side found the chunk (best over the query vectors)."""
    keyword_score: float | None = None
    """BM25 score, when the keyword side found the chunk."""


class Degradation(StrEnum):
    """Why a search covered less than the whole collection (Vespa's `coverage.degraded` flags)."""

    MATCH_PHASE = "match-phase"
    TIMEOUT = "timeout"
    ADAPTIVE_TIMEOUT = "adaptive-timeout"
    ANN_TIMEOUT = "anntimeout"
    NON_IDEAL_STATE = "non-ideal-state"
    PARTIAL = "partial"
    """Not everything answered and no flag says why (nodes down)."""


@dataclass(frozen=True)
class Coverage:
    """How much of the collection a search covered."""

    percent: float = 100.0
    """Share searched, 0..100 (a lower bound below 100)."""
    documents_searched: int = 0
    """Documents the engine searched (Vespa: active documents of the nodes that answered, all
    collections); 0 when the engine does not report it."""
    reasons: frozenset[Degradation] = frozenset()
    """Why it is degraded (empty when full)."""

    @property
    def degraded(self) -> bool:
        return self.percent < 100.0 or bool(self.reasons)

    def merged(self, other: Coverage) -> Coverage:
        """The coverage of a result built from both requests: the least share, every reason,
        the most documents one request searched."""
        return Coverage(
            min(self.percent, other.percent),
            max(self.documents_searched, other.documents_searched),
            self.reasons | other.reasons,
        )


FULL_COVERAGE = Coverage()


@dataclass(frozen=True)
class SearchPage:
    """One page of results."""

    hits: list[Hit]
    """Ordered by score, after offset/limit."""
    total_count: int
    """Chunks matching the filter and the query (an upper bound for HYBRID)."""
    coverage: Coverage = FULL_COVERAGE
    """How much of the collection answered (the embedded engine always searches all of it)."""


@dataclass(frozen=True)
class StoredVersion:
    """What the engine holds for one document: its chunk ids and the content fingerprint."""

    chunk_ids: frozenset[str]
    """Ids of the stored chunks."""
    content_hash: str
    """Fingerprint recorded with the chunks ("" when unknown or mixed)."""


@dataclass(frozen=True)
class DocumentSummary:
    """One stored document as its first chunk describes it (ListDocuments)."""

    id: str
    """Document id."""
    source: str
    """The document's source."""
    chunk_count: int
    """Chunks stored for it."""
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    """The document's metadata."""


@dataclass(frozen=True)
class CollectionStats:
    """What `GetCollection` reports."""

    name: str
    """Collection name."""
    document_count: int
    """Distinct documents."""
    chunk_count: int
    """Chunks (rows)."""
    sources: Mapping[str, int] = field(default_factory=dict)
    """Chunks per source."""
    entity_types: Mapping[str, int] = field(default_factory=dict)
    """Chunks per entity type."""
    fields: Mapping[str, FieldType] = field(default_factory=dict)
    """Filterable fields and their types, metadata keys as `metadata.<key>`."""
    earliest_created_at: datetime | None = None
    """Oldest `created_at`."""
    latest_created_at: datetime | None = None
    """Newest `created_at`."""
    embedding_model: str = ""
    """Model the collection's vectors come from."""
    embedding_dimensions: int = 0
    """Vector size."""
    damage: str = ""
    """Set when the collection's data cannot be read: what is wrong (ListCollections only)."""


@dataclass(frozen=True)
class CollectionSpec:
    """What fixes a collection's shape when it is created."""

    embedding_model: str
    """Model name recorded with the collection."""
    dimensions: int
    """Vector size."""


class SearchEngine(Protocol):
    """A store of chunk records that searches and filters them; unknown collections: NotFound."""

    async def close(self) -> None:
        """Release files and connections."""

    async def list_collections(self) -> list[str]:
        """Names, sorted."""

    async def ensure_collection(self, name: str, spec: CollectionSpec) -> None:
        """Create when missing; an existing one must have the same model and dimensions."""

    async def drop_collection(self, name: str) -> None:
        """Remove a collection and everything in it."""

    async def fields(self, name: str) -> Mapping[str, FieldType]:
        """Filterable fields of a collection (chunk fields plus its metadata keys)."""

    async def upsert(
        self, name: str, records: Sequence[ChunkRecord], *, absent: AbstractSet[str] = frozenset()
    ) -> int:
        """Insert or replace records by chunk id (new metadata keys widen the schema).

        `absent`: chunk ids the caller knows are not stored (it serialises the writes); they are
        appended without looking for a row to replace."""

    async def stored_versions(
        self, name: str, document_ids: Sequence[str]
    ) -> dict[str, StoredVersion]:
        """What is stored for these documents (absent documents are left out)."""

    async def delete_chunks(self, name: str, chunk_ids: Sequence[str]) -> int:
        """Delete chunks by id; returns how many existed."""

    async def delete_matching(
        self, name: str, *, document_ids: Sequence[str], where: FilterExpression | None
    ) -> int:
        """Delete every chunk of these documents and every chunk matching `where`."""

    async def search(self, name: str, query: EngineQuery) -> SearchPage:
        """Run one search."""

    async def describe(
        self, name: str, *, where: FilterExpression | None = None
    ) -> CollectionStats:
        """Counts, fields, date range and embedding of a collection; with `where`, of the chunks
        matching it only: counts, sources, entity types, date range and the metadata keys they
        have (the chunk fields are always listed)."""

    async def list_documents(
        self, name: str, *, where: FilterExpression | None
    ) -> list[DocumentSummary]:
        """Every document with a chunk matching `where` (all when None), in any order."""

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]:
        """Up to `limit` chunks matching `where` (an empty filter matches all), unranked and in
        no particular order."""


@runtime_checkable
class DocumentReplacing(Protocol):
    """An engine that many processes write at once (PostgreSQL): it swaps documents' chunks for
    their new versions atomically, so concurrent rewrites of one document, from any replica,
    leave exactly one version (the in-process write lock of `ingest` cannot see other replicas)."""

    async def replace_documents(self, name: str, records: Sequence[ChunkRecord]) -> tuple[int, int]:
        """Upsert `records` and delete every other chunk of their documents, in one transaction;
        returns (chunks written, chunks deleted)."""


@runtime_checkable
class KnownFields(Protocol):
    """An engine whose `fields` costs a round trip to a server (PostgreSQL) and that remembers
    what it last read. A collection's fields only grow while it lives (a metadata key keeps the
    type it was first given), so the remembered fields are right for every field they name; a
    field they do not name may have been added since, by another replica: then ask `fields`."""

    def known_fields(self, name: str) -> Mapping[str, FieldType] | None:
        """The collection's fields as this process last read or wrote them, without a round
        trip; None when it has not read them yet."""


@runtime_checkable
class ReadinessCheck(Protocol):
    """An engine that depends on a server it can lose (Vespa): the search tool reports SERVING
    only while `unready_reason` returns None, and flips back when it stops doing so."""

    async def unready_reason(self) -> str | None:
        """None when the engine can answer now, else why not (logged with the health flip)."""


@runtime_checkable
class EmbeddingOverlap(Protocol):
    """An engine whose keyword side needs no query vector (the embedded engine): a HYBRID
    search's keyword query starts while the query is still being embedded."""

    async def search_embedding(
        self, name: str, query: EngineQuery, vectors: Awaitable[npt.NDArray[np.float32]]
    ) -> SearchPage:
        """`search` of `query` with its `vectors` replaced by what `vectors` gives (awaited
        inside the search's time budget; its error is the search's error)."""


@dataclass(frozen=True)
class DocumentsPage:
    """One page of a listing an engine pages itself (`DocumentPaging`)."""

    documents: list[DocumentSummary]
    """At most the size asked for; may be fewer, even none, with more to follow."""
    cursor: str
    """Where the next page starts, opaque to the caller; empty when the listing is complete."""


class CursorRejected(Exception):
    """A cursor the engine did not issue, or one its server refused (the service answers
    INVALID_ARGUMENT naming `page_token`)."""


@runtime_checkable
class DocumentPaging(Protocol):
    """An engine that lists documents page by page itself (Vespa: visiting with Vespa's
    continuation), so one page costs about its own size instead of a read of everything the
    filter matches. Pages come in the engine's own stable order, not by id: within one listing
    (the same filter, each page started from the cursor of the one before) a document stored
    for the whole listing is listed exactly once; one written or deleted meanwhile may or may
    not be."""

    async def list_documents_page(
        self, name: str, *, where: FilterExpression | None, size: int, cursor: str
    ) -> DocumentsPage | None:
        """Up to `size` documents with a chunk matching `where`, from `cursor` ("" for the first
        page). None when the engine cannot page this filter itself (the caller then lists with
        `list_documents`); for a given filter the answer is always the same. A cursor it did not
        issue: `CursorRejected`."""
