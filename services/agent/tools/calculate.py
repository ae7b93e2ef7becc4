"""The `calculate` tool: exact arithmetic over numbers the model read (`calculator.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from services.agent.calculator import (
    FUNCTION_NAMES,
    MAX_EXPRESSION_CHARS,
    CalculationError,
    calculate,
    format_number,
)
from services.agent.messages import ToolCall
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
)

CALCULATE = "calculate"


class Calculation(BaseModel):
    """Arguments of the `calculate` tool."""

    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="Arithmetic over numbers you read, e.g. (1250 - 980) / 980 * 100. "
        "Operators + - * / // % ** and parentheses; functions " + ", ".join(FUNCTION_NAMES) + ".",
    )


@dataclass(frozen=True)
class Calculating(ToolEvent):
    """A `calculate` call, as evaluated (or refused)."""

    WIRE_FIELD: ClassVar[str] = "calculating"

    iteration: int
    """Searches done before the call."""
    expression: str
    result: str
    """The value shown to the model; empty when `error` is set."""
    error: str = ""

    def wire(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "expression": self.expression,
            "result": self.result,
            "error": self.error,
        }


class CalculateTool(Tool):
    position = 40
    name = CALCULATE
    description = (
        "Evaluate an arithmetic expression exactly (sums, differences, ratios, percentages) "
        "over numbers found in the results. Use it instead of computing in your head."
    )
    arguments = Calculation
    prompt_line = "- `calculate`: evaluate an arithmetic expression over numbers you read."

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        iteration = context.iteration
        try:
            expression = parse_arguments(Calculation, call.arguments_json).expression
        except ToolArgumentsError as error:
            refused = Calculating(
                iteration, call.arguments_json[:200], "", str(error), step=context.step
            )
            return context.failed(call, str(error), refused)
        try:
            value = format_number(calculate(expression))
        except CalculationError as error:
            text = f"The expression {expression!r} was refused: {error}. Fix it and call again."
            return context.failed(
                call, text, Calculating(iteration, expression, "", str(error), step=context.step)
            )
        return ToolOutcome(
            call,
            f"{expression} = {value}",
            event=Calculating(iteration, expression, value, step=context.step),
            arguments=Calculation(expression=expression).model_dump_json(),
            ran=True,
        )


TOOL = CalculateTool()
"""This module's tool, found by the registry."""
