"""An in-memory search tool for the agent's tests and benches, as strict as the real one.

`FakeSearch` is a `SearchClient` over a handful of chunks (word-overlap ranking). Its filters are
decided by the search tool's own code, reached the way the real service reaches it: the agent's
request goes through the agent's converter to protobuf (`search_tool_client.search_request`), then
through the search tool's edge converter and `effective_filter` — the one rule set, never a copy.
Only the in-memory matching of a validated filter is written here, with the engine's semantics (a
missing value satisfies `not_equals` / `not_in` and nothing else); `test_search_conformance.py`
holds the fake and the real service to the same answers.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.agent import search_tool_client
from services.agent.filter_wire import caller_filter_message
from services.agent.filters import CallerFilter
from services.agent.search import (
    Breadcrumb,
    CollectionInfo,
    CountRequest,
    DocumentChunks,
    DocumentCount,
    Facet,
    ReadRequest,
    SearchHit,
    SearchPage,
    SearchRequest,
    WebPage,
)
from services.common.errors import NotFound
from services.search_tool.convert import (
    chunk_to_proto,
    count_request_from_proto,
    count_to_proto,
    filter_from_proto,
    web_search_to_proto,
)
from services.search_tool.counting import count_documents
from services.search_tool.documents import Breadcrumb as SearchToolBreadcrumb
from services.search_tool.documents import Chunk
from services.search_tool.filters import (
    CHUNK_FIELDS,
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    Operator,
    RawFilter,
    Scalar,
    effective_filter,
)
from services.search_tool.limits import DEFAULT_LIMITS
from services.search_tool.reading import ReadRequest as SearchToolReadRequest
from services.search_tool.reading import read_document
from services.search_tool.web.base import WebProviderError, WebResult, utc_now
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from services.search_tool.web.guard import GuardedProvider
from services.search_tool.web.service import WebSearchService

_WORD = re.compile(r"[a-z0-9]+")
_TYPES: dict[type, FieldType] = {
    bool: FieldType.BOOL,
    int: FieldType.INTEGER,
    float: FieldType.DOUBLE,
    str: FieldType.STRING,
}


@dataclass
class FakeDocument:
    """One chunk in the fake collection."""

    id: str
    title: str
    text: str
    source: str = "docs"
    entity_type: str = "page"
    url: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    breadcrumbs: tuple[Breadcrumb, ...] = ()
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)

    @property
    def document_id(self) -> str:
        return self.id.partition("__chunk_")[0]

    @property
    def chunk_index(self) -> int:
        return int(self.id.partition("__chunk_")[2] or 0)


@dataclass(frozen=True)
class FakeWebPage:
    """A page the fake web knows."""

    url: str
    title: str
    snippet: str


class MemoryWebProvider:
    """A `WebProvider` over in-memory pages (word-overlap ranking); `errors` fail the next tries."""

    name = "memory"

    def __init__(
        self, pages: Iterable[FakeWebPage], errors: Iterable[WebProviderError | None] = ()
    ) -> None:
        self.pages = list(pages)
        self.errors: deque[WebProviderError | None] = deque(errors)
        self.tries = 0

    async def search(self, query: str, limit: int, *, timeout_s: float) -> list[WebResult]:
        self.tries += 1
        if self.errors:
            error = self.errors.popleft()
            if error is not None:
                raise error
        words = set(_WORD.findall(query.lower()))
        ranked = sorted(
            self.pages,
            key=lambda p: -len(words & set(_WORD.findall(f"{p.title} {p.snippet}".lower()))),
        )
        now = utc_now()
        return [WebResult(p.title, p.url, p.snippet, self.name, now) for p in ranked[:limit]]

    async def aclose(self) -> None:
        return None


async def _no_wait(seconds: float) -> None:
    return None


def _web_service(provider: MemoryWebProvider | None) -> WebSearchService:
    if provider is None:
        return WebSearchService([], WebSearchSettings())
    settings = WebProviderSettings(kind="searxng", name="memory", base_url="http://memory")
    guarded = GuardedProvider(provider, settings, sleep=_no_wait)
    return WebSearchService([guarded], WebSearchSettings(providers=[settings]))


class FakeSearch:
    """A `SearchClient` over in-memory chunks that records every search."""

    def __init__(
        self,
        documents: Iterable[FakeDocument] = (),
        *,
        collection: str = "docs",
        errors: Iterable[BaseException | None] = (),
        latency_s: float = 0.0,
        gate: asyncio.Event | None = None,
        web_pages: Iterable[FakeWebPage] | None = None,
        web_errors: Iterable[WebProviderError | None] = (),
        keyword_language: str = "english",
    ) -> None:
        """`web_pages`: the pages `web_search` finds (None: web search not configured, as a
        search tool without providers); `web_errors`: provider failures of the next tries;
        `keyword_language`: what the collection reports its keyword side stems words in."""
        self.collection = collection
        self.keyword_language = keyword_language
        self.documents = list(documents)
        self.errors: deque[BaseException | None] = deque(errors)
        self.latency_s = latency_s
        self.gate = gate
        self.requests: list[SearchRequest] = []
        self.reads: list[ReadRequest] = []
        self.counts: list[CountRequest] = []
        self.collections: list[CallerFilter] = []
        """The caller filter of each get_collection call."""
        self.remaining_s: list[float | None] = []
        self.called = asyncio.Event()
        self.cancelled = asyncio.Event()
        self._word_cache: dict[tuple[str, str, str], set[str]] = {}
        self.web_requests: list[tuple[str, int]] = []
        self.web_provider = MemoryWebProvider(web_pages or (), web_errors)
        self.web = _web_service(self.web_provider if web_pages is not None else None)

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        self.requests.append(request)
        self.remaining_s.append(remaining_s)
        self.called.set()
        await self._wait()
        if self.errors:
            error = self.errors.popleft()
            if error is not None:
                raise error
        return self.search_message(search_tool_client.search_request(request))

    async def web_search(self, query: str, limit: int, *, remaining_s: float | None) -> WebPage:
        """The search tool's own `WebSearchService` (validation, retries, cache) over the
        in-memory provider, its answer carried through the wire shape as the real client's;
        `errors` are the search tool's own failures, as for `search`."""
        self.web_requests.append((query, limit))
        self.remaining_s.append(remaining_s)
        self.called.set()
        await self._wait()
        if self.errors:
            error = self.errors.popleft()
            if error is not None:
                raise error
        message = web_search_to_proto(await self.web.search(query, limit, deadline_s=remaining_s))
        return WebPage(
            hits=[search_tool_client.web_hit(r) for r in message.results],
            provider=message.provider,
            cached=message.cached,
            took_ms=message.took_ms,
        )

    def search_message(self, message: search_tool_pb2.SearchRequest) -> SearchPage:
        """A search as the search tool receives it (for fake gRPC servicers too)."""
        expression = self.validate_message(message)
        ranked = self._rank(message.query, expression)
        limit = message.limit or 10
        window = ranked[message.offset : message.offset + limit]
        hits = [_hit(doc, score) for score, doc in window]
        return SearchPage(hits=hits, total_count=len(ranked), took_ms=0.1)

    def validate_message(self, message: search_tool_pb2.SearchRequest) -> FilterExpression:
        """The filter the search tool would run for `message`, or its InvalidArgument/NotFound."""
        self._check_collection(message.collection)
        return effective_filter(
            filter_from_proto(message.caller_filter),
            filter_from_proto(message.filter),
            self.fields(),
        )

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        self.reads.append(request)
        return await self.read_message(search_tool_client.read_request(request))

    async def read_message(self, message: search_tool_pb2.ReadDocumentRequest) -> DocumentChunks:
        """A read as the search tool receives it, decided by the search tool's own `reading`."""
        self._check_collection(message.collection)
        read = await read_document(
            _MemoryEngine(self.documents),
            SearchToolReadRequest(
                collection=message.collection,
                document_id=message.document_id,
                first_chunk=message.first_chunk,
                max_chunks=message.max_chunks,
                caller_filter=filter_from_proto(message.caller_filter),
            ),
            self.fields(),
            DEFAULT_LIMITS,
        )
        hits = [search_tool_client.chunk_hit(chunk_to_proto(c)) for c in read.chunks]
        return DocumentChunks(chunks=hits, chunk_count=read.chunk_count)

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        self.counts.append(request)
        return await self.count_message(search_tool_client.count_request(request))

    async def count_message(self, message: search_tool_pb2.CountDocumentsRequest) -> DocumentCount:
        """A count as the search tool receives it, decided by the search tool's own `counting`."""
        self._check_collection(message.collection)
        count = await count_documents(
            _MemoryEngine(self.documents),
            count_request_from_proto(message),
            self.fields(),
            DEFAULT_LIMITS,
        )
        return search_tool_client.document_count(count_to_proto(count))

    async def get_collection(
        self,
        name: str,
        *,
        caller_filter: CallerFilter | None = None,
        remaining_s: float | None,
    ) -> CollectionInfo:
        """The facts of the documents the caller's filter lets it see (all without one),
        decided by the search tool's own `effective_filter`, as GetCollection decides them."""
        caller = caller_filter or CallerFilter()
        self.collections.append(caller)
        self._check_collection(name)
        expression = effective_filter(
            filter_from_proto(caller_filter_message(caller)), RawFilter(), self.fields()
        )
        seen = [d for d in self.documents if matches(d, expression)]
        fields = self.fields()
        if not expression.is_empty:
            keys = {METADATA_PREFIX + k for d in seen for k in d.metadata}
            fields = {n: t for n, t in fields.items() if n in CHUNK_FIELDS or n in keys}
        dates = [d.created_at for d in seen if d.created_at is not None]
        return CollectionInfo(
            name=name,
            document_count=len({d.document_id for d in seen}),
            chunk_count=len(seen),
            sources=_documents_per(seen, lambda d: d.source),
            entity_types=_documents_per(seen, lambda d: d.entity_type),
            fields=tuple((n, str(t)) for n, t in fields.items()),
            earliest_created_at=min(dates, default=None),
            latest_created_at=max(dates, default=None),
            keyword_language=self.keyword_language,
        )

    def fields(self) -> dict[str, FieldType]:
        """The filterable fields, typed as the search tool types them: every chunk field and each
        metadata key with the type of its first value."""
        found = dict(CHUNK_FIELDS)
        for doc in self.documents:
            for key, value in doc.metadata.items():
                found.setdefault(METADATA_PREFIX + key, _TYPES[type(value)])
        return found

    async def _wait(self) -> None:
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def _check_collection(self, name: str) -> None:
        if name != self.collection:
            raise NotFound(f"collection {name!r} does not exist", metadata={"collection": name})

    def _rank(
        self, query: search_pb2.SearchQuery, expression: FilterExpression
    ) -> list[tuple[float, FakeDocument]]:
        words = set(_WORD.findall(" ".join((query.primary, *query.variations)).lower()))
        scored: list[tuple[float, FakeDocument]] = []
        for doc in self.documents:
            if not matches(doc, expression):
                continue
            overlap = len(words & self._words(doc))
            if overlap:
                scored.append((overlap / max(len(words), 1), doc))
        return sorted(scored, key=lambda pair: (-pair[0], pair[1].id))

    def _words(self, doc: FakeDocument) -> set[str]:
        key = (doc.id, doc.title, doc.text)
        if key not in self._word_cache:
            self._word_cache[key] = set(_WORD.findall(f"{doc.title} {doc.text}".lower()))
        return self._word_cache[key]


