"""The opt-in `summarize` tool: seen results condensed through the gateway, citations checked.

The model names result ids it has seen and a focus. The agent sends the full texts of those
results (whole, in the order named, until `loop.summarize_max_chars`; what does not fit is left
out and named) to the gateway's `GenerateStructured` with the schema of `Summary` and
`schema_name` `summary` (docs/agent-tool-contract.md; the offline `extractive` provider answers
it with the sentences closest to the focus). Every id the summary cites is checked against the
results sent: unknown ids are dropped and named. The summary is shown in place of the full texts:
earlier tool results keep each summarised result's `### [id] title` line (still citable) with its
text replaced by a pointer to the summary (`ToolOutcome.condensed`, applied by the loop through
`context.condense_results`), and `read` still gives the full text. The summary's
tokens count in the run's budget and usage, and the call is recorded in its step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import BaseModel, Field, ValidationError

from services.agent.messages import ToolCall, system, user
from services.agent.ports import ContextWindowExceeded, StructuredRequest, StructuredResponse
from services.agent.search import SearchHit, keyword_language_line
from services.agent.tools.base import (
    FAILURES_THAT_END_THE_RUN,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
    tool_schema,
)
from services.common.errors import QuarryError

SUMMARIZE = "summarize"
SUMMARY_SCHEMA_NAME = "summary"
"""GenerateStructured's `schema_name`: the contract the gateway's extractive provider knows."""
MAX_SUMMARIZE_IDS = 20
MAX_FOCUS_CHARS = 300
CUT_MARK = " … [cut: the summary's input bound]"

DESCRIPTION = (
    "Condense results you have already seen into a short summary focused on what you need, so "
    "many long results take little room. Name the result ids and the focus; the summary cites "
    "the ids it draws on. Cite the original result ids in your answer (never the summary); "
    "`read` still gives a result's full text."
)
SYSTEM_PROMPT = (
    "You condense search results for a research assistant. Answer only from the results "
    "given; write short points, each citing the result ids (as given in `### [id]`) it draws "
    "on. Leave out what does not concern the focus. Never cite an id that is not given."
)


class SummarizePlan(BaseModel):
    """Arguments of the `summarize` tool."""

    result_ids: list[str] = Field(
        min_length=1,
        max_length=MAX_SUMMARIZE_IDS,
        description="Ids of results you have seen (the id in `### [result_id] title`).",
    )
    focus: str = Field(
        min_length=1,
        max_length=MAX_FOCUS_CHARS,
        description="What the summary is for: the part of the question these results answer.",
    )


class SummaryPoint(BaseModel):
    """One point of a summary."""

    text: str = Field(min_length=1, max_length=2_000)
    result_ids: list[str] = Field(default_factory=list, max_length=MAX_SUMMARIZE_IDS)


class Summary(BaseModel):
    """What the gateway returns (its JSON schema is the GenerateStructured schema)."""

    summary: str = Field(max_length=8_000)
    points: list[SummaryPoint] = Field(default_factory=list, max_length=MAX_SUMMARIZE_IDS)


@dataclass(frozen=True)
class SummaryInput:
    """The user message sent to the gateway and what it holds."""

    text: str
    included: tuple[SearchHit, ...]
    """The results sent, in the order named."""
    left_out: tuple[str, ...]
    """Ids named but not sent: the input bound was reached."""
    chars: int
    """Characters of result text sent."""


def summary_input(
    focus: str, hits: Sequence[SearchHit], *, max_chars: int, keyword_language: str = ""
) -> SummaryInput:
    """`## Focus`, `## Collection` (the collection's keyword language, unless English) and
    `## Results` (the results' full texts, whole, until `max_chars`; the first result is cut to
    the bound rather than sent with nothing)."""
    blocks: list[str] = []
    used = 0
    for hit in hits:
        text = hit.text
        room = max_chars - used - len(_block(hit, ""))
        if len(text) > room:
            if blocks:
                break
            text = text[: max(room - len(CUT_MARK), 0)].rsplit(" ", 1)[0] + CUT_MARK
        blocks.append(_block(hit, text))
        used += len(blocks[-1])
    included = tuple(hits[: len(blocks)])
    left_out = tuple(h.id for h in hits[len(blocks) :])
    language = keyword_language_line(keyword_language)
    collection = f"## Collection\n{language}\n\n" if language else ""
    message = f"## Focus\n{focus}\n\n{collection}## Results\n" + "".join(blocks)
    return SummaryInput(message, included, left_out, used)


def _block(hit: SearchHit, text: str) -> str:
    meta = f"source: {hit.source} | entity_type: {hit.entity_type} | url: {hit.url}"
    return f"### [{hit.id}] {hit.title}\n{meta}\n{text}\n\n"


@dataclass(frozen=True)
class CheckedSummary:
    summary: str
    points: tuple[SummaryPoint, ...]
    """Each point's ids restricted to the results sent (first occurrence order)."""
    cited: tuple[str, ...]
    """Every id the checked points cite, in order."""
    unknown: tuple[str, ...]
    """Ids the summary cited that were not sent: dropped."""


def check_summary(summary: Summary, sent: Sequence[str]) -> CheckedSummary:
    """Keep only citations of results that were sent; name the others."""
    allowed = set(sent)
    points: list[SummaryPoint] = []
    cited: list[str] = []
    unknown: list[str] = []
    for point in summary.points:
        ids = list(dict.fromkeys(i for i in point.result_ids if i in allowed))
        unknown += [i for i in point.result_ids if i not in allowed and i not in unknown]
        cited += [i for i in ids if i not in cited]
        points.append(SummaryPoint(text=point.text, result_ids=ids))
    return CheckedSummary(summary.summary, tuple(points), tuple(cited), tuple(unknown))


def format_summary(
    checked: CheckedSummary, focus: str, included: Sequence[str], left_out: Sequence[str]
) -> str:
    """The tool result the model reads."""
    lines = [f"Summary of {len(included)} results (focus: {focus}):", checked.summary.strip()]
    if checked.points:
        lines.append("")
        for point in checked.points:
            ids = f" [{', '.join(point.result_ids)}]" if point.result_ids else " [no source]"
            lines.append(f"- {point.text.strip()}{ids}")
    if checked.unknown:
        dropped = ", ".join(checked.unknown)
        lines.append(f"\nIgnored citations of results that were not summarised: {dropped}.")
    if left_out:
        lines.append(
            f"\nNot summarised (the input bound was reached): {', '.join(left_out)}. Summarise "
            "them in another call if you need them."
        )
    lines.append(
        "\nThe summarised results' texts are replaced by this summary above; cite the result "
        "ids, and `read` a result for its full text."
    )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Summarizing(ToolEvent):
    """A `summarize` call, as executed (or refused)."""

    WIRE_FIELD: ClassVar[str] = "summarizing"

    iteration: int
    """Searches done before the call."""
    result_ids: tuple[str, ...]
    focus: str
    point_count: int = 0
    cited_ids: tuple[str, ...] = ()
    input_chars: int = 0
    duration_ms: int = 0
    error: str = ""

    def wire(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "result_ids": list(self.result_ids),
            "focus": self.focus,
            "point_count": self.point_count,
            "cited_ids": list(self.cited_ids),
            "input_chars": self.input_chars,
            "duration_ms": self.duration_ms,
            "error": self.error,
        }


class SummarizeTool(Tool):
    position = 30
    name = SUMMARIZE
    description = DESCRIPTION
    arguments = SummarizePlan
    prompt_line = (
        "- `summarize`: condense results you have seen into a short summary focused on what you "
        "need; it replaces their full texts in the conversation (`read` still gives them)."
    )
    offer = "opt_in"

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        iteration = context.iteration
        try:
            plan = parse_arguments(SummarizePlan, call.arguments_json)
        except ToolArgumentsError as error:
            return context.failed(
                call,
                str(error),
                Summarizing(iteration, (), "", error=str(error), step=context.step),
            )
        named = tuple(dict.fromkeys(plan.result_ids))
        unseen = [i for i in named if i not in context.seen]
        if unseen:
            text = (
                f"Not results you have seen in this conversation: {', '.join(unseen)}. "
                "Summarise only ids shown in results (`### [result_id] title`)."
            )
            return context.failed(
                call, text, Summarizing(iteration, named, plan.focus, error=text, step=context.step)
            )
        sent = summary_input(
            plan.focus,
            [context.seen[i] for i in named],
            max_chars=context.settings.summarize_max_chars,
            keyword_language=context.keyword_language,
        )
        request = StructuredRequest(
            route=context.settings.summarize_route or context.route,
            messages=(system(SYSTEM_PROMPT), user(sent.text)),
            schema=tool_schema(Summary),
            schema_name=SUMMARY_SCHEMA_NAME,
        )
        started = time.perf_counter()
        try:
            response = await context.model.generate_structured(
                request, remaining_s=context.deadline.remaining()
            )
        except ContextWindowExceeded:
            text = "The results are too long for the model to summarise at once: name fewer ids."
            event = Summarizing(iteration, named, plan.focus, error=text, step=context.step)
            return context.failed(call, text, event)
        except FAILURES_THAT_END_THE_RUN:
            raise
        except QuarryError as error:
            text = f"The summary failed: {error.message}. Go on without it."
            event = Summarizing(iteration, named, plan.focus, error=text, step=context.step)
            return context.failed(call, text, event)
        duration_ms = int((time.perf_counter() - started) * 1000)
        return self._summarised(call, context, plan, sent, response, duration_ms)

    @staticmethod
    def _summarised(
        call: ToolCall,
        context: ToolContext,
        plan: SummarizePlan,
        sent: SummaryInput,
        response: StructuredResponse,
        duration_ms: int,
    ) -> ToolOutcome:
        named = tuple(dict.fromkeys(plan.result_ids))
        included = [h.id for h in sent.included]
        try:
            summary = Summary.model_validate_json(response.json_text)
        except ValidationError as error:
            text = (
                f"The summary could not be read ({error.error_count()} problems); go on without it."
            )
            event = Summarizing(context.iteration, named, plan.focus, error=text, step=context.step)
            failed = context.failed(call, text, event)
            return replace(failed, usage=response.usage, duration_ms=duration_ms)
        checked = check_summary(summary, included)
        event = Summarizing(
            iteration=context.iteration,
            result_ids=named,
            focus=plan.focus,
            point_count=len(checked.points),
            cited_ids=checked.cited,
            input_chars=sent.chars,
            duration_ms=duration_ms,
            step=context.step,
        )
        cited = {i: context.seen[i] for i in checked.cited}
        return ToolOutcome(
            call,
            format_summary(checked, plan.focus, included, sent.left_out),
            event=event,
            shown=tuple(cited.values()),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=len(included),
            ran=True,
            usage=response.usage,
            condensed=tuple(included),
        )


TOOL = SummarizeTool()
"""This module's tool, found by the registry."""
