"""The `count` tool: documents matching a filter, with breakdowns (search tool `CountDocuments`)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from services.agent.filters import FilterGroup
from services.agent.messages import ToolCall
from services.agent.search import CountRequest, DocumentCount
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    filter_wire,
    parse_arguments,
)
from services.common.errors import QuarryError

COUNT = "count"
COUNT_SHAPED = re.compile(r"\b(how many|number of|count)\b", re.IGNORECASE)
"""A question the step-0 router answers with a count (by source) rather than a search."""


class CountPlan(BaseModel):
    """Arguments of the `count` tool."""

    filter_groups: list[FilterGroup] = Field(
        default_factory=list,
        description="What to count, as in `search` (combined with the caller's filter). Empty: "
        "the whole collection.",
    )
    group_by: list[str] = Field(
        default_factory=list,
        max_length=3,
        description="Break the count down by up to 3 fields: source, entity_type, title, "
        "metadata.<key>, or created_at / updated_at (a date histogram).",
    )
    date_interval: Literal["year", "month", "day"] = Field(
        default="month", description="Bucket width of a created_at / updated_at breakdown."
    )
    max_buckets: int = Field(default=20, ge=1, le=100, description="Values listed per breakdown.")


@dataclass(frozen=True)
class Counting(ToolEvent):
    """A `count` call, as executed."""

    WIRE_FIELD: ClassVar[str] = "counting"

    iteration: int
    """Searches done before the call."""
    filter_groups: tuple[FilterGroup, ...]
    """The model's filter (applied within the caller's)."""
    group_by: tuple[str, ...]
    document_count: int
    exact: bool
    duration_ms: int
    error: str = ""
    """Why the count did not run or failed (the tool error the model read)."""

    def wire(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "filter": filter_wire(self.filter_groups),
            "group_by": list(self.group_by),
            "document_count": self.document_count,
            "exact": self.exact,
            "duration_ms": self.duration_ms,
            "error": self.error,
        }


class CountTool(Tool):
    position = 30
    name = COUNT
    description = (
        "Count the documents matching a filter, optionally broken down by source, entity type, "
        "a metadata key or a date histogram. Use it for how-many / which-sources / over-time "
        "questions instead of counting search results."
    )
    arguments = CountPlan
    prompt_line = (
        "- `count`: count the documents matching a filter, with breakdowns by source, entity "
        "type, a metadata key or date."
    )

    def route(self, question: str, limit: int) -> str | None:
        return json.dumps({"group_by": ["source"]}) if COUNT_SHAPED.search(question) else None

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        try:
            plan = parse_arguments(CountPlan, call.arguments_json)
        except ToolArgumentsError as error:
            invalid = Counting(
                context.iteration, (), (), 0, False, 0, error=str(error), step=context.step
            )
            return context.failed(call, str(error), invalid)
        request = CountRequest(
            collection=context.request.collection,
            filter_groups=tuple(plan.filter_groups),
            caller_filter=context.request.caller_filter,
            group_by=tuple(plan.group_by),
            date_interval=plan.date_interval,
            max_buckets=plan.max_buckets,
        )
        started = time.perf_counter()
        try:
            count = await context.search.count_documents(
                request, remaining_s=context.deadline.remaining()
            )
        except QuarryError as error:

            def refused(text: str) -> Counting:
                elapsed = int((time.perf_counter() - started) * 1000)
                return Counting(
                    context.iteration,
                    request.filter_groups,
                    request.group_by,
                    0,
                    False,
                    elapsed,
                    error=text,
                    step=context.step,
                )

            return context.search_tool_error(call, error, "count", refused)
        duration_ms = int((time.perf_counter() - started) * 1000)
        event = Counting(
            iteration=context.iteration,
            filter_groups=request.filter_groups,
            group_by=request.group_by,
            document_count=count.document_count,
            exact=count.exact,
            duration_ms=duration_ms,
            step=context.step,
        )
        return ToolOutcome(
            call,
            format_count(count),
            event=event,
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=count.document_count,
            ran=True,
        )


def format_count(count: DocumentCount) -> str:
    """A count as the model sees it: totals, then each breakdown's `value: documents` lines."""
    bound = "" if count.exact else " at least"
    lines = [
        f"Counted{bound} {count.document_count} documents ({count.chunk_count} chunks) "
        "matching the filter."
    ]
    if not count.exact:
        lines.append("The count stopped early: these numbers are lower bounds.")
    for breakdown in count.breakdowns:
        lines.append(f"\n### Documents by {breakdown.field}")
        lines += [f"{f.value}: {f.count}" for f in breakdown.buckets]
        if breakdown.omitted:
            lines.append(f"({breakdown.omitted} more values not listed)")
    return "\n".join(lines) + "\n"


TOOL = CountTool()
"""This module's tool, found by the registry."""