class _MemoryEngine:
    """The one engine call a read needs (`scan`), over the fake's chunks."""

    def __init__(self, documents: list[FakeDocument]) -> None:
        self.documents = documents

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]:
        return [_chunk(d) for d in self.documents if matches(d, where)][:limit]


def _chunk(doc: FakeDocument) -> Chunk:
    return Chunk(
        id=doc.id,
        document_id=doc.document_id,
        chunk_index=doc.chunk_index,
        text=doc.text,
        title=doc.title,
        source=doc.source,
        entity_type=doc.entity_type,
        created_at=doc.created_at,
        updated_at=doc.updated_at,
        url=doc.url,
        breadcrumbs=tuple(
            SearchToolBreadcrumb(b.id, b.name, b.entity_type) for b in doc.breadcrumbs
        ),
        metadata=dict(doc.metadata),
    )


def matches(doc: FakeDocument, expression: FilterExpression) -> bool:
    """Whether `doc` satisfies a validated filter (no groups: everything matches)."""
    if expression.is_empty:
        return True
    return any(all(_holds(doc, c) for c in group.conditions) for group in expression.groups)


def _holds(doc: FakeDocument, condition: Condition) -> bool:
    value = condition.value
    values = value if isinstance(value, tuple) else (value,)
    if condition.field == "breadcrumbs":
        return _breadcrumbs_hold(doc.breadcrumbs, condition.operator, values)
    actual = _value_of(doc, condition.field)
    if condition.operator is Operator.NOT_EQUALS:
        return actual is None or actual != value
    if condition.operator is Operator.NOT_IN:
        return actual is None or actual not in values
    if actual is None:
        return False
    if condition.operator is Operator.EQUALS:
        return bool(actual == value)
    if condition.operator is Operator.IN:
        return actual in values
    if condition.operator is Operator.CONTAINS:
        return str(value).lower() in str(actual).lower()
    return _ORDERING[condition.operator](actual, value)


