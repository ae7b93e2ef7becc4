"""The `count` tool in the run loop: totals and breakdowns back to the model, inside the caller's
filter, a `counting` event; mistakes back to the model as tool errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.run import Mode, StopReason
from services.agent.testing import ScriptedModel, answer_call, raw_call, turn
from services.agent.tools import Counting
from tests.agent.conftest import caller_filter, result_of, run_events
from tests.agent.fake_search import FakeDocument, FakeSearch

FILES = [
    FakeDocument(
        f"f{i}__chunk_0",
        f"File {i}",
        "text",
        source=source,
        created_at=datetime(2024, month, 1, tzinfo=UTC),
        metadata={"kind": kind},
    )
    for i, (source, kind, month) in enumerate(
        [("slack", "pdf", 1), ("slack", "pdf", 2), ("slack", "html", 2), ("drive", "pdf", 2)]
    )
]


def _tool_texts(model: ScriptedModel, call: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[call].messages
        if m.role is Role.TOOL
    ]


async def test_count_answers_how_many_with_breakdowns_and_a_counting_event() -> None:
    search = FakeSearch(FILES, collection="python-docs")
    pdfs = [{"conditions": [{"field": "metadata.kind", "operator": "equals", "value": "pdf"}]}]
    model = ScriptedModel(
        [
            turn(
                "Count PDFs per source.",
                raw_call(
                    "count",
                    json.dumps({"filter_groups": pdfs, "group_by": ["source", "created_at"]}),
                    call_id="c",
                ),
            ),
            turn("", answer_call("There are 3 PDFs: 2 from Slack, 1 from Drive.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(call_id, text, is_error)] = _tool_texts(model, 1)
    assert (call_id, is_error) == ("c", False)
    assert text == (
        "Counted 3 documents (3 chunks) matching the filter.\n"
        "\n### Documents by source\nslack: 2\ndrive: 1\n"
        "\n### Documents by created_at\n2024-01: 1\n2024-02: 2\n"
    )
    [counting] = [e for e in events if isinstance(e, Counting)]
    assert (counting.document_count, counting.exact) == (3, True)
    assert counting.group_by == ("source", "created_at")
    assert result_of(events).stop_reason is StopReason.ANSWERED
    assert search.requests == []


async def test_the_model_cannot_count_outside_the_caller_filter() -> None:
    search = FakeSearch(FILES, collection="python-docs")
    drive = [{"conditions": [{"field": "source", "operator": "equals", "value": "drive"}]}]
    model = ScriptedModel(
        [
            turn("", raw_call("count", json.dumps({"filter_groups": drive}), call_id="c")),
            turn("", answer_call("None.")),
        ]
    )
    only_slack = caller_filter([("source", "equals", "slack")])
    await run_events(AgentLoop(model, search), mode=Mode.THINKING, caller_filter=only_slack)

    assert _tool_texts(model, 1)[0][1].startswith("Counted 0 documents")
    assert search.counts[0].caller_filter == only_slack


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"group_by": ["a", "b", "c", "d"]}', "group_by: List should have at most 3 items"),
        ('{"date_interval": "week"}', "date_interval: Input should be"),
        ('{"group_by": ["text"]}', "group_by[0]: cannot group by 'text'"),
        (
            '{"filter_groups": [{"conditions": [{"field": "colour", "operator": "equals", '
            '"value": "red"}]}]}',
            "filter.groups[0].conditions[0].field",
        ),
        ("[1, 2]", "arguments: Input should be a valid dictionary"),
    ],
)
async def test_bad_counts_go_back_to_the_model_as_tool_errors_and_emit_their_event_with_it(
    arguments: str, expected: str
) -> None:
    search = FakeSearch(FILES, collection="python-docs")
    model = ScriptedModel(
        [turn("", raw_call("count", arguments, call_id="bad")), turn("", answer_call("?"))]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(call_id, text, is_error)] = _tool_texts(model, 1)
    assert (call_id, is_error) == ("bad", True)
    assert expected in text
    [counting] = [e for e in events if isinstance(e, Counting)]
    assert counting.error == text
    assert counting.document_count == 0
