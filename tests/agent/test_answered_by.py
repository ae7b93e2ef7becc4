"""Transparency: every thinking event and the final response say which provider and model
answered, and whether (and why) the gateway fell back to them."""

from __future__ import annotations

from quarry.agent.v1 import agent_pb2
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw

from quarry_cli.cli import answered_by_line
from services.agent import convert
from services.agent.events import Done, Thinking
from services.agent.gateway_client import fallback_reason
from services.agent.loop import AgentLoop
from services.agent.ports import ModelResponse
from services.agent.records import AnsweredBy
from services.agent.run import Mode
from services.agent.testing import ScriptedModel, answer_call, search_call
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"


def _attempt(provider: str, outcome: int, error: str = "") -> gw.Attempt:
    return gw.Attempt(provider=provider, model="m", outcome=outcome, error=error)  # type: ignore[arg-type]


def test_the_first_provider_answering_is_no_fallback() -> None:
    reply = gw.GenerateResponse(
        provider="openai/gpt", attempts=[_attempt("openai/gpt", gw.ATTEMPT_OUTCOME_SUCCESS)]
    )
    assert fallback_reason(reply) == ""


def test_a_later_provider_answering_names_each_provider_passed_over_and_why() -> None:
    reply = gw.GenerateResponse(
        provider="extractive",
        attempts=[
            _attempt(
                "openai/gpt", gw.ATTEMPT_OUTCOME_RETRYABLE_ERROR, "APIConnectionError: refused"
            ),
            _attempt("anthropic/claude", gw.ATTEMPT_OUTCOME_SKIPPED_BREAKER_OPEN),
            _attempt("extractive", gw.ATTEMPT_OUTCOME_SUCCESS),
        ],
    )
    assert fallback_reason(reply) == (
        "openai/gpt: retryable error: APIConnectionError: refused; "
        "anthropic/claude: skipped, circuit breaker open"
    )


def test_a_retry_of_the_same_provider_is_not_a_fallback() -> None:
    reply = gw.GenerateResponse(
        provider="openai/gpt",
        attempts=[
            _attempt("openai/gpt", gw.ATTEMPT_OUTCOME_RETRYABLE_ERROR, "429"),
            _attempt("openai/gpt", gw.ATTEMPT_OUTCOME_SUCCESS),
        ],
    )
    assert fallback_reason(reply) == ""


async def test_thinking_events_and_the_result_carry_the_answering_provider(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            ModelResponse(
                "Search first.", (search_call("tempfile"),), provider="openai/gpt", model="gpt"
            ),
            ModelResponse(
                "Answering.",
                (answer_call("x [1]", [TEMP]),),
                provider="extractive",
                model="extractive",
                fallback_reason="openai/gpt: retryable error: timeout",
            ),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    thinking = [e.answered_by for e in events if isinstance(e, Thinking)]
    assert thinking == [
        AnsweredBy("openai/gpt", "gpt"),
        AnsweredBy("extractive", "extractive", "openai/gpt: retryable error: timeout"),
    ]
    result = result_of(events)
    assert result.answered_by == thinking[-1]
    wire = convert.run_response(result).answered_by
    assert (wire.provider, wire.fallback) == ("extractive", True)
    assert wire.fallback_reason == "openai/gpt: retryable error: timeout"
    done = convert.event_message(events[-1])
    assert isinstance(events[-1], Done)
    assert done.done.response.answered_by.provider == "extractive"
    first = convert.event_message(events[1]).thinking.answered_by
    assert (first.provider, first.model, first.fallback) == ("openai/gpt", "gpt", False)


def test_quarry_ask_shows_the_provider_and_the_fallback_in_one_line() -> None:
    plain = _answered_by("openai/gpt", "gpt", "")
    assert answered_by_line(plain) == "answered by openai/gpt (gpt)"
    fell_back = _answered_by("extractive", "extractive", "openai/gpt: retryable error: x")
    assert answered_by_line(fell_back) == (
        "answered by extractive (extractive) · fallback after openai/gpt: retryable error: x"
    )


def _answered_by(provider: str, model: str, reason: str) -> agent_pb2.AnsweredBy:
    return agent_pb2.AnsweredBy(
        provider=provider, model=model, fallback=bool(reason), fallback_reason=reason
    )
