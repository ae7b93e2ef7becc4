"""Public test doubles for the loop's ports: a scripted model and an in-memory search tool.

`ScriptedModel` replays a queue of scripted turns (text, tool calls, or an exception such as
`ContextWindowExceeded`) and records every request it received. `FakeSearch` ranks in-memory
documents by word overlap and records every search. Both can be gated on an `asyncio.Event` so a
test can hold a call open, and both can be given a latency for benchmarks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.agent.filters import FilterCondition, FilterGroup
from services.agent.messages import Role, ToolCall
from services.agent.ports import (
    ModelRequest,
    ModelResponse,
    StructuredRequest,
    StructuredResponse,
    TokenUsage,
)
from services.agent.search import (
    CollectionInfo,
    Facet,
    SearchHit,
    SearchPage,
    SearchRequest,
)
from services.common.errors import NotFound

_ids = itertools.count(1)
_WORD = re.compile(r"[a-z0-9]+")


def search_call(
    primary: str,
    *,
    variations: Sequence[str] = (),
    filter_groups: Sequence[dict[str, Any]] = (),
    strategy: str = "hybrid",
    limit: int = 10,
    call_id: str = "",
) -> ToolCall:
    """A `search` tool call with well-formed arguments."""
    arguments = {
        "query": {"primary": primary, "variations": list(variations)},
        "filter_groups": list(filter_groups),
        "limit": limit,
        "offset": 0,
        "retrieval_strategy": strategy,
    }
    return ToolCall(call_id or f"call_{next(_ids)}", "search", json.dumps(arguments))


def answer_call(text: str, citations: Sequence[str] = (), *, call_id: str = "") -> ToolCall:
    """A `submit_answer` tool call citing `citations` (result ids)."""
    arguments = {"text": text, "citations": [{"result_id": c} for c in citations]}
    return ToolCall(call_id or f"call_{next(_ids)}", "submit_answer", json.dumps(arguments))


def raw_call(name: str, arguments_json: str, *, call_id: str = "") -> ToolCall:
    """A tool call with arbitrary (possibly invalid) arguments."""
    return ToolCall(call_id or f"call_{next(_ids)}", name, arguments_json)


def turn(
    text: str = "", *calls: ToolCall, input_tokens: int = 100, output_tokens: int = 20
) -> ModelResponse:
    """One scripted model turn."""
    usage = TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    return ModelResponse(text=text, tool_calls=tuple(calls), usage=usage, provider="scripted")


Scripted = ModelResponse | BaseException


class ScriptExhausted(AssertionError):
    """The model was called more often than the script has turns."""


class ScriptedModel:
    """A `ModelClient` that replays scripted turns and records what it was asked."""

    def __init__(
        self,
        turns: Iterable[Scripted] = (),
        *,
        summaries: Iterable[str | BaseException] = (),
        context_window_tokens: int | None = 32_000,
        latency_s: float = 0.0,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.turns: deque[Scripted] = deque(turns)
        self.summaries: deque[str | BaseException] = deque(summaries)
        self.context_window_tokens = context_window_tokens
        self.latency_s = latency_s
        self.gate = gate
        self.requests: list[ModelRequest] = []
        self.structured_requests: list[StructuredRequest] = []
        self.remaining_s: list[float | None] = []
        self.called = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.requests.append(request)
        self.remaining_s.append(remaining_s)
        await self._wait()
        if not self.turns:
            raise ScriptExhausted(f"no scripted turn left for call {len(self.requests)}")
        scripted = self.turns.popleft()
        if isinstance(scripted, BaseException):
            raise scripted
        return scripted

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        self.structured_requests.append(request)
        await self._wait()
        if not self.summaries:
            raise ScriptExhausted("no scripted structured output left")
        scripted = self.summaries.popleft()
        if isinstance(scripted, BaseException):
            raise scripted
        return StructuredResponse(json_text=scripted, usage=TokenUsage(50, 30))

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        return self.context_window_tokens

    async def _wait(self) -> None:
        self.called.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class FunctionModel:
    """A `ModelClient` whose every turn is computed by a function of the request (a rule-based
    model): one instance serves any number of concurrent runs."""

    def __init__(
        self,
        respond: Callable[[ModelRequest], ModelResponse],
        *,
        context_window_tokens: int | None = 32_000,
        latency_s: float = 0.0,
    ) -> None:
        self.respond = respond
        self.context_window_tokens = context_window_tokens
        self.latency_s = latency_s
        self.calls = 0

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.calls += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self.respond(request)

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        raise NotImplementedError("FunctionModel does not summarise")

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        return self.context_window_tokens


_RESULT_ID = re.compile(r"^### \[([^\]]+)\]", re.MULTILINE)


def search_then_answer(searches: int = 1) -> Callable[[ModelRequest], ModelResponse]:
    """A rule: search `searches` times (the question as the query), then answer citing the first
    result of the last search."""

    def respond(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        query = request.messages[1].text.split("\n", 2)[1] if len(request.messages) > 1 else "q"
        offered = {t.name for t in request.tools}
        if len(results) < searches and "search" in offered:
            return turn(f"Searching ({len(results) + 1}).", search_call(query))
        cited = _RESULT_ID.findall(results[-1].text)[:1] if results else []
        return turn("Answering.", answer_call("The answer [1].", cited))

    return respond


@dataclass
class FakeDocument:
    """One chunk in the fake collection."""

    id: str
    title: str
    text: str
    source: str = "docs"
    entity_type: str = "page"
    url: str = ""
    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)


class FakeSearch:
    """A `SearchClient` over in-memory chunks: word-overlap ranking, equality filters."""

    def __init__(
        self,
        documents: Iterable[FakeDocument] = (),
        *,
        collection: str = "docs",
        errors: Iterable[BaseException | None] = (),
        latency_s: float = 0.0,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.collection = collection
        self.documents = list(documents)
        self.errors: deque[BaseException | None] = deque(errors)
        self.latency_s = latency_s
        self.gate = gate
        self.requests: list[SearchRequest] = []
        self.remaining_s: list[float | None] = []
        self.called = asyncio.Event()
        self.cancelled = asyncio.Event()
        self._word_cache: dict[tuple[str, str, str], set[str]] = {}

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        self.requests.append(request)
        self.remaining_s.append(remaining_s)
        self.called.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if self.errors:
            error = self.errors.popleft()
            if error is not None:
                raise error
        if request.collection != self.collection:
            raise NotFound(f"collection {request.collection!r} does not exist")
        ranked = self._rank(request)
        window = ranked[request.offset : request.offset + request.limit]
        hits = [_hit(doc, score) for score, doc in window]
        return SearchPage(hits=hits, total_count=len(ranked), took_ms=0.1)

    async def get_collection(self, name: str, *, remaining_s: float | None) -> CollectionInfo:
        if name != self.collection:
            raise NotFound(f"collection {name!r} does not exist", metadata={"collection": name})
        sources = _facets(d.source for d in self.documents)
        types = _facets(d.entity_type for d in self.documents)
        fields = (("source", "string"), ("entity_type", "string"), ("title", "string"))
        return CollectionInfo(
            name=name,
            document_count=len({d.id.split("__")[0] for d in self.documents}),
            chunk_count=len(self.documents),
            sources=sources,
            entity_types=types,
            fields=fields,
        )

    def _rank(self, request: SearchRequest) -> list[tuple[float, FakeDocument]]:
        words = set(_WORD.findall(" ".join((request.primary, *request.variations)).lower()))
        scored: list[tuple[float, FakeDocument]] = []
        for doc in self.documents:
            if request.filter_groups and not any(_matches(doc, g) for g in request.filter_groups):
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


def _matches(doc: FakeDocument, group: FilterGroup) -> bool:
    return all(_holds(doc, c) for c in group.conditions)


def _holds(doc: FakeDocument, condition: FilterCondition) -> bool:
    name = condition.field
    actual: Any = (
        doc.metadata.get(name.removeprefix("metadata."))
        if name.startswith("metadata.")
        else getattr(doc, name, None)
    )
    value = condition.value
    if condition.operator == "equals":
        return bool(actual == value)
    if condition.operator == "not_equals":
        return bool(actual != value)
    if condition.operator == "in":
        return isinstance(value, list) and actual in value
    if condition.operator == "not_in":
        return isinstance(value, list) and actual not in value
    if condition.operator == "contains":
        return str(value).lower() in str(actual).lower()
    raise ValueError(f"FakeSearch does not support {condition.operator}")


def _hit(doc: FakeDocument, score: float) -> SearchHit:
    document_id, _, index = doc.id.partition("__chunk_")
    return SearchHit(
        id=doc.id,
        document_id=document_id,
        chunk_index=int(index or 0),
        title=doc.title,
        text=doc.text,
        score=score,
        source=doc.source,
        entity_type=doc.entity_type,
        url=doc.url,
        metadata=dict(doc.metadata),
    )


def _facets(values: Iterable[str]) -> tuple[Facet, ...]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return tuple(Facet(v, n) for v, n in sorted(counts.items()))
