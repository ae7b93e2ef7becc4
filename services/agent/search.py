"""The search tool as the agent sees it: requests, hits, pages and collection metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from services.agent.filters import CallerFilter, FilterGroup, Scalar

Strategy = Literal["semantic", "keyword", "hybrid"]
WEB_SOURCE = "web"
"""The `source` of every web result (`SearchHit.web` is what marks one)."""


@dataclass(frozen=True)
class Breadcrumb:
    id: str
    name: str
    entity_type: str


@dataclass(frozen=True)
class WebOrigin:
    """Where and when a web result was fetched (`web_search`)."""

    provider: str
    fetched_at: datetime | None = None


@dataclass(frozen=True)
class SearchHit:
    """One chunk a search returned, with its relevance."""

    id: str
    """Chunk id, `{document_id}__chunk_{i}`: what citations name."""
    document_id: str
    title: str
    text: str
    score: float
    """Fused relevance, higher is better."""
    chunk_index: int = 0
    source: str = ""
    entity_type: str = ""
    url: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    breadcrumbs: tuple[Breadcrumb, ...] = ()
    metadata: dict[str, Scalar] = field(default_factory=dict)
    dense_score: float | None = None
    keyword_score: float | None = None
    web: WebOrigin | None = None
    """Set for a web page (`web_search`): not a chunk of the collection, and outside the
    caller's filter. `id` is then `web_<hex>`, `document_id` and `url` the page's URL, `text`
    the provider's snippet, `source` "web"."""


@dataclass(frozen=True)
class SearchRequest:
    """One call of the search tool: the model's plan and the caller's filter, side by side."""

    collection: str
    primary: str
    variations: tuple[str, ...] = ()
    keyword_expansion: str = ""
    """Words for the keyword side only (the model's passage, `agent.loop.expand_queries`)."""
    strategy: Strategy = "hybrid"
    filter_groups: tuple[FilterGroup, ...] = ()
    """The model's filter; the search tool applies it within `caller_filter`."""
    caller_filter: CallerFilter = field(default_factory=CallerFilter)
    """The run's caller filter, forwarded as sent."""
    limit: int = 10
    offset: int = 0


@dataclass(frozen=True)
class ReadRequest:
    """One read of the search tool: a document's chunks from `first_chunk` on."""

    collection: str
    document_id: str
    first_chunk: int = 0
    max_chunks: int = 20
    """1..200."""
    caller_filter: CallerFilter = field(default_factory=CallerFilter)
    """The run's caller filter, forwarded as sent; the search tool applies it."""


@dataclass(frozen=True)
class DocumentChunks:
    """What a read returned."""

    chunks: list[SearchHit]
    """In chunk order; `score` is 0 (a read is not ranked)."""
    chunk_count: int
    """Chunks of the document the caller may see, in all."""


DateInterval = Literal["year", "month", "day"]


@dataclass(frozen=True)
class CountRequest:
    """One count of the search tool: documents matching the model's filter within the caller's."""

    collection: str
    filter_groups: tuple[FilterGroup, ...] = ()
    """The model's filter; the search tool applies it within `caller_filter`."""
    caller_filter: CallerFilter = field(default_factory=CallerFilter)
    group_by: tuple[str, ...] = ()
    date_interval: DateInterval = "month"
    max_buckets: int = 20


@dataclass(frozen=True)
class Breakdown:
    field: str
    buckets: tuple[Facet, ...]
    """Documents per value: most frequent first; dates in date order."""
    omitted: int = 0
    """Values beyond the bucket limit."""


@dataclass(frozen=True)
class DocumentCount:
    document_count: int
    chunk_count: int
    breakdowns: tuple[Breakdown, ...] = ()
    exact: bool = True
    """False when the search tool stopped examining chunks: the counts are lower bounds."""


@dataclass(frozen=True)
class WebPage:
    """What a `WebSearch` returned."""

    hits: list[SearchHit]
    """In the provider's order, each with `web` set."""
    provider: str
    cached: bool = False
    took_ms: float = 0.0


@dataclass(frozen=True)
class SearchPage:
    hits: list[SearchHit]
    """Best first."""
    total_count: int
    took_ms: float = 0.0


@dataclass(frozen=True)
class Facet:
    value: str
    count: int


DEFAULT_KEYWORD_LANGUAGE = "english"
"""The search tool's default keyword language (`search_tool.keyword.language`). Written out here:
the agent does not stem, so it does not import the search tool's stemmers (its image lacks them)."""
KEYWORD_LANGUAGE_LABEL = "keyword language"
"""The `## Collection` line naming the language the collection's keyword side stems words in, in
the first message and the summary input: a model searches in it, and the offline `extractive`
provider compares words in its form (`docs/agent-tool-contract.md`). Written only for a language
other than English, so an English collection's prompts are what they were before it existed
(measured: the line alone turned one of the real-model proof's three greedy answers into an echo
of the question)."""


def keyword_language_line(language: str) -> str:
    """The `keyword language` line for a collection stemmed in `language`; empty for English (or
    none reported)."""
    if not language or language == DEFAULT_KEYWORD_LANGUAGE:
        return ""
    return f"{KEYWORD_LANGUAGE_LABEL}: {language}"


@dataclass(frozen=True)
class CollectionInfo:
    """What the model is told about the collection it searches."""

    name: str
    document_count: int = 0
    chunk_count: int = 0
    sources: tuple[Facet, ...] = ()
    entity_types: tuple[Facet, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    """Filterable fields as (name, type), e.g. ("created_at", "timestamp")."""
    earliest_created_at: datetime | None = None
    latest_created_at: datetime | None = None
    keyword_language: str = ""
    """The language the collection's keyword side stems words in (`search_tool.keyword`), as the
    search tool reports it; empty when unknown."""
