"""The `submit_answer` tool: the final answer with its citations. Always offered; the loop's
answer acceptance (`acceptance.py`) checks the citations and may send the answer back once."""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, Field

from services.agent.messages import ToolCall
from services.agent.ports import ToolSpec
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolOutcome,
    parse_arguments,
)

SUBMIT_ANSWER = "submit_answer"


CITABLE_ID = "CitableResultId"
"""The definition holding the enum of citable ids: a named `$ref`, so a prompt that renders the
schema can name it and stay the same while the ids change (the gateway's `json_schema` mode)."""


def citable_schema(parameters: dict[str, Any], seen: Collection[str]) -> dict[str, Any]:
    """`submit_answer`'s parameters with `citations` required and limited to the ids in `seen`
    (in the order seen: the schema, and so a server's grammar, is stable while nothing new is
    seen); at least one citation once anything was seen, none before."""
    schema = copy.deepcopy(parameters)
    citations: dict[str, Any] = schema["properties"]["citations"]
    ids = list(dict.fromkeys(seen))
    item = _resolved(schema, citations["items"])
    result_id = {"$ref": f"#/$defs/{CITABLE_ID}"}
    citations["items"] = {**item, "properties": {**item["properties"], "result_id": result_id}}
    citations["maxItems"] = len(ids)
    definition = dict(item["properties"]["result_id"])
    if ids:  # before any result: no citation at all (an empty enum breaks grammar converters)
        definition = {k: v for k, v in definition.items() if k != "minLength"} | {"enum": ids}
        # Once results were seen an answer cites at least one: measured on Qwen2.5-Coder-1.5B,
        # a required but possibly empty list stayed empty in 3 of 3 correct answers.
        citations["minItems"] = 1
    schema.setdefault("$defs", {})[CITABLE_ID] = definition
    # Required, so a grammar makes the model write the list (it may stay empty): measured on
    # Qwen2.5-Coder-1.5B, an optional `citations` was left out of a correct answer.
    schema["required"] = list(dict.fromkeys([*schema.get("required", []), "citations"]))
    return schema


def _resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` itself, or the local definition its `$ref` names."""
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    target: Any = schema
    for part in ref[2:].split("/"):
        target = target[part]
    resolved: dict[str, Any] = target
    return resolved


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

    def spec_for(self, seen: Collection[str]) -> ToolSpec:
        """Where the route holds tools to their schemas: `citations[].result_id` is an enum of
        the ids seen so far (rebuilt every turn), so a constrained model cannot cite what it has
        not seen; before any result, `citations` must be empty."""
        return ToolSpec(self.name, self.description, citable_schema(self.spec.parameters, seen))

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """The validated answer for the loop's acceptance, or the tool error naming the field."""
        try:
            answer = parse_arguments(Answer, call.arguments_json)
        except ToolArgumentsError as error:
            return context.failed(call, str(error))
        return ToolOutcome(call, "", arguments=answer.model_dump_json(), answer=answer, ran=True)


TOOL = SubmitAnswerTool()
"""This module's tool, found by the registry."""
