"""Web results cross the agent's edges marked as web: from the search tool's WebResult, into
RunResponse results and citations, and back from a stored record."""

from __future__ import annotations

from datetime import UTC, datetime

from quarry.searchtool.v1 import search_tool_pb2

from services.agent import convert
from services.agent.answers import SeenResults, accept_answer
from services.agent.search import WEB_SOURCE
from services.agent.tools import Answer, CitationRef


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
    hit = convert.web_hit(web_result())
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
    hit = convert.web_hit(web_result())
    message = convert.search_result(hit)
    assert message.HasField("web")
    assert message.web.provider == "searxng"
    assert convert.search_hit(message) == hit


def test_a_collection_result_carries_no_web_mark() -> None:
    message = convert.search_result(convert.web_hit(web_result()))
    message.ClearField("web")
    assert convert.search_hit(message).web is None


def test_a_citation_of_a_web_result_is_marked_as_web_on_the_wire() -> None:
    seen = SeenResults()
    seen.add([convert.web_hit(web_result())])
    answer = Answer(text="Zig [1].", citations=[CitationRef(result_id="web_0123456789abcdef")])
    (citation,) = accept_answer(answer, seen).citations
    assert citation.web
    assert citation.url == "https://example.org/zig"
