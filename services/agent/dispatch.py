"""Tool dispatch of one run: each call the model makes found in the registry by name, refused
when it may not run now, run in its `execute_tool` span (a turn's parallel calls concurrently),
its outcome applied — the tool result in the conversation, the results it showed to the answer
desk, the call in the step log, the usage — and its event returned. The step-0 router runs a
tool on the model's behalf here too. Nothing here names a tool."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from opentelemetry import trace

from services.agent.acceptance import AnswerDesk
from services.agent.config import LoopSettings
from services.agent.conversation import Conversation
from services.agent.events import AgentEvent
from services.agent.expand import RunExpansions
from services.agent.messages import ToolCall, tool_result, user
from services.agent.ports import ModelClient, SearchClient
from services.agent.questions import QuestionChannel
from services.agent.run import Deadline, FinalAnswer, Mode, RunRequest
from services.agent.steps import StepLog
from services.agent.tools import Tool, ToolContext, ToolEvent, ToolOutcome, ToolRegistry
from services.agent.tools.submit_answer import Answer
from services.common import semconv

log = logging.getLogger(__name__)


class ToolRunner:
    """Runs the tool calls of one run (see the module docstring)."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        request: RunRequest,
        deadline: Deadline,
        model: ModelClient,
        search: SearchClient,
        settings: LoopSettings,
        tracer: trace.Tracer,
        conversation: Conversation,
        desk: AnswerDesk,
        steps: StepLog,
        log_fields: Mapping[str, object],
        route: str,
    ) -> None:
        self.registry = registry
        self.offered = registry.offered(request.allowed_tools)
        self.names = tuple(t.name for t in self.offered)
        self.answer_tool = registry.answer_tool
        self.request, self.deadline = request, deadline
        self.model, self.search, self.settings, self.tracer = model, search, settings, tracer
        self.conversation, self.desk, self.steps = conversation, desk, steps
        self.usage = steps.usage
        self.cap = search_cap(request, settings)
        """Search attempts the run may make."""
        self.log_fields = log_fields
        self.model_route = route
        self.searches = 0
        """Search attempts that ran (iterations)."""
        self.questions: QuestionChannel | None = None
        self.answer: FinalAnswer | None = None
        """The accepted answer, once there is one."""
        self._searched: dict[str, str] = {}
        """The first call of each distinct search (tool and arguments) of the run, by key."""
        self.repeats = 0
        """Searches refused for repeating an earlier one word for word."""
        self.expansions = RunExpansions()
        """The run's query expansions (`loop.expand_queries`)."""

    async def execute(
        self,
        calls: Sequence[ToolCall],
        *,
        allow_tools: bool,
        within_budget: Callable[[], bool] = lambda: False,
    ) -> AsyncIterator[AgentEvent]:
        """Each call in order, answered by its own tool result; `allow_tools` False: only the
        answering tool runs (the final phase). In THINKING mode consecutive calls of one
        parallel tool in a turn run concurrently (at most `parallel_searches`), their results
        kept in call order. `within_budget`: whether another search turn fits the token budget
        (an unsure answer is refined only then)."""
        pending = list(calls)
        while pending and self.answer is None:
            call = pending.pop(0)
            tool = self.registry.get(call.name)
            refusal = self._refusal(call, tool, allow_tools=allow_tools) or self._repeat(call, tool)
            if refusal or tool is None:
                outcomes = [self._refused(call, refusal)]
            elif tool.answers:
                with self._span(call):
                    outcome = await tool.run(call, self.context())
                    self._submit(outcome, may_refine=allow_tools, within_budget=within_budget)
                continue
            elif tool.uses_search:
                batch = [call]
                while self._more_in_batch(tool, batch, pending):
                    batch.append(pending.pop(0))
                outcomes = await self._batch(tool, batch)
            else:
                async for event in self._run_one(tool, call):
                    yield event
                continue
            for outcome in outcomes:
                applied = self._apply(outcome)
                if applied is not None:
                    yield applied

    async def route(self) -> AsyncIterator[AgentEvent]:
        """The step-0 router: the first turn made no tool call, so the agent runs one on the
        model's behalf — the first tool whose `route` fits the question (the specific ones
        before the searches: a count for "how many ...", else a search with the question) —
        and shows its result in a user message (no invented model turn)."""
        routable = sorted(self.offered, key=lambda t: t.uses_search)
        routes = ((t, t.route(self.request.query, self.request.limit)) for t in routable)
        tool, arguments = next(((t, a) for t, a in routes if a is not None), (None, None))
        if tool is None or arguments is None:
            return
        call = ToolCall(f"router-{tool.name}", tool.name, arguments)
        log.info("step-0 router", extra={**self.log_fields, "tool": call.name})
        with self._span(call):
            iteration = self.searches + 1 if tool.uses_search else None
            outcome = await tool.run(call, self.context(iteration))
        if tool.uses_search:
            outcome = self._counted(outcome)
        event = self._apply(outcome, routed=True)
        if event is not None:
            yield event

    def context(self, iteration: int | None = None) -> ToolContext:
        """What a tool may use in one call (`iteration`: a search's number)."""
        return ToolContext(
            request=self.request,
            deadline=self.deadline,
            search=self.search,
            model=self.model,
            settings=self.settings,
            budget_chars=self.conversation.result_room_chars((self.answer_tool,)),
            seen=self.desk.seen.by_id,
            questions=self.questions,
            log_fields=self.log_fields,
            iteration=self.searches if iteration is None else iteration,
            route=self.model_route,
            step=self.steps.index,
            expansions=self.expansions,
            keyword_language=self.conversation.collection.keyword_language,
        )

    async def _run_one(self, tool: Tool, call: ToolCall) -> AsyncIterator[AgentEvent]:
        """One call in its span; a call that goes on after its event (`ToolOutcome.then`, e.g.
        a question to the caller) streams that event first."""
        with self._span(call):
            outcome = await tool.run(call, self.context())
            while outcome.then is not None:
                if outcome.event is not None:
                    yield outcome.event
                outcome = await outcome.then()
        event = self._apply(outcome)
        if event is not None:
            yield event

    def _span(self, call: ToolCall) -> AbstractContextManager[trace.Span]:
        return self.tracer.start_as_current_span(
            f"{semconv.EXECUTE_TOOL} {call.name}",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: call.name,
                semconv.GEN_AI_TOOL_CALL_ID: call.id,
                semconv.GEN_AI_TOOL_TYPE: "function",
                semconv.QUARRY_AGENT_STEP: self.steps.index,
            },
        )

    def _refused(self, call: ToolCall, text: str) -> ToolOutcome:
        """A call that may not run now, answered in its own span."""
        with self._span(call):
            return self.context().failed(call, text)

    def _apply(self, outcome: ToolOutcome, *, routed: bool = False) -> ToolEvent | None:
        """Record what a tool call produced: its result in the conversation and in the step's
        record, the results it showed (citable from now on); returns the event the caller is
        told of."""
        if outcome.condensed:
            self.conversation.condense(outcome.condensed, outcome.call.id)
        if outcome.usage is not None:  # a tool that called the model (summarize)
            self.steps.count(outcome.usage)
        if routed:  # the agent's own call: shown as a user message, not a model call's result
            text = (
                f"You made no tool call, so the agent ran `{outcome.call.name}` for the question:"
            )
            self.conversation.append(user(text + "\n\n" + outcome.text))
        else:
            result = tool_result(outcome.call.id, outcome.text, is_error=outcome.is_error)
            self.conversation.append(result)
        self.desk.saw(outcome)
        self.steps.record_call(
            outcome.call,
            validated=outcome.arguments,
            output=outcome.text,
            is_error=outcome.is_error,
            duration_ms=outcome.duration_ms,
            results=outcome.shown,
            previewed=tuple(h.id for h in outcome.previewed),
            total_count=outcome.total_count,
        )
        tool = self.registry.get(outcome.call.name)
        if tool is not None and outcome.ran:
            self._used(tool)
        return outcome.event

    def _used(self, tool: Tool) -> None:
        """Usage: a call of `tool` that ran."""
        self.usage.tool_calls[tool.name] = self.usage.tool_calls.get(tool.name, 0) + 1
        if tool.uses_search:
            self.usage.searches += 1

    def _more_in_batch(self, tool: Tool, batch: list[ToolCall], pending: list[ToolCall]) -> bool:
        return (
            self.request.mode is Mode.THINKING
            and tool.parallel
            and bool(pending)
            and pending[0].name == tool.name
            and len(batch) < self.settings.parallel_searches
            and self.searches + len(batch) < self.cap
        )

    async def _batch(self, tool: Tool, batch: list[ToolCall]) -> list[ToolOutcome]:
        """Run the calls of `batch` concurrently, each in its span; outcomes in call order."""
        first = self.searches

        async def one(call: ToolCall, iteration: int) -> ToolOutcome:
            with self._span(call):
                return await tool.run(call, self.context(iteration))

        if len(batch) == 1:
            outcomes = [await one(batch[0], first + 1)]
        else:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(one(call, first + n)) for n, call in enumerate(batch, start=1)
                ]
            outcomes = [task.result() for task in tasks]
        return [self._counted(o) for o in outcomes]

    def _counted(self, outcome: ToolOutcome) -> ToolOutcome:
        """A search attempt counted if it ran (an invalid or refused one is no iteration); its
        event numbered as counted: a failed one with the number it would have had."""
        if outcome.ran:
            self.searches += 1
            key = _search_key(outcome.call)
            if key is not None:
                self._searched.setdefault(key, outcome.call.id)
        number = self.searches if outcome.ran else self.searches + 1
        event = outcome.event
        if event is None or getattr(event, "iteration", number) == number:
            return outcome
        return replace(outcome, event=replace(event, iteration=number))  # type: ignore[call-arg]

    def _refusal(self, call: ToolCall, tool: Tool | None, *, allow_tools: bool) -> str:
        """Why `call` may not run now, or "" when it may."""
        offered = ", ".join(self.names)
        answer_tool = self.answer_tool.name
        if tool is None:
            return f"Unknown tool {call.name!r}. The tools are {offered}."
        if call.name not in self.names:
            return f"The tool {call.name!r} is not available in this run. The tools are {offered}."
        if tool.uses_search and (not allow_tools or self.searches >= self.cap):
            return (
                f"No more searches are allowed in this run (limit {self.cap}). "
                f"Call {answer_tool} now with the best answer you can compose."
            )
        if not allow_tools and not tool.answers:
            return f"Only {answer_tool} is available now: call it instead of {call.name}."
        return ""

    def _repeat(self, call: ToolCall, tool: Tool | None) -> str:
        """Why a search that repeats an earlier one of the run word for word is not run again
        (it would show the same results), or "". Measured on Qwen2.5-Coder-1.5B (THINKING, one
        question): it sent one search 10 times in a row, each re-read as ~1,450 prompt tokens
        of the same results, 34 minutes in all; the loop ends the search phase at the second
        repeat (`repeats`). Only a search that ran counts: a failed one may be tried again."""
        if tool is None or not tool.uses_search:
            return ""
        key = _search_key(call)
        first = self._searched.get(key) if key is not None else None
        if first is None:
            return ""
        self.repeats += 1
        return (
            f"You already ran this exact search (call {first}); running it again would show "
            "the same results. Search with other words, another strategy or a filter, or call "
            f"{self.answer_tool.name} with what you found."
        )

    def _submit(
        self, outcome: ToolOutcome, *, may_refine: bool, within_budget: Callable[[], bool]
    ) -> None:
        """An answering call: accepted, or sent back (its tool result says why)."""
        call = outcome.call
        if outcome.is_error or not isinstance(outcome.answer, Answer):
            self.desk.refused += 1
            self._apply(outcome)
            return
        self._used(self.answer_tool)
        review = self.desk.review(
            outcome.answer,
            may_refine=may_refine,
            room_to_refine=lambda: self.searches < self.cap and within_budget(),
            budget_chars=self.conversation.result_room_chars((self.answer_tool,)),
            thinking=self.request.mode is Mode.THINKING,
        )
        if review.answer is not None:
            self.steps.record_call(call, validated=outcome.arguments, result_ids=review.cited)
            self.answer = review.answer
            return
        if review.is_error:
            self.context().failed(call, review.reply)  # logged and marked on the span
        self.conversation.append(tool_result(call.id, review.reply, is_error=review.is_error))
        self.steps.record_call(
            call,
            validated=outcome.arguments,
            output=review.reply,
            is_error=review.is_error,
            result_ids=review.cited,
        )


def _search_key(call: ToolCall) -> str | None:
    """A search call's tool and arguments, key order aside; None for arguments that are not
    JSON."""
    try:
        arguments = json.dumps(json.loads(call.arguments_json or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return None
    return f"{call.name} {arguments}"


def search_cap(request: RunRequest, settings: LoopSettings) -> int:
    mode_cap = (
        settings.fast_max_iterations
        if request.mode is Mode.FAST
        else settings.thinking_max_iterations
    )
    return min(request.max_iterations, mode_cap) if request.max_iterations > 0 else mode_cap
