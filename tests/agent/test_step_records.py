"""Step records (seed 004 M1-M4): one per model turn, on events, spans, the final response, and
what Layer 3 compaction reads."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.agent import convert
from services.agent.events import Done, Thinking
from services.agent.loop import AgentLoop
from services.agent.ports import ContextWindowExceeded
from services.agent.records import StepRecord
from services.agent.run import Mode
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    calculate_call,
    raw_call,
    read_call,
    search_call,
    turn,
)
from services.agent.tools import Searching, ToolEvent
from services.common import semconv
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"


async def test_each_model_turn_is_one_step_with_its_calls_tokens_and_provider(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn(
                "Search tempfile.",
                search_call("temporary directory", call_id="s1"),
                input_tokens=300,
            ),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP], call_id="a1"), output_tokens=40),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search)))

    first, second = result.steps
    assert (first.index, second.index) == (1, 2)
    assert first.text == "Search tempfile."
    assert (first.usage.input_tokens, second.usage.output_tokens) == (300, 40)
    assert first.answered_by is not None
    assert first.answered_by.provider == "scripted"
    assert "search" in first.offered_tools
    (call,) = first.tool_calls
    assert (call.call_id, call.name, call.error) == ("s1", "search", "")
    validated = json.loads(call.validated_arguments_json)
    assert validated["query"]["primary"] == "temporary directory"
    assert validated["retrieval_strategy"] == "hybrid"
    assert TEMP in call.result_ids
    assert call.result_ids == tuple(h.id for h in call.results)
    assert call.total_count >= len(call.result_ids)
    assert f"[{TEMP}]" in call.output
    (answer,) = second.tool_calls
    assert (answer.name, answer.result_ids, answer.error) == ("submit_answer", (TEMP,), "")
    assert first.duration_ms >= first.model_ms >= 0
    assert result.usage.input_tokens == sum(s.usage.input_tokens for s in result.steps)


async def test_invalid_arguments_are_recorded_with_the_error_and_no_validated_arguments(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", raw_call("search", '{"query": {"primary": ""}}', call_id="bad")),
            turn("", search_call("tempfile")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    (bad,) = result.steps[0].tool_calls
    assert bad.arguments_json == '{"query": {"primary": ""}}'
    assert bad.validated_arguments_json == ""
    assert "primary" in bad.error
    assert bad.result_ids == ()
    assert result.steps[1].tool_calls[0].error == ""


async def test_citations_sent_back_are_recorded_as_an_error_of_that_step(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", answer_call("Made up [1]", ["nowhere__chunk_9"])),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    rejected = result.steps[1].tool_calls[0]
    assert "nowhere__chunk_9" in rejected.error
    assert json.loads(rejected.validated_arguments_json)["text"] == "Made up [1]"
    assert result.steps[2].tool_calls[0].result_ids == (TEMP,)


async def test_events_carry_the_step_they_belong_to(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("first", search_call("tempfile")),
            turn("second", search_call("shutil")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    steps = [(type(e).__name__, e.step) for e in events if isinstance(e, Thinking | Searching)]
    assert steps == [("Thinking", 1), ("Searching", 1), ("Thinking", 2), ("Searching", 2)]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.step == 3 == len(done.result.steps)
    wire = convert.event_message(events[1])
    assert wire.thinking.step == 1


async def test_every_tool_event_carries_the_step_of_the_turn_that_called_it(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile"), raw_call("count", "{]")),
            turn(
                "",
                read_call(TEMP, neighbours=0),
                raw_call("count", '{"group_by": ["source"]}'),
                calculate_call("2 * 21"),
                calculate_call("1 / 0"),
            ),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    tool_events = [(type(e).__name__, e.step) for e in events if isinstance(e, ToolEvent)]
    assert tool_events == [
        ("Searching", 1),
        ("Counting", 1),
        ("Reading", 2),
        ("Counting", 2),
        ("Calculating", 2),
        ("Calculating", 2),
    ]
    assert [convert.event_message(e).WhichOneof("event") for e in events[1:-1]] == [
        "searching",
        "counting",
        "reading",
        "counting",
        "calculating",
        "calculating",
    ]
    wire = [convert.event_message(e) for e in events if isinstance(e, ToolEvent)]
    assert [getattr(m, m.WhichOneof("event")).step for m in wire] == [1, 1, 2, 2, 2, 2]


async def test_execute_tool_spans_carry_the_step_index(search: FakeSearch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", search_call("shutil")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    loop = AgentLoop(model, search, tracer=provider.get_tracer("test"))
    await run_events(loop, mode=Mode.THINKING)

    tools = [
        (s.name, s.attributes[semconv.QUARRY_AGENT_STEP])
        for s in exporter.get_finished_spans()
        if s.name.startswith(semconv.EXECUTE_TOOL) and s.attributes
    ]
    assert tools == [
        ("execute_tool search", 1),
        ("execute_tool search", 2),
        ("execute_tool submit_answer", 3),
    ]
    (agent,) = [s for s in exporter.get_finished_spans() if s.name == semconv.INVOKE_AGENT]
    assert agent.attributes
    assert agent.attributes[semconv.QUARRY_AGENT_STEPS] == 3


async def test_compaction_summarises_older_steps_from_their_records(search: FakeSearch) -> None:
    summary = json.dumps({"summary": "Searched.", "queries_tried": ["tempfile"]})
    model = ScriptedModel(
        [
            turn("one", search_call("tempfile")),
            turn("two", search_call("shutil")),
            turn("three", search_call("mkdtemp")),
            ContextWindowExceeded("too long"),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ],
        summaries=[summary],
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    prompt = model.structured_requests[0].messages[-1].text
    assert "[step 1] one" in prompt
    assert '"primary":"tempfile"' in prompt  # the validated arguments, from the record
    assert "[step 2]" not in prompt  # kept verbatim, not summarised
    assert result.steps[3].compacted
    assert not any(s.compacted for s in result.steps[:3])


async def test_the_final_response_carries_summary_steps_and_get_run_the_full_ones(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search)))

    summary = convert.run_response(result)
    full = convert.run_response(result, full_steps=True)
    assert [s.index for s in summary.steps] == [1, 2]
    assert summary.steps[0].tool_calls[0].result_ids == full.steps[0].tool_calls[0].result_ids
    assert summary.steps[0].tool_calls[0].output == ""
    assert not summary.steps[0].tool_calls[0].results
    assert f"[{TEMP}]" in full.steps[0].tool_calls[0].output
    assert (
        full.steps[0].tool_calls[0].results[0].chunk.id in result.steps[0].tool_calls[0].result_ids
    )
    assert summary.duration_ms == result.duration_ms


async def test_temperature_and_seed_reach_every_model_request(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    await run_events(AgentLoop(model, search), temperature=0.2, seed=7)
    assert [(r.temperature, r.seed) for r in model.requests] == [(0.2, 7), (0.2, 7)]


def test_step_record_defaults_make_an_empty_step() -> None:
    step = StepRecord(index=1)
    assert (step.tool_calls, step.usage.input_tokens, step.compacted) == ((), 0, False)
