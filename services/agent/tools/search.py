"""The `search` tool: the collection searched with the model's query, filter and strategy."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from services.agent.expand import EXTRACTIVE, Expansion, expand, expansion_text
from services.agent.filters import FilterGroup
from services.agent.messages import ToolCall
from services.agent.ports import TokenUsage
from services.agent.rerank import Reranked, rerank
from services.agent.search import SearchHit, SearchRequest, Strategy
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    filter_wire,
    parse_arguments,
)
from services.agent.tools.results import format_results
from services.common.errors import DeadlineExceeded, InvalidArgument, QuarryError

log = logging.getLogger(__name__)

SEARCH = "search"
MAX_VARIATIONS = 9
"""The search tool's bound on a query's variations (`SearchQuery.variations`)."""


class SearchQuery(BaseModel):
    """What to search for."""

    primary: str = Field(
        min_length=1, description="The main query; feeds keyword and semantic retrieval."
    )
    variations: list[str] = Field(
        default_factory=list,
        max_length=MAX_VARIATIONS,
        description="Up to 9 rephrasings; semantic retrieval only.",
    )


class SearchPlan(BaseModel):
    """Arguments of the `search` tool."""

    query: SearchQuery
    filter_groups: list[FilterGroup] = Field(
        default_factory=list,
        description="OR of groups, each an AND of conditions; combined with the caller's filter "
        "(you can narrow the search, never widen it). Empty: no extra filter.",
    )
    limit: int = Field(default=10, ge=1, le=200, description="Results to return.")
    offset: int = Field(default=0, ge=0, le=1000, description="Results to skip (paging).")
    retrieval_strategy: Strategy = Field(
        default="hybrid",
        description="semantic (meaning), keyword (exact terms, BM25) or hybrid (both, fused).",
    )


@dataclass(frozen=True)
class Searching(ToolEvent):
    """A search the model asked for, as executed."""

    WIRE_FIELD: ClassVar[str] = "searching"

    iteration: int
    primary: str
    variations: tuple[str, ...]
    strategy: Strategy
    filter_groups: tuple[FilterGroup, ...]
    """The model's filter; the search tool applied it within the caller's: (caller) AND (model)."""
    result_count: int
    """Results the model was shown."""
    total_count: int
    duration_ms: int
    error: str = ""
    """Why the search did not run or failed (the tool error the model read)."""
    reranked: Reranked | None = None
    """How the first hits were judged (`loop.rerank_route`); None: they were not."""
    expansion: Expansion | None = None
    """The passage the query was expanded with (`loop.expand_queries`); None: not expanded."""
    expansion_reused: bool = False
    """The expansion was the run's earlier one for this query (no model call)."""

    def wire(self) -> dict[str, Any]:
        expanded = {}
        if self.expansion is not None:
            expanded = {
                "expansion": {
                    "passage": self.expansion.passage,
                    "failed": self.expansion.failed,
                    "duration_ms": 0 if self.expansion_reused else self.expansion.duration_ms,
                    "reused": self.expansion_reused,
                }
            }
        rerank = {}
        if self.reranked is not None:
            rerank = {
                "rerank": {
                    "judged": self.reranked.judged,
                    "answering": self.reranked.answering,
                    "failed": self.reranked.failed,
                    "duration_ms": self.reranked.duration_ms,
                }
            }
        return {
            "iteration": self.iteration,
            "query": {"primary": self.primary, "variations": list(self.variations)},
            "strategy": "RETRIEVAL_STRATEGY_" + self.strategy.upper(),
            "filter": filter_wire(self.filter_groups),
            "result_count": self.result_count,
            "total_count": self.total_count,
            "duration_ms": self.duration_ms,
            "error": self.error,
            **rerank,
            **expanded,
        }


