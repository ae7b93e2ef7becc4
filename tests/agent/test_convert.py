"""Settings sources and the protobuf edge: defaults, filter values, results round trip."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from quarry.agent.v1 import agent_pb2
from quarry.common.v1 import search_pb2

from services.agent import convert, search_tool_client
from services.agent.config import AgentSettings
from services.agent.filter_wire import filter_message
from services.agent.filters import CallerCondition, CallerFilter, FilterCondition, FilterGroup
from services.agent.questions import QuestionWindows
from services.agent.run import Mode
from services.agent.search import Breadcrumb, SearchHit, SearchRequest
from services.common.errors import InvalidArgument
from services.common.settings import load_settings


def test_settings_come_from_the_agent_section_and_quarry_agent_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "quarry.yaml"
    config.write_text("agent:\n  route: fast-route\n  loop:\n    thinking_max_iterations: 7\n")
    monkeypatch.setenv("QUARRY_AGENT_SEARCH_TOOL_ADDRESS", "search:9000")
    settings = load_settings(AgentSettings, config)
    assert settings.route == "fast-route"
    assert settings.loop.thinking_max_iterations == 7
    assert settings.search_tool_address == "search:9000"
    assert settings.llm_gateway_address == "127.0.0.1:50052"
    assert settings.server.port == 50053


def test_request_defaults_fast_mode_ten_results_configured_collection() -> None:
    request = convert.run_request(
        agent_pb2.StreamRunRequest(query=" q "), default_collection="docs", default_limit=10
    )
    assert (request.collection, request.query, request.mode, request.limit) == (
        "docs",
        "q",
        Mode.FAST,
        10,
    )


def test_the_callers_filter_passes_through_untouched_to_every_search() -> None:
    """The agent does not judge the caller's filter (the search tool does): even an operator the
    search tool refuses reaches it as sent, through the domain `CallerFilter`."""
    odd = search_pb2.FilterCondition(
        field="colour", operator=search_pb2.FILTER_OPERATOR_UNSPECIFIED
    )
    caller = search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=[odd])])
    request = convert.run_request(
        agent_pb2.RunRequest(query="q", collection="docs", filter=caller), default_limit=10
    )
    assert request.caller_filter == CallerFilter(((CallerCondition("colour", "unspecified"),),))
    search = search_tool_client.search_request(
        SearchRequest(collection="docs", primary="q", caller_filter=request.caller_filter)
    )
    assert search.caller_filter == caller
    assert not search.filter.groups


def test_model_filter_values_keep_integers_lists_and_booleans() -> None:
    groups = (
        FilterGroup(
            conditions=[
                FilterCondition(field="metadata.year", operator="in", value=[2024, 1.5]),
                FilterCondition(field="metadata.stable", operator="equals", value=True),
            ]
        ),
    )
    message = filter_message(groups)
    year, stable = message.groups[0].conditions
    assert year.operator == search_pb2.FILTER_OPERATOR_IN
    assert [v.number_value for v in year.value.list_value.values] == [2024, 1.5]
    assert stable.value.WhichOneof("kind") == "bool_value"


def test_a_search_hit_survives_the_round_trip_through_protobuf() -> None:
    hit = SearchHit(
        id="d__chunk_1",
        document_id="d",
        chunk_index=1,
        title="T",
        text="x",
        score=0.5,
        source="s",
        entity_type="e",
        url="u",
        created_at=datetime(2024, 1, 2, tzinfo=UTC),
        breadcrumbs=(Breadcrumb("b", "B", "folder"),),
        metadata={"n": 3, "f": 1.5, "ok": True, "s": "v"},
        dense_score=0.7,
    )
    assert search_tool_client.search_hit(convert.search_result(hit)) == hit


def test_an_empty_turn_of_history_is_invalid_argument_naming_it() -> None:
    """Found by the hostile corpus: an empty prior question reached the gateway, which refused the
    conversation, and the run ended INTERNAL."""
    message = agent_pb2.RunRequest(
        query="q",
        collection="docs",
        history=[
            agent_pb2.ConversationTurn(question="earlier?", answer="yes"),
            agent_pb2.ConversationTurn(question=" ", answer="no"),
        ],
    )
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(message, default_limit=10)
    assert [v.field for v in caught.value.violations] == ["history[1].question"]


def test_a_ten_megabyte_turn_of_history_is_invalid_argument_naming_the_setting() -> None:
    """A 10 MB prior turn was accepted and the run ended in a fallback with no search."""
    message = agent_pb2.RunRequest(
        query="q",
        collection="docs",
        history=[agent_pb2.ConversationTurn(question="earlier?", answer="a" * 10_000_000)],
    )
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(message, default_limit=10, max_history_chars=32_000)
    [violation] = caught.value.violations
    assert violation.field == "history"
    assert "max_history_chars is 32000" in violation.description


def test_twenty_one_megabyte_turns_are_refused_by_their_total() -> None:
    turn = agent_pb2.ConversationTurn(question="earlier?", answer="a" * 1_000_000)
    message = agent_pb2.RunRequest(query="q", collection="docs", history=[turn] * 20)
    with pytest.raises(InvalidArgument, match="max_history_chars"):
        convert.run_request(message, default_limit=10)


def test_a_prior_question_is_bounded_like_the_query() -> None:
    turn = agent_pb2.ConversationTurn(question="q" * 5_000, answer="yes")
    message = agent_pb2.RunRequest(query="q", collection="docs", history=[turn])
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(message, default_limit=10, max_query_chars=4_000)
    assert [v.field for v in caught.value.violations] == ["history[0].question"]


def test_history_within_its_bounds_is_accepted() -> None:
    turn = agent_pb2.ConversationTurn(question="earlier?", answer="a" * 1_000)
    message = agent_pb2.RunRequest(query="q", collection="docs", history=[turn] * 20)
    assert len(convert.run_request(message, default_limit=10).history) == 20


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), float("-inf")])
def test_a_question_window_that_is_not_a_finite_number_is_invalid_argument(
    seconds: float,
) -> None:
    windows = agent_pb2.QuestionWindows(acknowledge_timeout_s=seconds)
    with pytest.raises(InvalidArgument) as caught:
        convert.question_windows(windows, QuestionWindows(acknowledge_s=30.0, answer_s=None))
    assert [v.field for v in caught.value.violations] == ["question_windows.acknowledge_timeout_s"]


def test_an_unknown_tool_name_is_quoted_as_a_short_marked_prefix() -> None:
    message = agent_pb2.RunRequest(query="q", collection="docs", tools=["x" * 100_000])
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(message, default_limit=10)
    assert "… (100000 characters)" in caught.value.message
    assert len(caught.value.message) < 300


def test_a_stream_request_is_recorded_as_the_run_request_it_holds_without_a_round_trip() -> None:
    from quarry.agent.v1 import agent_pb2 as pb

    stream = pb.StreamRunRequest(
        collection="docs",
        query="q",
        mode=pb.MODE_THINKING,
        limit=7,
        history=[pb.ConversationTurn(question="a", answer="b")],
        budget=pb.Budget(max_iterations=3, max_tokens=900),
        route="r",
        tools=["search", "ask_user"],
        temperature=0.5,
        seed=42,
        question_windows=pb.QuestionWindows(acknowledge_timeout_s=1),
    )
    stream.filter.groups.add().conditions.add(field="source", operator=1)
    recorded = convert.as_run_request(stream)
    round_trip = pb.RunRequest.FromString(stream.SerializeToString())
    round_trip.DiscardUnknownFields()  # the stream's question_windows, kept as unknown bytes
    assert recorded == round_trip
    run = pb.RunRequest(query="q")
    assert convert.as_run_request(run) is run


def test_every_run_request_field_is_copied_from_a_stream_request() -> None:
    from quarry.agent.v1 import agent_pb2 as pb

    stream_fields = {f.name for f in pb.StreamRunRequest.DESCRIPTOR.fields}
    run_fields = {f.name for f in pb.RunRequest.DESCRIPTOR.fields}
    assert stream_fields - {"question_windows"} == run_fields  # a new field: copy it too
