"""The opt-in `web_search` tool: the web through the search tool's `WebSearch`, not the
collection.

Offered only when a request names it (like `ask_user`), and only to a caller whose API key may
search the web. Web results are shown in the same `### [result_id] title` blocks as collection
results (`source: web`), so the model reads and cites them alike; they are marked as web in the
events, citations and step records (`SearchHit.web`). The caller's filter does not apply to the
web — the tool description says so. The search tool owns providers, retries, breakers and the
cache; a provider failure or a search tool without providers is a tool error the model can go on
after, an outage of the search tool itself ends the run as every search does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from services.agent.messages import ToolCall
from services.agent.search import SearchHit, WebPage
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
)
from services.agent.tools.results import FormattedResults
from services.common.errors import FailedPrecondition, QuarryError, Unavailable

WEB_SEARCH = "web_search"
MAX_WEB_QUERY_CHARS = 400
MAX_WEB_RESULTS = 10
WEB_FAILED_REASON = "WEB_SEARCH_FAILED"
WEB_DISABLED_REASON = "WEB_SEARCH_DISABLED"
"""The search tool's reasons (`services/search_tool/web/service.py`): a provider failure and no
provider configured. Both become tool errors; any other failure is the search tool's."""

DESCRIPTION = (
    "Search the public web (not the collection) through the operator's web search provider. "
    "Use it only for what the collection cannot hold (recent events, general background). Web "
    "results are NOT covered by the caller's filter and may come from any site: prefer the "
    "collection's results, and cite web results by their id (web_…) like any other result."
)


class WebSearchPlan(BaseModel):
    """Arguments of the `web_search` tool."""

    query: str = Field(
        min_length=1,
        max_length=MAX_WEB_QUERY_CHARS,
        description="What to search the web for: a few precise words.",
    )
    limit: int = Field(default=5, ge=1, le=MAX_WEB_RESULTS, description="Web results to return.")


def format_web_results(page: WebPage, *, max_chars: int) -> FormattedResults:
    """Web results in the provider's order until the budget is spent (a result is never cut)."""
    blocks: list[str] = []
    used = len(_header(page, len(page.hits)))
    for hit in page.hits:
        block = web_block(hit)
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    shown = list(page.hits[: len(blocks)])
    text = _header(page, len(shown)) + "".join(blocks)
    if not page.hits:
        text += "\nNo web results. Try other words, or go on with the collection.\n"
    return FormattedResults(text=text, shown=shown)


def _header(page: WebPage, shown: int) -> str:
    return (
        f"Found {len(page.hits)} web results; showing {shown}. They are web pages from "
        f"{page.provider or 'the web'}, not documents of the collection: the caller's filter "
        "does not apply to them.\n"
    )


def web_block(hit: SearchHit) -> str:
    """One web result as the model sees it (the snippet is the provider's, never cut)."""
    fetched = ""
    if hit.web is not None and hit.web.fetched_at is not None:
        fetched = f" | fetched: {hit.web.fetched_at.isoformat(timespec='seconds')}"
    provider = hit.web.provider if hit.web is not None else ""
    meta = f"source: web | provider: {provider}{fetched} | url: {hit.url}"
    return f"\n### [{hit.id}] {hit.title}\n{meta}\n{hit.text}\n"


def web_ids(hits: Sequence[SearchHit]) -> list[str]:
    return [h.id for h in hits if h.web is not None]


@dataclass(frozen=True)
class WebSearching(ToolEvent):
    """A `web_search` call, as executed (or failed)."""

    WIRE_FIELD: ClassVar[str] = "web_searching"

    iteration: int
    """This search's number (a web search counts against the run's search cap)."""
    query: str
    result_count: int = 0
    provider: str = ""
    cached: bool = False
    duration_ms: int = 0
    error: str = ""

    def wire(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "query": self.query,
            "result_count": self.result_count,
            "provider": self.provider,
            "cached": self.cached,
            "duration_ms": self.duration_ms,
            "error": self.error,
        }


class WebSearchTool(Tool):
    position = 20
    name = WEB_SEARCH
    description = DESCRIPTION
    arguments = WebSearchPlan
    prompt_line = (
        "- `web_search`: search the public web (not the collection; the caller's filter does "
        "not apply to it) for what the collection cannot hold."
    )
    offer = "opt_in"
    uses_search = True
    permission = "web_search"

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        try:
            plan = parse_arguments(WebSearchPlan, call.arguments_json)
        except ToolArgumentsError as error:
            event = WebSearching(
                context.iteration, call.arguments_json[:200], error=str(error), step=context.step
            )
            return context.failed(call, str(error), event)
        started = time.perf_counter()
        try:
            page = await context.search.web_search(
                plan.query, plan.limit, remaining_s=context.deadline.remaining()
            )
        except QuarryError as error:
            return self._failed(call, context, plan, error, _ms_since(started))
        duration_ms = _ms_since(started)
        formatted = format_web_results(page, max_chars=context.budget_chars)
        event = WebSearching(
            iteration=context.iteration,
            query=plan.query,
            result_count=len(formatted.shown),
            provider=page.provider,
            cached=page.cached,
            duration_ms=duration_ms,
            step=context.step,
        )
        return ToolOutcome(
            call,
            formatted.text,
            event=event,
            shown=tuple(formatted.shown),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=len(page.hits),
            ran=True,
        )

    @staticmethod
    def _failed(
        call: ToolCall,
        context: ToolContext,
        plan: WebSearchPlan,
        error: QuarryError,
        duration_ms: int,
    ) -> ToolOutcome:
        """The web's own failures (no provider, every provider failing, a query it refuses) are
        tool errors; the search tool's outages, the deadline and refused keys end the run."""
        event = WebSearching(
            context.iteration,
            plan.query,
            duration_ms=duration_ms,
            error=error.message,
            step=context.step,
        )
        if isinstance(error, FailedPrecondition) and error.reason == WEB_DISABLED_REASON:
            text = (
                "Web search is not available: the operator has configured no web search "
                "provider. Go on with the collection."
            )
            return context.failed(call, text, event)
        if isinstance(error, Unavailable) and error.reason == WEB_FAILED_REASON:
            text = (
                f"The web search failed: {error.message}. Go on with the collection, or try "
                "the web again later in the run."
            )
            return context.failed(call, text, event)
        return context.search_tool_error(
            call, error, "web search", lambda text: dataclasses.replace(event, error=text)
        )


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


TOOL = WebSearchTool()
"""This module's tool, found by the registry."""
