"""The `calculate` tool and the per-request tool allowlist in the run loop, driven by a scripted
model: results, events, spans, and every mistake sent back to the model as a tool error."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.agent.v1 import agent_pb2

from services.agent import convert
from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.run import Mode, StopReason
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    calculate_call,
    raw_call,
    search_call,
    turn,
)
from services.agent.tools import Calculating, Searching
from services.common.errors import InvalidArgument
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"


def _tool_results(model: ScriptedModel, call: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[call].messages
        if m.role is Role.TOOL
    ]


async def test_calculate_returns_the_value_as_a_tool_result_and_an_event(
    search: FakeSearch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = ScriptedModel(
        [
            turn("Percent change.", calculate_call("(1250 - 980) / 980 * 100", call_id="c1")),
            turn("", answer_call("It grew 27.55 %.")),
        ]
    )
    loop = AgentLoop(model, search, tracer=provider.get_tracer("test"))
    events = await run_events(loop, mode=Mode.THINKING)

    assert _tool_results(model, 1) == [("c1", "(1250 - 980) / 980 * 100 = 27.5510204082", False)]
    assert [e for e in events if isinstance(e, Calculating)] == [
        Calculating(0, "(1250 - 980) / 980 * 100", "27.5510204082")
    ]
    assert result_of(events).stop_reason is StopReason.ANSWERED
    span = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool calculate")
    assert span.attributes is not None
    assert span.attributes["gen_ai.tool.call.id"] == "c1"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"expression": 12', "not valid JSON"),
        ('{"formula": "1 + 1"}', "expression: Field required"),
        ('{"expression": "open(\\"/etc/passwd\\")"}', "unknown function 'open'"),
        ('{"expression": "9 ** 9 ** 9"}', "exceeds"),
        ('{"expression": "1 / 0"}', "division by zero"),
    ],
)
async def test_bad_calculations_go_back_to_the_model_as_tool_errors(
    search: FakeSearch, arguments: str, expected: str
) -> None:
    model = ScriptedModel(
        [
            turn("", raw_call("calculate", arguments, call_id="bad")),
            turn("", answer_call("I could not compute it.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(call_id, text, is_error)] = _tool_results(model, 1)
    assert (call_id, is_error) == ("bad", True)
    assert expected in text
    [event] = [e for e in events if isinstance(e, Calculating)]
    assert event.result == ""
    assert expected in event.error
    assert result_of(events).stop_reason is StopReason.ANSWERED


async def test_the_allowlist_decides_the_tools_offered_and_the_system_prompt(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [turn("", search_call("tempfile")), turn("", answer_call("x [1]", [TEMP]))]
    )
    await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"search"})
    )

    first = model.requests[0]
    assert [t.name for t in first.callable_tools] == ["search", "submit_answer"]
    prompt = first.messages[0].text
    assert "`search`" in prompt
    assert "## Search rules" in prompt
    assert "calculate" not in prompt


async def test_a_run_without_search_gets_a_prompt_without_search_rules(search: FakeSearch) -> None:
    model = ScriptedModel(
        [turn("", calculate_call("2 + 2", call_id="c1")), turn("", answer_call("4"))]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"calculate"})
    )

    assert [t.name for t in model.requests[0].callable_tools] == ["calculate", "submit_answer"]
    assert "## Search rules" not in model.requests[0].messages[0].text
    assert "## Calculations" in model.requests[0].messages[0].text
    assert result_of(events).answer.text == "4"


async def test_a_tool_outside_the_allowlist_is_refused_back_to_the_model(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", calculate_call("1 + 1", call_id="calc"), search_call("tempfile", call_id="s")),
            turn("", answer_call("x [1]", [TEMP])),
        ]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"search"})
    )

    results = _tool_results(model, 1)
    assert results[0] == (
        "calc",
        "The tool 'calculate' is not available in this run. The tools are search, submit_answer.",
        True,
    )
    assert results[1][0] == "s"
    assert not results[1][2]
    assert not [e for e in events if isinstance(e, Calculating)]
    assert [type(e) for e in events if isinstance(e, Searching)] == [Searching]


async def test_a_search_outside_the_allowlist_is_refused_and_never_reaches_the_search_tool(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [turn("", search_call("tempfile", call_id="s")), turn("", answer_call("no search"))]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"calculate"})
    )

    assert _tool_results(model, 1)[0][2] is True
    assert "'search' is not available" in _tool_results(model, 1)[0][1]
    assert search.requests == []
    assert result_of(events).usage.searches == 0


async def test_the_final_call_runs_only_submit_answer(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", calculate_call("1 + 1", call_id="late"), answer_call("x [1]", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.FAST)

    assert [t.name for t in model.requests[1].callable_tools] == ["submit_answer"]
    assert not [e for e in events if isinstance(e, Calculating)]
    assert result_of(events).answer.text == "x [1]"
    assert result_of(events).stop_reason is StopReason.ANSWERED


def test_an_unknown_tool_in_the_request_is_invalid_argument_naming_it() -> None:
    message = agent_pb2.RunRequest(
        collection="docs", query="q", tools=["search", "browse", "submit_answer"]
    )
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(message)
    assert [v.field for v in caught.value.violations] == ["tools[1]"]
    accepted = convert.run_request(agent_pb2.RunRequest(collection="docs", query="q"))
    assert accepted.allowed_tools == frozenset()
    named = convert.run_request(
        agent_pb2.RunRequest(collection="docs", query="q", tools=["calculate", "submit_answer"])
    )
    assert named.allowed_tools == frozenset({"calculate"})
