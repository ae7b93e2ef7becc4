"""Tool execution: one model tool call (search, read, count, calculate, ask_user) run against the
search tool, the caller or locally, and what it produced.

An executor changes no state of the run: each call returns a `ToolOutcome` (the tool result for
the model, the event for the caller, the results it showed) that the loop applies. So several
searches of one turn can run at once, and every outcome is a record of what the call did.
Failures the run cannot continue after (the search tool unavailable, deadline, cancellation,
refused credentials, a bad caller filter) are raised; every other failure becomes a tool error
the model can act on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

from opentelemetry import trace

from services.agent.calculator import CalculationError, calculate, format_number
from services.agent.config import LoopSettings
from services.agent.events import (
    AgentEvent,
    Calculating,
    Counting,
    Question,
    QuestionClosed,
    Reading,
    Searching,
)
from services.agent.messages import ToolCall
from services.agent.ports import SearchClient
from services.agent.questions import ClosedQuestion, QuestionChannel, QuestionOutcome
from services.agent.run import Deadline, RunRequest
from services.agent.search import CountRequest, ReadRequest, SearchHit, SearchRequest
from services.agent.tools import (
    MAX_READ_CHUNKS,
    Calculation,
    CountPlan,
    ReadPlan,
    SearchPlan,
    ToolArgumentsError,
    UserQuestion,
    format_count,
    format_read,
    format_results,
    parse_arguments,
    result_budget_chars,
)
from services.common import semconv
from services.common.errors import (
    Cancelled,
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    PermissionDenied,
    QuarryError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

log = logging.getLogger(__name__)

SEARCH_FAILURES_THAT_END_THE_RUN = (
    Unavailable,
    DeadlineExceeded,
    ResourceExhausted,
    Cancelled,
    Unauthenticated,
    PermissionDenied,
)


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call produced."""

    call: ToolCall
    text: str
    """The tool result the model reads."""
    is_error: bool = False
    event: AgentEvent | None = None
    """What the caller is told; None when the call failed before it ran."""
    shown: tuple[SearchHit, ...] = ()
    """Results the model was shown (they become citable)."""
    previewed: tuple[SearchHit, ...] = ()
    """Results shown only as previews (goal-aware context)."""
    found: tuple[SearchHit, ...] = ()
    """Every result a search returned, shown or not (fills the caller's `limit`)."""
    arguments: str = ""
    """The validated arguments (JSON, defaults filled in); empty when they did not validate."""
    duration_ms: int = 0
    """Time spent in the search tool (0 for local or refused calls)."""
    total_count: int = 0
    """Search: matching results; read: chunks of the document; count: documents counted."""


