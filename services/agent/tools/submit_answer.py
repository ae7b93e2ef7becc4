"""The `submit_answer` tool: the final answer with its citations. Always offered; the loop's
answer acceptance (`acceptance.py`) checks the citations and may send the answer back once."""

from __future__ import annotations

from pydantic import BaseModel, Field

from services.agent.messages import ToolCall
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolOutcome,
    parse_arguments,
)

SUBMIT_ANSWER = "submit_answer"


class CitationRef(BaseModel):
    """One source the answer relies on."""

    result_id: str = Field(
        min_length=1, description="Id of a search result you saw, e.g. doc-7__chunk_0."
    )


class Answer(BaseModel):
    """Arguments of the `submit_answer` tool."""

    text: str = Field(min_length=1, description="The answer; cite sources as [1], [2], ...")
    citations: list[CitationRef] = Field(
        default_factory=list,
        description="The results the answer relies on, in the order of their [n] markers.",
    )
    confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="How sure you are that the results fully answer the question, from 0 to 1.",
    )
    unanswered: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Parts of the question the results do not answer (empty when none).",
    )


class SubmitAnswerTool(Tool):
    position = 10
    name = SUBMIT_ANSWER
    description = (
        "Submit the final answer with citations. Call this when you have enough information to "
        "answer the user's query, or when further searching would not improve it."
    )
    arguments = Answer
    prompt_line = (
        "- `submit_answer`: submit your final answer with citations. Calling it ends the "
        "conversation."
    )
    offer = "always"
    answers = True

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """The validated answer for the loop's acceptance, or the tool error naming the field."""
        try:
            answer = parse_arguments(Answer, call.arguments_json)
        except ToolArgumentsError as error:
            return context.failed(call, str(error))
        return ToolOutcome(call, "", arguments=answer.model_dump_json(), answer=answer, ran=True)


TOOL = SubmitAnswerTool()
"""This module's tool, found by the registry."""
