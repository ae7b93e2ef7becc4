"""The opt-in `web_search` tool in the run loop: web results the model reads and cites, marked as
web in events, citations, results and step records; provider faults, a search tool without
providers and bad arguments back to the model; outages and cancellation end the run."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.run import Mode, RunRequest, StopReason
from services.agent.testing import ScriptedModel, answer_call, raw_call, search_call, turn
from services.agent.tools import WebSearching
from services.common.errors import Unavailable
from services.search_tool.web.base import WebProviderError, web_result_id
from tests.agent.conftest import DOCUMENTS, collect, result_of, run_events
from tests.agent.fake_search import FakeSearch, FakeWebPage

PAGES = [
    FakeWebPage("https://example.org/zig", "Zig 0.14 released", "Zig 0.14 was released in March."),
    FakeWebPage("https://example.org/rust", "Rust news", "Rust 1.85 stabilised async closures."),
]
ZIG = web_result_id("https://example.org/zig")


def web_call(query: str, *, limit: int = 5, call_id: str = "w") -> ToolCall:
    return raw_call("web_search", json.dumps({"query": query, "limit": limit}), call_id=call_id)


def tool_texts(model: ScriptedModel, request: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[request].messages
        if m.role is Role.TOOL
    ]


async def test_web_results_are_read_cited_and_marked_as_web_everywhere() -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES)
    model = ScriptedModel(
        [
            turn("Checking the web.", web_call("zig release")),
            turn("", answer_call("Zig 0.14 came out in March [1].", [ZIG])),
        ]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"web_search"})
    )

    assert "web_search" in [t.name for t in model.requests[0].callable_tools]
    [(call_id, text, is_error)] = tool_texts(model, 1)
    assert (call_id, is_error) == ("w", False)
    assert "the caller's filter does not apply to them" in text
    assert f"### [{ZIG}] Zig 0.14 released\nsource: web | provider: memory" in text
    [event] = [e for e in events if isinstance(e, WebSearching)]
    assert (event.query, event.result_count, event.provider, event.error) == (
        "zig release",
        2,
        "memory",
        "",
    )
    assert (event.iteration, event.step) == (1, 1)
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    [citation] = result.answer.citations
    assert (citation.result_id, citation.web, citation.url) == (ZIG, True, PAGES[0].url)
    assert result.results[0].id == ZIG
    assert result.results[0].web is not None
    [record] = result.steps[0].tool_calls
    assert record.name == "web_search"
    assert record.result_ids[0] == ZIG
    assert all(h.web is not None for h in record.results)
    assert search.web_requests == [("zig release", 5)]
    assert search.requests == []


async def test_web_search_is_offered_only_when_the_request_names_it() -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES)
    model = ScriptedModel([turn("", web_call("zig")), turn("", answer_call("No idea."))])
    await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    assert "web_search" not in [t.name for t in model.requests[0].callable_tools]
    [(_, text, is_error)] = tool_texts(model, 1)
    assert is_error
    assert "not available in this run" in text
    assert search.web_requests == []


async def test_a_failing_provider_is_a_tool_error_and_the_run_goes_on() -> None:
    failure = WebProviderError("memory answered 503", retryable=False, status=503)
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES, web_errors=[failure])
    model = ScriptedModel(
        [
            turn("", web_call("zig")),
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory() [1].", ["tempfile__chunk_0"])),
        ]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"web_search"})
    )

    [(_, text, is_error)] = tool_texts(model, 1)
    assert is_error
    assert text.startswith("The web search failed: web search failed: memory answered 503")
    [event] = [e for e in events if isinstance(e, WebSearching)]
    assert "memory answered 503" in event.error
    assert event.result_count == 0
    assert result_of(events).stop_reason is StopReason.ANSWERED


async def test_a_search_tool_without_a_web_provider_tells_the_model_to_go_on() -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=None)
    model = ScriptedModel([turn("", web_call("zig")), turn("", answer_call("Not on the web."))])
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"web_search"})
    )

    [(_, text, is_error)] = tool_texts(model, 1)
    assert is_error
    assert "no web search provider" in text
    assert result_of(events).stop_reason is StopReason.ANSWERED


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("{}", "query: Field required"),
        ('{"query": ""}', "query: String should have at least 1 character"),
        ('{"query": "zig", "limit": 50}', "limit: Input should be less than or equal to 10"),
        ("not json", "not valid JSON"),
    ],
)
async def test_bad_arguments_from_the_model_come_back_as_a_tool_error(
    arguments: str, problem: str
) -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES)
    model = ScriptedModel(
        [turn("", raw_call("web_search", arguments, call_id="w")), turn("", answer_call("x"))]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"web_search"})
    )

    [(_, text, is_error)] = tool_texts(model, 1)
    assert is_error
    assert problem in text
    [event] = [e for e in events if isinstance(e, WebSearching)]
    assert problem in event.error
    assert search.web_requests == []


async def test_an_outage_of_the_search_tool_ends_the_run() -> None:
    down = Unavailable("search tool: not reachable", retry_after_s=2.0)
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES, errors=[down])
    model = ScriptedModel([turn("", web_call("zig")), turn("", answer_call("x"))])
    with pytest.raises(Unavailable):
        await run_events(
            AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"web_search"})
        )
    assert len(model.requests) == 1


async def test_a_web_search_counts_against_the_search_cap() -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES)
    model = ScriptedModel(
        [
            turn("", web_call("zig")),
            turn("", answer_call("Zig 0.14 [1].", [ZIG])),
        ]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.FAST, allowed_tools=frozenset({"web_search"})
    )

    result = result_of(events)
    assert result.iterations == 1
    assert result.usage.searches == 1
    assert [t.name for t in model.requests[1].callable_tools] == ["submit_answer"]


async def test_cancelling_the_run_cancels_the_web_search_in_flight() -> None:
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=PAGES, gate=asyncio.Event())
    model = ScriptedModel([turn("", web_call("zig")), turn("", answer_call("x"))])
    request = RunRequest(
        collection="python-docs",
        query="zig",
        mode=Mode.THINKING,
        allowed_tools=frozenset({"web_search"}),
    )
    task = asyncio.create_task(collect(AgentLoop(model, search).stream(request)))
    await asyncio.wait_for(search.called.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert search.cancelled.is_set()
    assert search.web_requests == [("zig", 5)]
    assert len(model.requests) == 1
