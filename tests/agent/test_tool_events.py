"""Every tool call that reaches its tool emits its event, with the error when it failed; counts
say what the model saw; only calls that ran count as iterations and in the usage; the run's
usage carries per-tool calls and the gateway's cost (issue 26)."""

from __future__ import annotations

from dataclasses import replace

from quarry.common.v1 import search_pb2

from services.agent import convert
from services.agent.loop import AgentLoop
from services.agent.run import Mode
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    calculate_call,
    raw_call,
    search_call,
    turn,
)
from services.agent.tools import Searching
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"


async def test_a_search_with_invalid_arguments_emits_its_event_with_the_error_and_is_no_iteration(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", raw_call("search", '{"query": {"primary": ""}}', call_id="bad")),
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    invalid, valid = [e for e in events if isinstance(e, Searching)]
    assert invalid.error.startswith("The arguments do not match the schema: query.primary")
    assert invalid.result_count == 0
    assert not valid.error
    assert (invalid.iteration, valid.iteration) == (1, 1)  # the invalid one was no iteration
    result = result_of(events)
    assert result.iterations == 1
    assert result.usage.searches == 1


async def test_the_search_event_counts_the_results_the_model_was_shown_not_those_fetched(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory file", limit=1)),
            turn("", answer_call("Use TemporaryDirectory.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING, limit=10)

    [searching] = [e for e in events if isinstance(e, Searching)]
    assert search.requests[0].limit == 10  # fetched for the caller's limit
    assert searching.result_count == 1  # shown to the model: the limit it asked for
    assert searching.total_count > 1


async def test_a_search_event_with_an_error_reaches_the_stream_with_it() -> None:
    event = Searching(2, "x", (), "keyword", (), 0, 0, 5, error="The search failed: no.", step=3)
    message = convert.event_message(event)
    assert message.WhichOneof("event") == "searching"
    assert message.searching.error == "The search failed: no."
    assert message.searching.strategy == search_pb2.RETRIEVAL_STRATEGY_KEYWORD
    assert (message.searching.iteration, message.searching.step) == (2, 3)


async def test_usage_counts_the_calls_of_each_tool_that_ran(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory"), calculate_call("2 +")),
            turn("", calculate_call("6 * 7"), raw_call("read", "{}")),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    assert result.usage.tool_calls == {"search": 1, "calculate": 1, "submit_answer": 1}
    response = convert.run_response(result)
    assert dict(response.usage.tool_calls) == {"search": 1, "calculate": 1, "submit_answer": 1}


async def test_the_run_cost_is_the_sum_of_the_priced_model_calls_and_unset_when_none_is(
    search: FakeSearch,
) -> None:
    first = turn("", search_call("temporary directory"))
    priced = replace(first, usage=replace(first.usage, cost_usd=0.0015))
    last = turn("", answer_call("Use TemporaryDirectory [1].", [TEMP]))
    priced_last = replace(last, usage=replace(last.usage, cost_usd=0.0005))
    model = ScriptedModel([priced, priced_last])
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    assert result.usage.cost_usd is not None
    assert abs(result.usage.cost_usd - 0.002) < 1e-12
    assert convert.run_response(result).usage.HasField("cost_usd")

    unpriced = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(unpriced, search), mode=Mode.THINKING))
    assert result.usage.cost_usd is None
    assert not convert.run_response(result).usage.HasField("cost_usd")
