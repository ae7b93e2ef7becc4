"""The `read` tool in the run loop: the chunks around a seen result or its whole document, inside
the caller's filter, citable afterwards; every mistake goes back to the model as a tool error."""

from __future__ import annotations

import pytest

from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.run import Mode, StopReason
from services.agent.search import SearchPage, SearchRequest
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    raw_call,
    read_call,
    search_call,
    turn,
)
from services.agent.tools import Reading
from tests.agent.conftest import caller_filter, result_of, run_events
from tests.agent.fake_search import FakeDocument, FakeSearch

MANUAL = [
    FakeDocument(f"manual__chunk_{i}", "Manual", f"Step {i} of the manual.", source="docs")
    for i in range(6)
]


def _tool_texts(model: ScriptedModel, call: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[call].messages
        if m.role is Role.TOOL
    ]


async def test_read_around_a_result_shows_its_neighbours_and_makes_them_citable() -> None:
    search = FakeSearch(MANUAL, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("step 3", limit=1)),
            turn("Read around it.", read_call("manual__chunk_3", neighbours=1, call_id="r")),
            turn("", answer_call("Steps 2 to 4 [1][2].", ["manual__chunk_2", "manual__chunk_4"])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(call_id, text, is_error)] = _tool_texts(model, 2)[1:]
    assert (call_id, is_error) == ("r", False)
    assert text.startswith("Read manual: chunks 2-4 of 6.")
    assert [line for line in text.splitlines() if line.startswith("### ")] == [
        "### [manual__chunk_2] Manual",
        "### [manual__chunk_3] Manual",
        "### [manual__chunk_4] Manual",
    ]
    [reading] = [e for e in events if isinstance(e, Reading)]
    assert (reading.document_id, reading.first_chunk, reading.chunks_shown) == ("manual", 2, 3)
    assert reading.chunk_count == 6
    result = result_of(events)
    assert [c.result_id for c in result.answer.citations] == ["manual__chunk_2", "manual__chunk_4"]
    assert result.stop_reason is StopReason.ANSWERED


async def test_read_of_the_whole_document_starts_at_its_first_chunk() -> None:
    search = FakeSearch(MANUAL, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("step 5", limit=1)),
            turn("", read_call("manual__chunk_5", scope="document")),
            turn("", answer_call("All steps.")),
        ]
    )
    await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    assert search.reads[0].first_chunk == 0
    assert search.reads[0].max_chunks == 200
    assert _tool_texts(model, 2)[1][1].startswith("Read manual: chunks 0-5 of 6.")


async def test_neighbours_outside_the_caller_filter_are_never_shown() -> None:
    documents = [*MANUAL[:3], FakeDocument("manual__chunk_3", "Manual", "Step 3.", source="hidden")]
    search = FakeSearch(documents, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("step 2", limit=1)),
            turn("", read_call("manual__chunk_2", neighbours=2)),
            turn("", answer_call("Done.")),
        ]
    )
    only_docs = caller_filter([("source", "equals", "docs")])
    await run_events(AgentLoop(model, search), mode=Mode.THINKING, caller_filter=only_docs)

    text = _tool_texts(model, 2)[1][1]
    assert text.startswith("Read manual: chunks 0-2 of 3.")
    assert "manual__chunk_3" not in text
    assert search.reads[0].caller_filter == only_docs


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"result_id": "manual__chunk_9"}', "is not a result you have seen"),
        ('{"result_id": "manual__chunk_0", "neighbours": 50}', "neighbours: Input should be"),
        ('{"result_id": "manual__chunk_0", "scope": "all"}', "scope: Input should be"),
        ('{"id": "manual__chunk_0"}', "result_id: Field required"),
        ("not json", "not valid JSON"),
    ],
)
async def test_bad_reads_go_back_to_the_model_as_tool_errors_and_emit_their_event_with_it(
    arguments: str, expected: str
) -> None:
    search = FakeSearch(MANUAL, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("step 0", limit=1)),
            turn("", raw_call("read", arguments, call_id="bad")),
            turn("", answer_call("Done.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(call_id, text, is_error)] = _tool_texts(model, 2)[1:]
    assert (call_id, is_error) == ("bad", True)
    assert expected in text
    assert search.reads == []
    [reading] = [e for e in events if isinstance(e, Reading)]
    assert reading.error == text
    assert reading.chunks_shown == 0


class _DeletedAfterSearch(FakeSearch):
    """A search tool whose documents are deleted right after a search answers."""

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        page = await super().search(request, remaining_s=remaining_s)
        self.documents.clear()
        return page


async def test_a_document_gone_since_the_search_is_a_tool_error_not_the_end_of_the_run() -> None:
    search = _DeletedAfterSearch(MANUAL, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("step 1", limit=1)),
            turn("", read_call("manual__chunk_1", call_id="r")),
            turn("", answer_call("Step 1 [1].", ["manual__chunk_1"])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [(_, text, is_error)] = _tool_texts(model, 2)[1:]
    assert is_error
    assert text == "The read failed: document 'manual' not found in collection 'python-docs'."
    assert result_of(events).stop_reason is StopReason.ANSWERED
