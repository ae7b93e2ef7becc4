"""The opt-in `ask_user` tool: a clarifying question to the caller, answered within two windows
(`questions.py`). Offered on a stream only, when the request names it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from services.agent.messages import ToolCall
from services.agent.questions import ClosedQuestion, QuestionChannel, QuestionOutcome
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
)
from services.common.errors import DeadlineExceeded

log = logging.getLogger(__name__)

DEADLINE_MARGIN_S = 0.05
"""Less of the run's deadline than this left after a question's wait: the run has ended."""

ASK_USER = "ask_user"
MAX_QUESTION_CHARS = 500
NO_ANSWER = "No answer: the caller did not respond"


class UserQuestion(BaseModel):
    """Arguments of the `ask_user` tool."""

    question: str = Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="One short, specific question for the person who asked, e.g. which version "
        "or which meaning of a term they mean.",
    )


@dataclass(frozen=True)
class Question(ToolEvent):
    """The model asks the caller (`ask_user`); the run waits in two phases for the answer."""

    WIRE_FIELD: ClassVar[str] = "question"

    iteration: int
    """Searches done before the question."""
    run_id: str
    question_id: str
    text: str
    acknowledge_within_ms: int
    answer_within_ms: int
    """After an acknowledgement; 0: until the run's deadline."""

    def wire(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "question_id": self.question_id,
            "text": self.text,
            "iteration": self.iteration,
            "acknowledge_within_ms": self.acknowledge_within_ms,
            "answer_within_ms": self.answer_within_ms,
        }


_OUTCOMES = {
    QuestionOutcome.ANSWERED: "QUESTION_OUTCOME_ANSWERED",
    QuestionOutcome.NOT_ACKNOWLEDGED: "QUESTION_OUTCOME_NOT_ACKNOWLEDGED",
    QuestionOutcome.NOT_ANSWERED: "QUESTION_OUTCOME_NOT_ANSWERED",
}


@dataclass(frozen=True)
class QuestionClosed(ToolEvent):
    """A question ended and the run goes on; the model got the answer or "no answer"."""

    WIRE_FIELD: ClassVar[str] = "question_closed"

    question_id: str
    outcome: QuestionOutcome
    answer: str
    waited_ms: int

    def wire(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "outcome": _OUTCOMES[self.outcome],
            "answer": self.answer,
            "waited_ms": self.waited_ms,
        }


class AskUserTool(Tool):
    position = 10
    name = ASK_USER
    description = (
        "Ask the person who asked a clarifying question and wait for the answer. Use it only "
        "when the question is ambiguous in a way the collection cannot settle; the person may "
        "not answer."
    )
    arguments = UserQuestion
    prompt_line = (
        "- `ask_user`: ask the person who asked a clarifying question; they may not answer."
    )
    offer = "opt_in"
    needs_caller = True

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """The question posted to the caller, its event streamed, then (`then`) the wait for
        the answer within the run's deadline; or the tool error when it cannot be asked."""
        try:
            text = parse_arguments(UserQuestion, call.arguments_json).question
        except ToolArgumentsError as error:
            return _not_asked(call, context, "", str(error))
        channel = context.questions
        if channel is None:
            why = "The caller cannot be asked in this run: go on without it."
            return _not_asked(call, context, text, why)
        if channel.asked >= channel.max_questions:
            why = (
                f"You have asked {channel.asked} questions, the most a run may ask. "
                "Go on with the most likely reading of the question."
            )
            return _not_asked(call, context, text, why)
        acknowledge_s, answer_s = channel.acknowledge_window_s(), channel.answer_window_s()
        question_id = await channel.ask(text)
        event = Question(
            iteration=context.iteration,
            run_id=channel.run_id,
            question_id=question_id,
            text=text,
            acknowledge_within_ms=_ms(acknowledge_s),
            answer_within_ms=_ms(answer_s),
            step=context.step,
        )
        log.info("question asked", extra={**context.log_fields, "question_id": question_id})

        async def answer() -> ToolOutcome:
            return await _answer_of(call, channel, question_id, context)

        return ToolOutcome(call, "", event=event, then=answer)


async def _answer_of(
    call: ToolCall, channel: QuestionChannel, question_id: str, context: ToolContext
) -> ToolOutcome:
    """Wait (two phases, within the run's deadline) for the answer to a posted question. A
    wait that ran out with the run's deadline ends the run (DEADLINE_EXCEEDED) instead of
    handing the model a turn it has no time for: the timer may wake a moment before the
    deadline itself, and a fast model then answered after the caller had stopped waiting."""
    closed = await channel.wait(question_id)
    log.info(
        "question closed",
        extra={**context.log_fields, "question_id": question_id, "outcome": closed.outcome.value},
    )
    remaining = context.deadline.remaining()  # raises once no time is left
    answered = closed.outcome is QuestionOutcome.ANSWERED
    if not answered and remaining is not None and remaining < DEADLINE_MARGIN_S:
        raise DeadlineExceeded("the caller's deadline expired while waiting for an answer")
    event = QuestionClosed(
        closed.question_id, closed.outcome, closed.answer, closed.waited_ms, step=context.step
    )
    return ToolOutcome(call, _answer_text(closed), event=event, ran=True)


def _not_asked(call: ToolCall, context: ToolContext, text: str, why: str) -> ToolOutcome:
    """A question that cannot be asked: a tool error, and no event (a `question` event asks the
    caller for an answer; this one has nobody to answer)."""
    return context.failed(call, why)


def _ms(seconds: float) -> int:
    """Whole milliseconds; 0 for no limit."""
    return 0 if seconds == float("inf") else int(seconds * 1000)


def _answer_text(closed: ClosedQuestion) -> str:
    """The tool result of a question: the answer, or why there is none."""
    if closed.outcome is QuestionOutcome.ANSWERED:
        return f"The caller answered: {closed.answer}"
    why = (
        "the question was not acknowledged in time"
        if closed.outcome is QuestionOutcome.NOT_ACKNOWLEDGED
        else "the question was seen but not answered in time"
    )
    return (
        f"{NO_ANSWER} ({why}). Go on with the most likely reading of the question and say in "
        "your answer which reading you assumed."
    )


TOOL = AskUserTool()
"""This module's tool, found by the registry."""
