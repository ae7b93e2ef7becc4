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

from collections.abc import Sequence

from pydantic import BaseModel, Field

from services.agent.search import SearchHit, WebPage
from services.agent.tools.results import FormattedResults

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