_ORDERING: Mapping[Operator, Callable[[Any, Any], bool]] = {
    Operator.GREATER_THAN: lambda a, b: a > b,
    Operator.GREATER_THAN_OR_EQUAL: lambda a, b: a >= b,
    Operator.LESS_THAN: lambda a, b: a < b,
    Operator.LESS_THAN_OR_EQUAL: lambda a, b: a <= b,
}


def _breadcrumbs_hold(
    crumbs: tuple[Breadcrumb, ...], operator: Operator, values: tuple[Scalar, ...]
) -> bool:
    """Breadcrumbs match by any crumb's id or name, or by substring of the `a > b` name path."""
    if operator is Operator.CONTAINS:
        path = " > ".join(c.name for c in crumbs).lower()
        return str(values[0]).lower() in path
    terms = {c.id for c in crumbs} | {c.name for c in crumbs}
    found = any(v in terms for v in values)
    return not found if operator in (Operator.NOT_EQUALS, Operator.NOT_IN) else found


def _value_of(doc: FakeDocument, name: str) -> Scalar | None:
    if name.startswith(METADATA_PREFIX):
        return doc.metadata.get(name.removeprefix(METADATA_PREFIX))
    value: Scalar | None = getattr(doc, name)
    return value


def _hit(doc: FakeDocument, score: float) -> SearchHit:
    return SearchHit(
        id=doc.id,
        document_id=doc.document_id,
        chunk_index=doc.chunk_index,
        title=doc.title,
        text=doc.text,
        score=score,
        source=doc.source,
        entity_type=doc.entity_type,
        url=doc.url,
        created_at=doc.created_at,
        updated_at=doc.updated_at,
        breadcrumbs=doc.breadcrumbs,
        metadata=dict(doc.metadata),
    )


def _documents_per(
    documents: Iterable[FakeDocument], value_of: Callable[[FakeDocument], str]
) -> tuple[Facet, ...]:
    """Distinct documents per non-empty value, as GetCollection counts them."""
    ids: dict[str, set[str]] = {}
    for doc in documents:
        if value_of(doc):
            ids.setdefault(value_of(doc), set()).add(doc.document_id)
    return tuple(Facet(v, len(d)) for v, d in sorted(ids.items()))