class ToolExecutor:
    """Runs the tool calls of one run."""

    def __init__(
        self,
        *,
        search: SearchClient,
        settings: LoopSettings,
        tracer: trace.Tracer,
        request: RunRequest,
        deadline: Deadline,
        log_fields: Mapping[str, object],
    ) -> None:
        self.search_client = search
        self.settings = settings
        self.tracer = tracer
        self.request = request
        self.deadline = deadline
        self.log_fields = log_fields
        self.window = settings.default_context_window_tokens
        """The model's context window in tokens; the loop sets it once known."""
        self.step = 0
        """The step whose calls run now (the loop sets it); spans carry it."""

    @property
    def budget_chars(self) -> int:
        """Layer 1: the most characters one tool result may take."""
        return result_budget_chars(self.window, self.settings.tool_result_share)

    def span(self, call: ToolCall) -> AbstractContextManager[trace.Span]:
        return self.tracer.start_as_current_span(
            f"{semconv.EXECUTE_TOOL} {call.name}",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: call.name,
                semconv.GEN_AI_TOOL_CALL_ID: call.id,
                semconv.GEN_AI_TOOL_TYPE: "function",
                semconv.QUARRY_AGENT_STEP: self.step,
            },
        )

    def failed(self, call: ToolCall, text: str, event: AgentEvent | None = None) -> ToolOutcome:
        """A tool error for the model: logged, and marked on the current span."""
        log.info("tool error", extra={**self.log_fields, "tool": call.name, "error": text[:200]})
        trace.get_current_span().set_attribute(semconv.ERROR_TYPE, "tool_error")
        return ToolOutcome(call, text, is_error=True, event=event)

    def refused(self, call: ToolCall, text: str) -> ToolOutcome:
        """A call that may not run now, answered in its own span."""
        with self.span(call):
            return self.failed(call, text)

    async def search(self, call: ToolCall, iteration: int) -> ToolOutcome:
        """One search. It fetches at least the run's `limit` (the caller's results); the model is
        shown the `limit` it asked for."""
        with self.span(call):
            try:
                plan = parse_arguments(SearchPlan, call.arguments_json)
            except ToolArgumentsError as error:
                return self.failed(call, str(error))
            request = SearchRequest(
                collection=self.request.collection,
                primary=plan.query.primary,
                variations=tuple(plan.query.variations),
                strategy=plan.retrieval_strategy,
                filter_groups=tuple(plan.filter_groups),
                caller_filter=self.request.caller_filter,
                limit=max(plan.limit, self.request.limit),
                offset=plan.offset,
            )
            started = time.perf_counter()
            try:
                page = await self.search_client.search(
                    request, remaining_s=self.deadline.remaining()
                )
            except QuarryError as error:
                return self._search_tool_error(call, error, "search")
            duration_ms = _since(started)
            formatted = format_results(
                page.hits[: plan.limit],
                page.total_count,
                max_chars=self.budget_chars,
                preview_chars=self.settings.preview_chars,
            )
        event = Searching(
            iteration=iteration,
            primary=request.primary,
            variations=request.variations,
            strategy=request.strategy,
            filter_groups=request.filter_groups,
            result_count=len(page.hits),
            total_count=page.total_count,
            duration_ms=duration_ms,
        )
        return ToolOutcome(
            call,
            formatted.text,
            event=event,
            shown=tuple(formatted.shown),
            previewed=tuple(formatted.previewed),
            found=tuple(page.hits),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=page.total_count,
        )

    async def read(
        self, call: ToolCall, seen: Mapping[str, SearchHit], iteration: int
    ) -> ToolOutcome:
        """The chunks around a seen result, or its whole document; `seen` maps the result ids
        the model has been shown to their hits."""
        with self.span(call):
            try:
                plan = parse_arguments(ReadPlan, call.arguments_json)
            except ToolArgumentsError as error:
                return self.failed(call, str(error))
            hit = seen.get(plan.result_id)
            if hit is None:
                return self.failed(
                    call,
                    f"{plan.result_id!r} is not a result you have seen in this conversation. "
                    "Read only ids shown in results (`### [result_id] title`).",
                )
            around = plan.scope == "around"
            request = ReadRequest(
                collection=self.request.collection,
                document_id=hit.document_id,
                first_chunk=max(hit.chunk_index - plan.neighbours, 0) if around else 0,
                max_chunks=2 * plan.neighbours + 1 if around else MAX_READ_CHUNKS,
                caller_filter=self.request.caller_filter,
            )
            started = time.perf_counter()
            try:
                document = await self.search_client.read_document(
                    request, remaining_s=self.deadline.remaining()
                )
            except SEARCH_FAILURES_THAT_END_THE_RUN:
                raise
            except QuarryError as error:
                return self.failed(call, f"The read failed: {error.message}.")
            duration_ms = _since(started)
            formatted = format_read(
                hit.document_id, document.chunks, document.chunk_count, max_chars=self.budget_chars
            )
        event = Reading(
            iteration=iteration,
            result_id=plan.result_id,
            document_id=hit.document_id,
            first_chunk=request.first_chunk,
            chunks_shown=len(formatted.shown),
            chunk_count=document.chunk_count,
            duration_ms=duration_ms,
        )
        return ToolOutcome(
            call,
            formatted.text,
            event=event,
            shown=tuple(formatted.shown),
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=document.chunk_count,
        )

    async def count(self, call: ToolCall, iteration: int) -> ToolOutcome:
        with self.span(call):
            try:
                plan = parse_arguments(CountPlan, call.arguments_json)
            except ToolArgumentsError as error:
                return self.failed(call, str(error))
            request = CountRequest(
                collection=self.request.collection,
                filter_groups=tuple(plan.filter_groups),
                caller_filter=self.request.caller_filter,
                group_by=tuple(plan.group_by),
                date_interval=plan.date_interval,
                max_buckets=plan.max_buckets,
            )
            started = time.perf_counter()
            try:
                count = await self.search_client.count_documents(
                    request, remaining_s=self.deadline.remaining()
                )
            except QuarryError as error:
                return self._search_tool_error(call, error, "count")
            duration_ms = _since(started)
        event = Counting(
            iteration=iteration,
            filter_groups=request.filter_groups,
            group_by=request.group_by,
            document_count=count.document_count,
            exact=count.exact,
            duration_ms=duration_ms,
        )
        return ToolOutcome(
            call,
            format_count(count),
            event=event,
            arguments=plan.model_dump_json(),
            duration_ms=duration_ms,
            total_count=count.document_count,
        )

    def calculate(self, call: ToolCall, iteration: int) -> ToolOutcome:
        with self.span(call):
            try:
                expression = parse_arguments(Calculation, call.arguments_json).expression
            except ToolArgumentsError as error:
                refused = Calculating(iteration, call.arguments_json[:200], "", str(error))
                return self.failed(call, str(error), refused)
            try:
                value = format_number(calculate(expression))
            except CalculationError as error:
                text = f"The expression {expression!r} was refused: {error}. Fix it and call again."
                return self.failed(call, text, Calculating(iteration, expression, "", str(error)))
        return ToolOutcome(
            call,
            f"{expression} = {value}",
            event=Calculating(iteration, expression, value),
            arguments=Calculation(expression=expression).model_dump_json(),
        )

    async def post_question(
        self, call: ToolCall, channel: QuestionChannel | None, iteration: int
    ) -> tuple[str, Question] | ToolOutcome:
        """An `ask_user` call: the question posted to the caller and the event that shows it,
        or the tool error when it cannot be asked. Call in the call's span; then `answer_of`."""
        try:
            text = parse_arguments(UserQuestion, call.arguments_json).question
        except ToolArgumentsError as error:
            return self.failed(call, str(error))
        if channel is None:
            return self.failed(call, "The caller cannot be asked in this run: go on without it.")
        if channel.asked >= channel.max_questions:
            return self.failed(
                call,
                f"You have asked {channel.asked} questions, the most a run may ask. "
                "Go on with the most likely reading of the question.",
            )
        acknowledge_s, answer_s = channel.acknowledge_window_s(), channel.answer_window_s()
        question_id = await channel.ask(text)
        event = Question(
            iteration=iteration,
            run_id=channel.run_id,
            question_id=question_id,
            text=text,
            acknowledge_within_ms=_ms(acknowledge_s),
            answer_within_ms=_ms(answer_s),
        )
        log.info("question asked", extra={**self.log_fields, "question_id": question_id})
        return question_id, event

    async def answer_of(
        self, call: ToolCall, channel: QuestionChannel, question_id: str
    ) -> ToolOutcome:
        """Wait (two phases, within the run's deadline) for the answer to a posted question."""
        closed = await channel.wait(question_id)
        log.info(
            "question closed",
            extra={**self.log_fields, "question_id": question_id, "outcome": closed.outcome.value},
        )
        event = QuestionClosed(closed.question_id, closed.outcome, closed.answer, closed.waited_ms)
        return ToolOutcome(call, _answer_text(closed), event=event)

    def _search_tool_error(self, call: ToolCall, error: QuarryError, what: str) -> ToolOutcome:
        """A failed search or count: raised when the run cannot go on, else a tool error."""
        if isinstance(error, SEARCH_FAILURES_THAT_END_THE_RUN):
            raise error
        if isinstance(error, InvalidArgument) and names_caller_filter(error):
            raise as_callers_error(error) from None
        return self.failed(call, search_error_text(error, what=what))


