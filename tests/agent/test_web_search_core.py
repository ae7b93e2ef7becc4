"""The `web_search` tool's result as the model reads it: web blocks marked as web, the caller's
filter said not to apply, the Layer-1 budget respected without cutting a result."""

from __future__ import annotations

from datetime import UTC, datetime

from services.agent.search import WEB_SOURCE, SearchHit, WebOrigin, WebPage
from services.agent.tools.web_search import WebSearchPlan, format_web_results, web_block
from services.llm_gateway.providers.extractive_text import parse_search_result

FETCHED = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)


def web_hit(n: int) -> SearchHit:
    return SearchHit(
        id=f"web_{n:016x}",
        document_id=f"https://example.org/{n}",
        title=f"Page {n}",
        text=f"Snippet number {n} about zig.",
        score=0.0,
        source=WEB_SOURCE,
        url=f"https://example.org/{n}",
        web=WebOrigin("searxng", FETCHED),
    )


def test_web_results_say_they_are_web_pages_outside_the_callers_filter() -> None:
    page = WebPage(hits=[web_hit(1), web_hit(2)], provider="searxng")
    formatted = format_web_results(page, max_chars=10_000)
    assert formatted.text.startswith("Found 2 web results; showing 2.")
    assert "the caller's filter does not apply to them" in formatted.text
    assert "source: web | provider: searxng | fetched: 2026-11-27T06:00:00+00:00" in formatted.text
    assert [h.id for h in formatted.shown] == ["web_0000000000000001", "web_0000000000000002"]


def test_the_extractive_reader_reads_web_blocks_as_citable_passages() -> None:
    formatted = format_web_results(WebPage([web_hit(1)], "searxng"), max_chars=10_000)
    (passage,) = parse_search_result(formatted.text).passages
    assert passage.result_id == "web_0000000000000001"
    assert passage.text == "Snippet number 1 about zig."


def test_the_budget_drops_whole_web_results_never_cuts_one() -> None:
    page = WebPage(hits=[web_hit(n) for n in range(1, 6)], provider="brave")
    one = len(web_block(web_hit(1)))
    formatted = format_web_results(page, max_chars=300 + 2 * one)
    assert len(formatted.shown) == 2
    assert "showing 2" in formatted.text
    for hit in formatted.shown:
        assert hit.text in formatted.text


def test_no_web_results_says_what_to_do() -> None:
    formatted = format_web_results(WebPage([], "searxng"), max_chars=1_000)
    assert formatted.shown == []
    assert "No web results" in formatted.text


def test_the_plan_bounds_the_query_and_the_limit() -> None:
    assert WebSearchPlan(query="zig").limit == 5
    schema = WebSearchPlan.model_json_schema()["properties"]
    assert schema["query"]["maxLength"] == 400
    assert schema["limit"]["maximum"] == 10
