"""Self-evaluation: `submit_answer` carries a confidence and the unanswered parts; in THINKING
mode a low confidence with budget left gets one bounded refinement round, never a loop."""

from __future__ import annotations

import json

from services.agent import convert
from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.run import Mode, StopReason
from services.agent.testing import ScriptedModel, raw_call, search_call, turn
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP, SHUTIL = "tempfile__chunk_0", "shutil__chunk_0"


def _answer(
    text: str, cited: list[str], confidence: float, unanswered: tuple[str, ...] = ()
) -> ToolCall:
    arguments = {
        "text": text,
        "citations": [{"result_id": c} for c in cited],
        "confidence": confidence,
        "unanswered": list(unanswered),
    }
    return raw_call("submit_answer", json.dumps(arguments), call_id=f"a{confidence}")


async def test_a_low_confidence_answer_gets_one_refinement_round_then_the_better_answer_stands(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", _answer("TemporaryDirectory [1].", [TEMP], 0.3, ("how to delete a tree",))),
            turn("Search the missing part.", search_call("delete directory tree")),
            turn("", _answer("TemporaryDirectory [1]; rmtree [2].", [TEMP, SHUTIL], 0.9)),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    sent_back = [m for m in model.requests[2].messages if m.role is Role.TOOL][-1]
    assert not sent_back.is_error
    assert sent_back.text.startswith(
        "Answer received with confidence 0.30; unanswered parts: how to delete a tree."
    )
    result = result_of(events)
    assert result.answer.text == "TemporaryDirectory [1]; rmtree [2]."
    assert (result.answer.confidence, result.answer.unanswered) == (0.9, ())
    assert result.usage.searches == 2
    assert result.stop_reason is StopReason.ANSWERED
    wire = convert.run_response(result).answer
    assert wire.HasField("confidence")
    assert wire.confidence == 0.9


async def test_a_second_low_confidence_answer_is_accepted_never_a_loop(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", _answer("First [1].", [TEMP], 0.2, ("part b",))),
            turn("", search_call("part b")),
            turn("", _answer("Still unsure [1].", [TEMP], 0.25, ("part b",))),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    result = result_of(events)
    assert result.answer.text == "Still unsure [1]."
    assert result.answer.unanswered == ("part b",)
    assert result.usage.model_calls == 4
    wire = convert.run_response(result).answer
    assert list(wire.unanswered_parts) == ["part b"]


async def test_the_refined_away_answer_stands_when_the_model_never_answers_again(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", _answer("Draft [1].", [TEMP], 0.1)),
            turn("I have nothing more."),
            turn("Still nothing."),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    assert result.answer.text == "Draft [1]."
    assert result.stop_reason is StopReason.ANSWERED


async def test_no_refinement_in_fast_mode_without_budget_or_when_turned_off(
    search: FakeSearch,
) -> None:
    def script() -> ScriptedModel:
        return ScriptedModel(
            [turn("", search_call("temporary")), turn("", _answer("Low [1].", [TEMP], 0.1))]
        )

    fast = script()
    assert result_of(await run_events(AgentLoop(fast, search), mode=Mode.FAST)).answer.text == (
        "Low [1]."
    )
    capped = script()
    one_search = await run_events(AgentLoop(capped, search), mode=Mode.THINKING, max_iterations=1)
    assert result_of(one_search).answer.text == "Low [1]."
    off = script()
    settings = LoopSettings(refinement_rounds=0)
    events = await run_events(AgentLoop(off, search, settings=settings), mode=Mode.THINKING)
    assert result_of(events).answer.confidence == 0.1
    assert len(off.requests) == 2
