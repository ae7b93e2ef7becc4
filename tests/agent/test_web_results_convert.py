"""Web results cross the agent's edges marked as web: from the search tool's WebResult, into
RunResponse results and citations, and back from a stored record."""

from __future__ import annotations

from datetime import UTC, datetime

from quarry.searchtool.v1 import search_tool_pb2

from services.agent import convert, search_tool_client
from services.agent.answers import SeenResults, accept_answer
from services.agent.records import StepRecord, ToolCallRecord
from services.agent.search import WEB_SOURCE
from services.agent.tools import Answer, CitationRef, Summarizing, WebSearching


def web_result() -> search_tool_pb2.WebResult:
    message = search_tool_pb2.WebResult(
        id="web_0123456789abcdef",
        title="Zig",
        url="https://example.org/zig",
        snippet="Zig is a language.",
        provider="searxng",
    )
    message.fetched_at.FromDatetime(datetime(2026, 11, 27, 6, 0, tzinfo=UTC))
    return message


def test_a_web_result_becomes_a_citable_hit_marked_as_web() -> None:
    hit = search_tool_client.web_hit(web_result())
    assert (hit.id, hit.url, hit.document_id, hit.text) == (
        "web_0123456789abcdef",
        "https://example.org/zig",
        "https://example.org/zig",
        "Zig is a language.",
    )
    assert hit.source == WEB_SOURCE
    assert hit.web is not None
    assert hit.web.provider == "searxng"
    assert hit.web.fetched_at == datetime(2026, 11, 27, 6, 0, tzinfo=UTC)


def test_the_web_mark_survives_the_round_trip_through_a_search_result() -> None:
    hit = search_tool_client.web_hit(web_result())
    message = convert.search_result(hit)
    assert message.HasField("web")
    assert message.web.provider == "searxng"
    assert search_tool_client.search_hit(message) == hit


def test_a_collection_result_carries_no_web_mark() -> None:
    message = convert.search_result(search_tool_client.web_hit(web_result()))
    message.ClearField("web")
    assert search_tool_client.search_hit(message).web is None


def test_a_citation_of_a_web_result_is_marked_as_web_on_the_wire() -> None:
    seen = SeenResults()
    seen.add([search_tool_client.web_hit(web_result())])
    answer = Answer(text="Zig [1].", citations=[CitationRef(result_id="web_0123456789abcdef")])
    (citation,) = accept_answer(answer, seen).citations
    assert citation.web
    assert citation.url == "https://example.org/zig"


def test_the_web_search_and_summarize_events_reach_their_stream_fields() -> None:
    searching = convert.event_message(
        WebSearching(3, "zig", result_count=2, provider="brave", cached=True, duration_ms=7, step=2)
    )
    assert searching.WhichOneof("event") == "web_searching"
    web = searching.web_searching
    assert (web.iteration, web.query, web.result_count, web.provider, web.cached) == (
        3,
        "zig",
        2,
        "brave",
        True,
    )
    assert (web.duration_ms, web.step, web.error) == (7, 2, "")
    summarizing = convert.event_message(
        Summarizing(
            1, ("a__chunk_0", "b__chunk_1"), "focus", 2, ("a__chunk_0",), 900, 12, "", step=3
        )
    )
    assert summarizing.WhichOneof("event") == "summarizing"
    event = summarizing.summarizing
    assert list(event.result_ids) == ["a__chunk_0", "b__chunk_1"]
    assert list(event.cited_ids) == ["a__chunk_0"]
    assert (event.focus, event.point_count, event.input_chars, event.step) == ("focus", 2, 900, 3)


def test_a_step_record_of_a_web_search_is_marked_as_web() -> None:
    hit = search_tool_client.web_hit(web_result())
    step = StepRecord(
        index=1,
        text="",
        tool_calls=(
            ToolCallRecord(call_id="w", name="web_search", arguments_json="{}", results=(hit,)),
            ToolCallRecord(call_id="c", name="calculate", arguments_json="{}"),
        ),
    )
    web, local = convert.step_message(step, full=False).tool_calls
    assert web.web
    assert not local.web
