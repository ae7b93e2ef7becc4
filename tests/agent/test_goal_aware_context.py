"""Goal-aware context (seed 004 M5): while searching the model sees previews of long results; the
results it is about to cite are given in full before its answer counts, and the answer-only turn
gets the best previews in full. Fewer tokens, the same evidence when it matters."""

from __future__ import annotations

import json

from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role, total_chars
from services.agent.run import Mode, StopReason
from services.agent.testing import ScriptedModel, answer_call, read_call, search_call, turn
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeDocument, FakeSearch

LONG = [
    FakeDocument(
        f"doc{i}__chunk_0",
        f"Topic {i}",
        f"topic{i} guide. " + " ".join(f"detail{i}_{n}" for n in range(150)),
    )
    for i in range(10)
]


def _thinking_script(searches: int) -> ScriptedModel:
    turns = [turn(f"search {n}", search_call(f"topic{n} guide", limit=5)) for n in range(searches)]
    return ScriptedModel(
        [
            *turns,
            turn("", answer_call("Topic 0 [1].", ["doc0__chunk_0"])),
            turn("", answer_call("Topic 0, checked [1].", ["doc0__chunk_0"])),
        ]
    )


async def test_results_are_previews_while_searching_and_cited_ones_come_in_full_once() -> None:
    model = _thinking_script(2)
    events = await run_events(
        AgentLoop(model, FakeSearch(LONG, collection="python-docs")), mode=Mode.THINKING
    )

    first_results = next(m for m in model.requests[1].messages if m.role is Role.TOOL).text
    assert "… [preview: " in first_results
    assert "detail0_149" not in first_results
    given = [m for m in model.requests[3].messages if m.role is Role.TOOL][-1]
    assert not given.is_error
    assert given.text.startswith("Full text of the results you are about to cite")
    assert "### [doc0__chunk_0] Topic 0" in given.text
    assert "detail0_149" in given.text
    result = result_of(events)
    assert result.answer.text == "Topic 0, checked [1]."
    assert result.stop_reason is StopReason.ANSWERED


async def test_the_answer_only_turn_gets_the_best_previews_in_full() -> None:
    model = ScriptedModel(
        [
            turn("", search_call("topic3 guide", limit=3)),
            turn("", answer_call("Topic 3 [1].", ["doc3__chunk_0"])),
        ]
    )
    await run_events(AgentLoop(model, FakeSearch(LONG, collection="python-docs")), mode=Mode.FAST)

    final = model.requests[1].messages
    full = [m for m in final if m.role is Role.USER and m.text.startswith("Full text")]
    assert len(full) == 1
    assert "detail3_149" in full[0].text
    assert [t.name for t in model.requests[1].callable_tools] == ["submit_answer"]


async def test_a_scripted_thinking_run_sends_far_fewer_characters_with_previews() -> None:
    sent = {}
    for preview_chars in (0, 500):
        model = _thinking_script(4)
        loop = AgentLoop(
            model,
            FakeSearch(LONG, collection="python-docs"),
            settings=LoopSettings(preview_chars=preview_chars),
        )
        result = result_of(await run_events(loop, mode=Mode.THINKING))
        assert result.answer.citations[0].result_id == "doc0__chunk_0"
        sent[preview_chars] = sum(total_chars(r.messages) for r in model.requests)
    assert sent[500] < 0.8 * sent[0]


async def test_a_result_read_in_full_is_cited_without_another_full_text_round() -> None:
    model = ScriptedModel(
        [
            turn("", search_call("topic0 guide", limit=3)),
            turn("", read_call("doc0__chunk_0", neighbours=0)),
            turn("", answer_call("Topic 0 [1].", ["doc0__chunk_0"])),
        ]
    )
    events = await run_events(
        AgentLoop(model, FakeSearch(LONG, collection="python-docs")), mode=Mode.THINKING
    )

    result = result_of(events)
    assert len(model.requests) == 3  # no fourth call to hand over a text already read
    assert result.answer.text == "Topic 0 [1]."
    assert result.stop_reason is StopReason.ANSWERED
    last_results = [m for m in model.requests[2].messages if m.role is Role.TOOL]
    assert not any(m.text.startswith("Full text of the results") for m in last_results)


async def test_the_answer_only_turn_gets_full_texts_only_as_far_as_the_window_has_room() -> None:
    """A small window (a local model's): the best previews come in full only as far as the
    answer-only request still fits the window with room for the answer, so the gateway does not
    skip the model for the next provider of the route (seen with a 4,096-token local model: 4 of
    14 runs answered by the fallback)."""
    window = 4_096
    model = ScriptedModel(
        [
            turn("", search_call("topic guide", limit=10)),
            turn("", answer_call("Topic 3 [1].", ["doc3__chunk_0"])),
        ]
    )
    loop = AgentLoop(
        model,
        FakeSearch(LONG, collection="python-docs"),
        context_window_tokens=window,
        settings=LoopSettings(tool_result_share=0.3),
    )
    result = result_of(await run_events(loop, mode=Mode.FAST))

    final = model.requests[1]
    assert [t.name for t in final.callable_tools] == ["submit_answer"]
    sent = total_chars(final.messages) + sum(
        len(json.dumps(t.parameters)) for t in final.callable_tools
    )
    assert sent <= (window - 500) * 4
    full = [m for m in final.messages if m.role is Role.USER and m.text.startswith("Full text")]
    assert len(full) <= 1
    assert all("### [" in m.text for m in full)  # never an empty "full text" message
    assert result.stop_reason is StopReason.ANSWERED
