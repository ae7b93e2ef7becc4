"""The behaviours a real model hits at the edges of a run (issue 26): a plain-text turn is an
answer, an invalid final submission is retried once, the fallback never claims a search it did not
make, the first turn without a usable call is routed (seed 003), and the token budget keeps the
final call inside it."""

from __future__ import annotations

from services.agent.loop import AgentLoop
from services.agent.messages import Role, estimate_tokens
from services.agent.ports import ModelRequest, ModelResponse, TokenUsage
from services.agent.run import Mode, StopReason
from services.agent.testing import (
    FunctionModel,
    ScriptedModel,
    answer_call,
    raw_call,
    search_call,
    search_then_answer,
    turn,
)
from services.agent.tools import Counting, Searching
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"


async def test_a_plain_text_final_turn_is_the_answer_with_its_id_markers_as_citations(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn(f"Use TemporaryDirectory [{TEMP}]; never [unseen__chunk_3]."),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.FAST))

    assert result.answer.text == "Use TemporaryDirectory [1]; never ."
    assert [c.result_id for c in result.answer.citations] == [TEMP]
    assert result.stop_reason is StopReason.ANSWERED  # FAST: the one search was the plan
    assert "no relevant results" not in result.answer.text


async def test_a_plain_text_answer_with_unverifiable_number_markers_drops_them(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("Use TemporaryDirectory [1]."),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.FAST))
    assert result.answer.text == "Use TemporaryDirectory."
    assert result.answer.citations == ()


async def test_an_invalid_submission_in_the_answer_only_call_is_retried_once(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", raw_call("submit_answer", '{"text": ""}')),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.FAST))

    assert len(model.requests) == 3
    retry = [m for m in model.requests[2].messages if m.role is Role.TOOL][-1]
    assert retry.is_error
    assert "text" in retry.text
    assert result.answer.text == "Use TemporaryDirectory [1]."
    assert result.stop_reason is StopReason.ANSWERED


async def test_the_fallback_never_claims_a_search_it_did_not_make(search: FakeSearch) -> None:
    model = ScriptedModel([turn(""), turn(""), turn("")])
    result = result_of(
        await run_events(
            AgentLoop(model, search),
            mode=Mode.THINKING,
            allowed_tools=frozenset({"calculate"}),  # nothing the router could run
        )
    )
    assert search.requests == []
    assert result.stop_reason is StopReason.FALLBACK_ANSWER
    assert "no search was run" in result.answer.text
    assert "no relevant results were found" not in result.answer.text


async def test_a_first_turn_without_a_tool_call_searches_with_the_question(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("I will look into it."),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    [searching] = [e for e in events if isinstance(e, Searching)]
    assert (searching.primary, searching.error) == ("temporary directory", "")
    routed = model.requests[1].messages[-1]
    assert routed.role is Role.USER
    assert routed.text.startswith("You made no tool call, so the agent ran `search`")
    result = result_of(events)
    assert result.answer.text == "Use TemporaryDirectory [1]."  # the routed results are citable
    assert result.iterations == 1
    assert [c.call_id for c in result.steps[0].tool_calls] == ["router-search"]


async def test_a_count_shaped_first_question_without_a_call_is_counted(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("Hmm."), turn("", answer_call("Three documents."))])
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, query="How many documents are there?"
    )

    [counting] = [e for e in events if isinstance(e, Counting)]
    assert counting.group_by == ("source",)
    assert (counting.document_count, counting.iteration) == (3, 0)
    assert search.requests == []
    assert result_of(events).answer.text == "Three documents."


def _honest(rule: object) -> FunctionModel:
    """A rule-based model that reports the input tokens the agent itself estimates."""

    def respond(request: ModelRequest) -> ModelResponse:
        reply = rule(request)  # type: ignore[operator]
        chars = sum(m.chars for m in request.messages) + sum(
            len(str(t.parameters)) + len(t.description) for t in request.callable_tools
        )
        return ModelResponse(
            text=reply.text,
            tool_calls=reply.tool_calls,
            usage=TokenUsage(input_tokens=estimate_tokens(chars), output_tokens=20),
        )

    return FunctionModel(respond)


async def test_the_final_answer_call_stays_inside_the_token_budget(search: FakeSearch) -> None:
    for budget in (9_000, 12_000, 16_000, 20_000):
        model = _honest(search_then_answer(searches=8))
        result = result_of(
            await run_events(AgentLoop(model, search), mode=Mode.THINKING, max_tokens=budget)
        )
        spent = result.usage.input_tokens + result.usage.output_tokens
        assert spent <= budget, (budget, spent)
        assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
        assert result.answer.text == "The answer [1]."  # the model still answered