class SearchTool(Tool):
    position = 10
    name = SEARCH
    description = (
        "Search the collection for relevant passages. Use different retrieval strategies, "
        "rephrasings and filters to refine results."
    )
    arguments = SearchPlan
    prompt_line = (
        "- `search`: search the collection with a query, optional rephrasings, filters and a "
        "retrieval strategy."
    )
    uses_search = True
    parallel = True
    opens = True

    def route(self, question: str, limit: int) -> str | None:
        return json.dumps({"query": {"primary": question}, "limit": limit})

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """One search. It fetches at least the run's `limit` (the caller's results); the model is
        shown the `limit` it asked for. With `loop.expand_queries`, a HYBRID or SEMANTIC search
        also searches with a passage a model wrote to answer the query (`services/agent/
        expand.py`). With `loop.rerank_route`, a first page's first hits are judged by that
        route's model and reordered by its judgment (`services/agent/rerank.py`)."""
        try:
            plan = parse_arguments(SearchPlan, call.arguments_json)
        except ToolArgumentsError as error:
            invalid = Searching(
                context.iteration,
                "",
                (),
                "hybrid",
                (),
                0,
                0,
                0,
                error=str(error),
                step=context.step,
            )
            return context.failed(call, str(error), invalid)
        request = SearchRequest(
            collection=context.request.collection,
            primary=plan.query.primary,
            variations=tuple(plan.query.variations),
            strategy=plan.retrieval_strategy,
            filter_groups=tuple(plan.filter_groups),
            caller_filter=context.request.caller_filter,
            limit=max(plan.limit, context.request.limit),
            offset=plan.offset,
        )
        started = time.perf_counter()
        asked = request.variations
        expansion, reused = await self._expansion(request, context)
        expanded = None if expansion is None or reused else expansion.usage  # a model call made
        expanded_fields: tuple[str, ...] = ()  # the passage's fields in the request, once sent
        if expansion is not None and not expansion.failed:
            # within the search tool's bound on a query (the same as the agent's by default)
            bound = context.settings.max_query_chars
            variation = expansion_text(request.primary, expansion.passage)[:bound]
            # a model that filled every variation loses its last one: the passage is worth more
            kept = asked[: MAX_VARIATIONS - 1]
            # the passage's words join the keyword query too: the names and terms it uses are
            # often the documents' where the query's are not (docs/first-search.md, session 22)
            request = replace(
                request,
                variations=(*kept, variation),
                keyword_expansion=expansion.passage[:bound],
            )
            expanded_fields = (f"query.variations[{len(kept)}]", "query.keyword_expansion")

        def event(
            result_count: int,
            total_count: int,
            error: str = "",
            duration_ms: int | None = None,
            reranked: Reranked | None = None,
        ) -> Searching:
            if duration_ms is None:
                duration_ms = int((time.perf_counter() - started) * 1000)
            return Searching(
                iteration=context.iteration,
                primary=request.primary,
                variations=asked,
                strategy=request.strategy,
                filter_groups=request.filter_groups,
                result_count=result_count,
                total_count=total_count,
                duration_ms=duration_ms,
                error=error,
                reranked=reranked,
                expansion=expansion,
                expansion_reused=reused,
                step=context.step,
            )

        try:
            try:
                page = await context.search.search(
                    request, remaining_s=context.deadline.remaining()
                )
            except InvalidArgument as error:
                if expansion is None or not any(_names(error, f) for f in expanded_fields):
                    raise
                expansion = context.expansions.refused(request.primary, expansion)
                log.warning(
                    "the search tool refused the expanded query; the search goes as asked",
                    extra={"fields": list(expanded_fields), "error": error.message},
                )
                request = replace(request, variations=asked, keyword_expansion="")
                page = await context.search.search(
                    request, remaining_s=context.deadline.remaining()
                )
        except QuarryError as error:
            failed = context.search_tool_error(call, error, "search", lambda e: event(0, 0, e))
            spent = _spent(expanded, None)
            return failed if spent is None else replace(failed, usage=spent)
        hits: Sequence[SearchHit] = page.hits
        reranked = None
        settings = context.settings
        if settings.rerank_route and request.offset == 0 and hits:
            reranked = await rerank(
                request.primary,
                hits,
                model=context.model,
                route=settings.rerank_route,
                candidates=settings.rerank_candidates,
                max_chars=settings.rerank_max_chars,
                parallel=settings.rerank_parallel,
                deadline=context.deadline,
            )
            hits = reranked.hits
        duration_ms = int((time.perf_counter() - started) * 1000)
        formatted = format_results(
            hits[: plan.limit],
            page.total_count,
            max_chars=context.budget_chars,
            preview_chars=context.settings.preview_chars,
        )
        return ToolOutcome(
            call,
            formatted.text,
            event=event(
                len(formatted.shown),
                page.total_count,
                duration_ms=duration_ms,
                reranked=reranked,
            ),
            shown=tuple(formatted.shown),
            previewed=tuple(formatted.previewed),
            found=tuple(hits),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=page.total_count,
            ran=True,
            usage=_spent(expanded, reranked),
        )

    @staticmethod
    async def _expansion(
        request: SearchRequest, context: ToolContext
    ) -> tuple[Expansion | None, bool]:
        """The query's expansion (`loop.expand_queries`), and whether it is the run's earlier
        one (or the one a search beside this one asked for); None: not expanded (off, a KEYWORD
        search, or a route whose first provider is the offline `extractive` one)."""
        if not context.settings.expand_queries or request.strategy == "keyword":
            return None, False
        return await context.expansions.of(
            request.primary, lambda: _written(request.primary, context)
        )


async def _written(query: str, context: ToolContext) -> Expansion | None:
    """`query`'s passage from the expand route's model; None when its first provider is the
    offline `extractive` one (not asked)."""
    settings = context.settings
    route = settings.expand_route or context.route
    try:
        kind = await context.model.provider_kind(route, remaining_s=context.deadline.remaining())
    except DeadlineExceeded:
        raise
    except QuarryError:
        kind = ""  # unknown: asked, and a gateway that is down fails the expansion alone
    if kind == EXTRACTIVE:
        return None  # the offline provider writes no passage: not asked
    return await expand(
        query,
        model=context.model,
        route=route,
        max_output_tokens=settings.expand_max_tokens,
        deadline=context.deadline,
    )


def _names(error: InvalidArgument, field: str) -> bool:
    """The search tool's error names `field` among its bad fields."""
    return any(v.field == field for v in error.violations)


def _spent(expanded: TokenUsage | None, reranked: Reranked | None) -> TokenUsage | None:
    """The model tokens a search spent (its expansion and its judgments); None: no model call."""
    if expanded is None and reranked is None:
        return None
    usage = TokenUsage()
    for part in (expanded, None if reranked is None else reranked.usage):
        if part is not None:
            usage.add(part)
    return usage


TOOL = SearchTool()
"""This module's tool, found by the registry."""