def _since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _ms(seconds: float) -> int:
    """Whole milliseconds; 0 for no limit."""
    return 0 if seconds == float("inf") else int(seconds * 1000)


NO_ANSWER = "No answer: the caller did not respond"


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


def search_error_text(error: QuarryError, *, what: str = "search") -> str:
    text = f"The {what} failed: {error.message}."
    if isinstance(error, InvalidArgument) and error.violations:
        fixes = "; ".join(f"{v.field}: {v.description}" for v in error.violations)
        text += f" Fix these and {what} again: {fixes}."
    return text


_CALLER_FILTER = "caller_filter"
_REQUEST_FILTER = "filter"
"""The run request's field that carries the caller's filter."""


def names_caller_filter(error: InvalidArgument) -> bool:
    return any(v.field.startswith(_CALLER_FILTER) for v in error.violations)


def as_callers_error(error: InvalidArgument) -> InvalidArgument:
    """The search tool's verdict on the caller's filter, in the caller's terms: its request field
    is `filter`. Violations of the model's own filter are not the caller's concern."""
    violations = [
        FieldViolation(_REQUEST_FILTER + v.field.removeprefix(_CALLER_FILTER), v.description)
        for v in error.violations
        if v.field.startswith(_CALLER_FILTER)
    ]
    return InvalidArgument(
        "; ".join(f"{v.field}: {v.description}" for v in violations) or error.message,
        violations=violations,
        reason=error.reason,
        metadata=error.metadata,
    )
