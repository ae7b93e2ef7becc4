"""The search tool's settings: YAML section `search_tool`, environment `QUARRY_SEARCH_TOOL_*`."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.common import keyword_form
from services.common.names import collection_name_problem
from services.common.postgres import PostgresSettings
from services.common.settings import QuarrySettings, ServerSettings
from services.search_tool.embedding.config import EmbeddingSettings
from services.search_tool.engine.base import Fusion, FusionMethod
from services.search_tool.engine.lancedb.indexes import IndexPolicy
from services.search_tool.limits import RequestLimits
from services.search_tool.web.config import WebSearchSettings

DEFAULT_PORT = 50051
DEFAULT_MAX_CONCURRENT_CALLS = 128
"""Calls the search tool accepts at once by default (searches then queue in `admission`)."""
DEFAULT_CPU_NICE = 10
"""The search tool is the services' heavy worker (embedding, BM25, vector scans): where the three
share a machine it yields the CPU, so the agent's admission refusals and health answers are not
queued behind it (`python -m bench.load_e2e`, README.md "Measured performance")."""


class SearchToolServerSettings(ServerSettings):
    """`ServerSettings` with this service's port and admission bound as defaults (also when the
    YAML `server` section sets only some keys)."""

    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_concurrent_rpcs: int | None = Field(default=DEFAULT_MAX_CONCURRENT_CALLS, ge=1)
    cpu_nice: int = Field(default=DEFAULT_CPU_NICE, ge=0, le=19)


class ChunkingSettings(BaseModel):
    """How documents are split before embedding."""

    model_config = ConfigDict(extra="forbid")

    chunk_tokens: int = Field(default=200, ge=16, le=256)
    """Word pieces per chunk (MiniLM reads at most 256)."""
    overlap_tokens: int = Field(default=40, ge=0)
    """Word pieces shared by neighbouring chunks (at most half a chunk)."""
    keyword_context_chunks: int = Field(default=1, ge=0, le=8)
    """Neighbouring chunks on each side whose text a chunk's keyword (BM25) index also sees,
    after the chunk's own (0: the chunk alone). Chosen on SciFact train (`bench/context_lab.py`)."""

    @property
    def recipe(self) -> str:
        """Identifies the chunking in content fingerprints."""
        recipe = f"chunks={self.chunk_tokens}/overlap={self.overlap_tokens}"
        if self.keyword_context_chunks:
            recipe += f"/keyword_context={self.keyword_context_chunks}"
        return recipe

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingSettings:
        if self.overlap_tokens > self.chunk_tokens // 2:
            raise ValueError("overlap_tokens must be at most half of chunk_tokens")
        return self


class KeywordSettings(BaseModel):
    """The language of a collection's words, for its keyword (BM25) side."""

    model_config = ConfigDict(extra="forbid")

    language: str = keyword_form.ENGLISH
    """The language words are stemmed in (a Snowball stemmer: `german`, `french`, `spanish` ...),
    so that their inflected forms meet. `english`: the keyword index's own English stemmer alone.
    Chinese, Japanese and Korean are paired whatever it is, and Cyrillic words stemmed as
    Russian unless it is `serbian` (`services/common/keyword_form.py`). A document is indexed in
    the language its collection had when it was written: one written under another is rewritten
    when it is sent again."""
    collection_languages: dict[str, str] = Field(default_factory=dict)
    """Collection name -> its language, where it is not `language`."""

    @field_validator("language")
    @classmethod
    def _known_language(cls, language: str) -> str:
        return _stemmer_language(language)

    @field_validator("collection_languages")
    @classmethod
    def _known_languages(cls, languages: dict[str, str]) -> dict[str, str]:
        for name in languages:
            problem = collection_name_problem(name)
            if problem is not None:  # a key no collection can have would never apply
                raise ValueError(problem)
        return {name: _stemmer_language(language) for name, language in languages.items()}

    def language_of(self, collection: str) -> str:
        """The language `collection`'s words are stemmed in."""
        return self.collection_languages.get(collection, self.language)


def _stemmer_language(language: str) -> str:
    if language.lower() not in keyword_form.LANGUAGES:
        raise ValueError(
            f"{language!r} has no stemmer; one of: {', '.join(sorted(keyword_form.LANGUAGES))}"
        )
    return language.lower()


