"""The `summarize` tool's pieces: the bounded gateway input, the citation check, the summary as
the model reads it, and the condensing of the summarised results' texts — and the contract with
the gateway's extractive provider (the agent's schema, its input, the provider's answer)."""

from __future__ import annotations

import json

from services.agent.context import condense_results
from services.agent.messages import Role, assistant, tool_result, user
from services.agent.messages import ToolCall as AgentToolCall
from services.agent.search import SearchHit
from services.agent.tools.base import tool_schema
from services.agent.tools.summarize import (
    CUT_MARK,
    SUMMARY_SCHEMA_NAME,
    Summary,
    SummaryPoint,
    check_summary,
    format_summary,
    summary_input,
)
from services.llm_gateway.model import ChatRequest, Message
from services.llm_gateway.model import Role as GatewayRole
from services.llm_gateway.providers.extractive import ExtractiveProvider

HITS = [
    SearchHit(
        id="doc-1__chunk_0",
        document_id="doc-1",
        title="Photosynthesis",
        text="Photosynthesis converts light into chemical energy. It happens in chloroplasts.",
        score=0.9,
        source="biology",
    ),
    SearchHit(
        id="doc-2__chunk_0",
        document_id="doc-2",
        title="Trains",
        text="Steam locomotives were common in the nineteenth century.",
        score=0.5,
        source="history",
    ),
]


def test_the_input_holds_the_focus_and_whole_results_in_the_order_named() -> None:
    sent = summary_input("where photosynthesis happens", HITS, max_chars=10_000)
    assert sent.text.startswith("## Focus\nwhere photosynthesis happens\n\n## Results\n")
    assert sent.text.index("[doc-1__chunk_0]") < sent.text.index("[doc-2__chunk_0]")
    assert HITS[0].text in sent.text
    assert [h.id for h in sent.included] == ["doc-1__chunk_0", "doc-2__chunk_0"]
    assert sent.left_out == ()
    assert sent.chars <= 10_000


def test_results_past_the_input_bound_are_left_out_whole_and_named() -> None:
    first_only = len(summary_input("f", HITS[:1], max_chars=10_000).text) - len(
        "## Focus\nf\n\n## Results\n"
    )
    sent = summary_input("f", HITS, max_chars=first_only + 10)
    assert [h.id for h in sent.included] == ["doc-1__chunk_0"]
    assert sent.left_out == ("doc-2__chunk_0",)
    assert HITS[1].text not in sent.text


def test_a_first_result_larger_than_the_bound_is_cut_not_dropped() -> None:
    long = SearchHit(
        id="big__chunk_0", document_id="big", title="Big", text="word " * 5_000, score=1
    )
    sent = summary_input("f", [long, HITS[0]], max_chars=2_000)
    assert [h.id for h in sent.included] == ["big__chunk_0"]
    assert CUT_MARK in sent.text
    assert sent.chars <= 2_000
    assert sent.left_out == ("doc-1__chunk_0",)


def test_citations_of_results_not_sent_are_dropped_and_named() -> None:
    summary = Summary(
        summary="s",
        points=[
            SummaryPoint(text="a", result_ids=["doc-1__chunk_0", "invented__chunk_9"]),
            SummaryPoint(text="b", result_ids=["doc-1__chunk_0", "doc-1__chunk_0"]),
        ],
    )
    checked = check_summary(summary, ["doc-1__chunk_0", "doc-2__chunk_0"])
    assert [p.result_ids for p in checked.points] == [["doc-1__chunk_0"], ["doc-1__chunk_0"]]
    assert checked.cited == ("doc-1__chunk_0",)
    assert checked.unknown == ("invented__chunk_9",)
    text = format_summary(checked, "focus", ["doc-1__chunk_0"], ["doc-2__chunk_0"])
    assert "- a [doc-1__chunk_0]" in text
    assert "Ignored citations of results that were not summarised: invented__chunk_9." in text
    assert "Not summarised (the input bound was reached): doc-2__chunk_0." in text


def test_condensing_keeps_each_result_citable_and_the_calls_paired() -> None:
    search_text = (
        "Found 2 results; showing 2.\n"
        "\n### [doc-1__chunk_0] Photosynthesis\nsource: biology\nPhotosynthesis converts light.\n"
        "\n### [doc-2__chunk_0] Trains\nsource: history\nSteam locomotives.\n"
    )
    call = AgentToolCall("c1", "search", "{}")
    messages = [user("## Query\nq"), assistant("", [call]), tool_result("c1", search_text)]
    condensed = condense_results(messages, ["doc-1__chunk_0"], "c2")
    text = condensed[2].text
    assert "### [doc-1__chunk_0] Photosynthesis\n(condensed: see the result of call c2" in text
    assert "Photosynthesis converts light." not in text
    assert "Steam locomotives." in text
    assert condensed[2].tool_call_id == "c1"
    assert condensed[2].role is Role.TOOL
    assert condensed[:2] == messages[:2]


async def test_the_agents_schema_and_input_get_a_valid_checked_summary_from_extractive() -> None:
    sent = summary_input("photosynthesis in chloroplasts", HITS, max_chars=10_000)
    request = ChatRequest(
        (Message(GatewayRole.USER, text=sent.text),),
        response_schema=tool_schema(Summary),
        response_schema_name=SUMMARY_SCHEMA_NAME,
    )
    reply = await ExtractiveProvider().generate(request)
    summary = Summary.model_validate(json.loads(reply.text))
    checked = check_summary(summary, [h.id for h in sent.included])
    assert checked.unknown == ()
    assert checked.cited == ("doc-1__chunk_0",)
    assert "chloroplasts" in checked.summary