class FusionSettings(BaseModel):
    """How HYBRID merges the dense and keyword rankings (chosen by `make eval` on SciFact)."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["rrf", "linear", "minmax", "zscore"] = "linear"
    """`linear`: alpha * cosine + (1 - alpha) * BM25 / max BM25; `minmax`, `zscore`: the same blend
    of min-max scaled or standardised sides; `rrf`: reciprocal-rank fusion (`fusion.py`)."""
    rrf_k: int = Field(default=60, ge=1)
    """RRF constant."""
    alpha: float = Field(default=0.7, ge=0.0, le=1.0)
    """Weight of the dense side in linear fusion."""
    candidates: int = Field(default=100, ge=10, le=1000)
    """Candidates each side contributes to a HYBRID fusion (at least offset + limit)."""
    calibrate: bool = False
    """Each collection measures its own alpha on pseudo-queries made from its documents
    (`calibration.py`; embedded engine only); false: `alpha` everywhere. Off by default: it lost
    nDCG@10 to the fixed alpha on CISI (0.017), SciFact and code search (0.049 each), whose
    pseudo-queries, copied from the documents, favour the keyword side (README, "Measured
    performance")."""
    calibration_queries: int = Field(default=200, ge=10, le=2000)
    """Pseudo-queries a calibration measures (about one HYBRID search each, in the background)."""
    calibration_prior_queries: int = Field(default=50, ge=0)
    """How strongly `alpha` holds: the measured alpha weighs n / (n + this) for n pseudo-queries."""

    def to_fusion(self) -> Fusion:
        return Fusion(FusionMethod(self.method), rrf_k=self.rrf_k, alpha=self.alpha)


class VespaSettings(BaseModel):
    """Where the Vespa engine is and how it is used (`engine.kind: vespa`)."""

    model_config = ConfigDict(extra="forbid")

    url: str = "http://localhost:8080"
    """Container endpoint (search and document/v1), e.g. a Vespa Cloud data-plane URL."""
    feed_url: str | None = None
    """The `feed` container cluster's endpoint (document/v1) when feed and query run apart (a
    multi-node or Vespa Cloud package from `gen_vespa_app.py --topology`); null: `url`."""
    cert_path: Path | None = None
    """Client certificate for mTLS (Vespa Cloud, secured Vespa); with `key_path`."""
    key_path: Path | None = None
    """Private key of `cert_path`."""
    ca_path: Path | None = None
    """CA bundle (PEM) to verify Vespa's server certificate with, for a Vespa whose TLS
    certificate is not signed by a public CA (self-managed Vespa with TLS); null: the system's
    CAs (Vespa Cloud)."""
    feed_concurrency: int = Field(default=16, ge=1, le=1024)
    """Document writes in flight at once (HTTP/2 streams on one connection)."""
    feed_retries: int = Field(default=3, ge=1, le=10)
    """Attempts of one document write that Vespa answers 429 or 503."""
    query_timeout_s: float = Field(default=5.0, gt=0)
    """Longest one Vespa query may run (Vespa's `timeout`; the caller's deadline is shorter
    when it has one)."""
    facts_ttl_s: float = Field(default=5.0, ge=0)
    """Longest a collection's registry entry, a filter's count and GetCollection's answer are
    reused before Vespa is asked again: what another replica changed shows here at most this
    much later (0: ask every time)."""

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> VespaSettings:
        if (self.cert_path is None) != (self.key_path is None):
            raise ValueError("cert_path and key_path go together")
        return self


class EngineSettings(BaseModel):
    """Which engine stores the collections."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["embedded", "lancedb", "postgres", "vespa"] = "embedded"
    """`embedded` (also called `lancedb`): LanceDB in this process, under `data_dir` (one
    writer); `postgres`: PostgreSQL with pgvector and pg_trgm (any number of replicas; the DSN
    from the environment or a Secret file, `postgres`); `vespa`: a Vespa deployment at
    `vespa.url` running `services/search_tool/vespa/app`."""
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    """The PostgreSQL engine's database: where the DSN comes from, pool, TLS, timeouts (read only
    when `kind` is `postgres`)."""
    vespa: VespaSettings = Field(default_factory=VespaSettings)
    """The Vespa engine's endpoint and limits (read only when `kind` is `vespa`)."""
    readiness_interval_s: float = Field(default=5.0, gt=0)
    """How often an engine behind a server (Vespa) is asked whether it can answer; the search
    tool's readiness follows the answer."""
    fts_refresh_rows: int = Field(default=20_000, ge=1)
    """Rebuild the BM25 index once this many rows were written since the last build."""
    vector_index_min_rows: int = Field(default=50_000, ge=1)
    """Build an IVF vector index once a collection holds this many chunks."""
    vector_refresh_rows: int = Field(default=20_000, ge=1)
    """Rebuild the vector index once this many rows were written since the last build."""
    vectors_in_memory: int = Field(default=100_000, ge=0)
    """Chunks held in memory over every collection, at most: a collection of at most this many
    chunks is read into memory once it is searched twice at one table version, and its dense
    searches are then exact matrix products instead of LanceDB's scan or IVF probes (100,000
    MiniLM vectors take 150 MB; the rows of repeated filters may take as many again). 0: never."""
    keywords_in_memory: bool = True
    """A collection held in memory (`vectors_in_memory`) also keeps its BM25 index and its stored
    chunks there (~1.7 KB a chunk beside its vector): its searches then read nothing from LanceDB.
    false: only its vectors are held."""
    exact_search_max_rows: int = Field(default=5_000, ge=0)
    """Filters leaving at most this many chunks get an exact (flat) dense search."""
    nprobes: int = Field(default=20, ge=1)
    """IVF partitions probed at least (more when a filter leaves too few hits)."""
    probe_fraction: float = Field(default=0.1, gt=0, le=1)
    """...and at least this share of the partitions (an index has about √rows of them)."""
    max_fragments: int = Field(default=64, ge=2)
    """Compact a collection once its rows are spread over this many data fragments (each
    ingest request adds one; every query pays for each)."""
    keep_versions_s: float = Field(default=3600.0, ge=0)
    """Compaction deletes table versions (and files only they use) older than this."""

    def index_policy(self) -> IndexPolicy:
        return IndexPolicy(
            fts_refresh_rows=self.fts_refresh_rows,
            vector_index_min_rows=self.vector_index_min_rows,
            vector_refresh_rows=self.vector_refresh_rows,
            exact_search_max_rows=self.exact_search_max_rows,
            nprobes=self.nprobes,
            probe_fraction=self.probe_fraction,
            max_fragments=self.max_fragments,
            keep_versions_s=self.keep_versions_s,
            settle_unindexed_factor=self.settle_unindexed_factor,
            settle_fragments=self.settle_fragments,
        )

    settle_after_s: float | None = Field(default=2.0, ge=0)
    """Maintain a collection's indexes in the background once it has had no write for this long
    (fold the rows written since into BM25 and the scalar indexes, compact, rebuild the vector
    index after a compaction), as far as `settle_unindexed_factor` and `settle_fragments` make
    it due; null: never (bulk loaders then call `LanceDBEngine.refresh`, which does all of it)."""
    settle_unindexed_factor: float = Field(default=1.0, ge=0)
    """Once writes pause (`settle_after_s`), rows written since the last index builds are folded
    into BM25 and the scalar indexes once they number this times √rows (316 at 100,000 chunks;
    0: every row at every pause). Until then a search on LanceDB's path scans them, as on the
    write path below its thresholds (a collection held in memory does not read them from
    LanceDB at all)."""
    settle_fragments: int = Field(default=16, ge=2)
    """...and a collection spread over this many data fragments is compacted (in the
    background; `max_fragments` compacts on the write path)."""

    keyword_count_cap: int = Field(default=10_000, ge=1)
    """KEYWORD `total_count` counts matches up to this many."""
    search_timeout_s: float = Field(default=10.0, gt=0)
    """Longest a search may run in the engine (also bounded by the caller's deadline)."""


class WorkQueueSettings(BaseModel):
    """The bounded queue in front of the embedder and the engine (searches, reads, counts and
    Embed calls): beyond `workers + waiting` a call is refused at once with RESOURCE_EXHAUSTED
    naming `work_queue`, instead of queued until its deadline."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(default=4, ge=1)
    """Calls that use the embedder and the engine at once (both use every core by themselves)."""
    waiting: int = Field(default=64, ge=0)
    """Calls that may wait for a worker; the next one is refused."""
    retry_after_s: float = Field(default=0.5, gt=0)
    """The RetryInfo delay of a refused call."""


class SearchToolSettings(QuarrySettings):
    """Everything the search tool reads at start-up."""

    yaml_section: ClassVar[str] = "search_tool"
    model_config = SettingsConfigDict(env_prefix="QUARRY_SEARCH_TOOL_")

    server: SearchToolServerSettings | ServerSettings = Field(
        default_factory=SearchToolServerSettings
    )
    data_dir: Path = Path("./var/search_tool")
    """Where the embedded engine keeps its collections."""
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    """The dense embedder."""
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    """Chunk sizes."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    """The engine."""
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    """Hybrid fusion."""
    keyword: KeywordSettings = Field(default_factory=KeywordSettings)
    """The language of each collection's words (keyword side)."""
    max_document_bytes: int = Field(default=262_144, ge=1)
    """Largest document text accepted, in UTF-8 bytes (a document must also fit
    `limits.upsert_total_word_pieces`, the embedder's work for one call)."""
    max_documents_per_request: int = Field(default=1_000, ge=1)
    """Most documents one UpsertDocuments call may carry."""
    write_batch_documents: int = Field(default=64, ge=1)
    """Documents chunked, embedded and written together; a crash loses at most one batch."""
    max_embed_texts: int = Field(default=256, ge=1)
    """Most texts one Embed call may carry."""
    limits: RequestLimits = Field(default_factory=RequestLimits)
    """How large each part of a request may be (see `limits.py`)."""
    work_queue: WorkQueueSettings = Field(default_factory=WorkQueueSettings)
    """Admission in front of the embedder and the engine."""
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings)
    """Web search providers (`WebSearch`); off unless one is listed."""
