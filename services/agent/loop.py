"""The run loop of seed 000 §5: one conversation in which the model searches, reads and answers.

Each turn the model sees the static system prompt, the first user message and everything since; it
writes its reasoning and calls `search` or `submit_answer`. The loop executes the calls in order,
each answered by its own tool result. When the search cap or the token budget is reached, or a turn
has no tool call, one last call offers only `submit_answer`; if even that yields no answer, the
agent composes an honest fallback from what was seen. The loop talks only to the `ModelClient` and
`SearchClient` ports; it yields domain events and raises `services.common.errors` on failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields, replace

from opentelemetry import trace
from pydantic import ValidationError

from services.agent.answers import (
    SeenResults,
    accept_answer,
    fallback_answer,
    final_results,
    unknown_citations,
)
from services.agent.config import LoopSettings
from services.agent.context import (
    SUMMARY_SYSTEM_PROMPT,
    ConversationSummary,
    condense_results,
    prune_tool_results,
    split_for_compaction,
    summary_prompt,
)
from services.agent.events import AgentEvent, Done, Started, Thinking
from services.agent.messages import (
    CHARS_PER_TOKEN,
    Message,
    ToolCall,
    assistant,
    estimate_tokens,
    system,
    tool_result,
    total_chars,
    user,
)
from services.agent.ports import (
    ContextWindowExceeded,
    ModelClient,
    ModelRequest,
    ModelResponse,
    SearchClient,
    StructuredRequest,
    TokenUsage,
    ToolChoice,
)
from services.agent.prompt import FORCE_ANSWER, system_prompt, task_message
from services.agent.questions import QuestionChannel
from services.agent.records import (
    AnsweredBy,
    StepBuilder,
    StepRecord,
    ToolCallRecord,
    total_usage,
    transcript,
)
from services.agent.run import (
    Deadline,
    FinalAnswer,
    Mode,
    RunRequest,
    RunResult,
    RunUsage,
    StopReason,
)
from services.agent.search import (
    CollectionInfo,
    SearchHit,
)
from services.agent.tools import (
    DEFAULT_TOOLS,
    Tool,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    ToolRegistry,
)
from services.agent.tools.base import as_callers_error, tool_schema
from services.agent.tools.results import full_texts, result_budget_chars
from services.agent.tools.submit_answer import Answer
from services.common import semconv
from services.common.errors import (
    InvalidArgument,
    QuarryError,
)

log = logging.getLogger(__name__)

EXTRA_TURNS = 3
"""Turns beyond the search cap a model may spend on invalid or unknown calls before it is forced."""


class _ConversationTooLong(Exception):
    """Even after compaction the model cannot take the conversation."""


class AgentLoop:
    """Runs questions against one model and one search tool."""

    def __init__(
        self,
        model: ModelClient,
        search: SearchClient,
        *,
        settings: LoopSettings | None = None,
        default_route: str = "agent",
        context_window_tokens: int | None = None,
        tracer: trace.Tracer | None = None,
        agent_name: str = "quarry-agent",
        tools: ToolRegistry = DEFAULT_TOOLS,
    ) -> None:
        self.tools = tools
        self.model = model
        self.search = search
        self.settings = settings or LoopSettings()
        self.default_route = default_route
        self.context_window_tokens = context_window_tokens
        self.tracer = tracer or trace.get_tracer(__name__)
        self.agent_name = agent_name

    def stream(
        self,
        request: RunRequest,
        *,
        deadline: Deadline | None = None,
        run_id: str = "",
        questions: QuestionChannel | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Started, then thinking and searching events, then Done; raises `QuarryError`s.
        `questions` lets the model ask the caller (`ask_user`); without it a question is refused
        back to the model. `on_step` receives each step's record as the step ends (the run
        history's hook)."""
        run = _Run(self, request, deadline or Deadline(None), run_id or uuid.uuid4().hex)
        run.questions = questions
        run.on_step = on_step
        return run.events()

    async def run(self, request: RunRequest, *, deadline: Deadline | None = None) -> RunResult:
        async for event in self.stream(request, deadline=deadline):
            if isinstance(event, Done):
                return event.result
        raise QuarryError("the run ended without a result")


class _Run:
    """The state of one run: the conversation, what was seen, what was spent."""

    def __init__(self, loop: AgentLoop, request: RunRequest, deadline: Deadline, run_id: str):
        self.loop = loop
        self.request = request
        self.deadline = deadline
        self.run_id = run_id
        self.route = request.route or loop.default_route
        self.cap = _search_cap(request, loop.settings)
        self.registry = loop.tools
        self.tools = loop.tools.offered(request.allowed_tools)
        self.answer_only = (loop.tools.answer_tool,)
        self.tool_names = tuple(t.name for t in self.tools)
        self.system_prompt = system_prompt(self.tools)
        self.seen = SeenResults()
        self.found = SeenResults()
        """Every result the searches returned, shown or not: fills the run's `limit`."""
        self.usage = RunUsage()
        self.searches = 0
        self.turns = 0
        self.history: list[Message] = []
        self.exchanges: list[Message] = []
        self.collection = CollectionInfo(name=request.collection)
        self.window = loop.settings.default_context_window_tokens
        self.constrained = False
        """The route holds tools to their schemas: run-dependent specs (`Tool.spec_for`, e.g. the
        citable ids as an enum) are offered instead of the static ones."""
        self.summary = ""
        self.answer: FinalAnswer | None = None
        self.stop_reason = StopReason.ANSWERED
        self.citations_rejected = False
        self.answered_by: AnsweredBy | None = None
        self.fallbacks: list[str] = []
        self.refinements = 0
        self.previews: dict[str, SearchHit] = {}
        """Results shown as previews and not yet given in full (goal-aware context)."""
        self.full_text_given = False
        self.draft: FinalAnswer | None = None
        """An answer sent back for refinement; it stands if no better one comes."""
        self.questions: QuestionChannel | None = None
        """Where `ask_user` questions go; None when the caller cannot be asked."""
        self.steps: list[StepRecord] = []
        """The records of the finished steps (model turns), in order."""
        self.step: StepBuilder | None = None
        """The step in progress."""
        self.on_step: Callable[[StepRecord], None] | None = None
        self.started = time.perf_counter()

    async def events(self) -> AsyncIterator[AgentEvent]:
        yield Started(self.run_id, self.request.collection, self.request.mode, self.route)
        attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: self.loop.agent_name,
            semconv.GEN_AI_CONVERSATION_ID: self.run_id,
            semconv.GEN_AI_DATA_SOURCE_ID: self.request.collection,
        }
        with self.loop.tracer.start_as_current_span(semconv.INVOKE_AGENT, attributes=attributes):
            await self._prepare()
            try:
                async for event in self._search_phase():
                    yield event
                if self.answer is None:
                    async for event in self._final_phase():
                        yield event
            except _ConversationTooLong:
                log.warning("conversation too long even after compaction", extra=self._log())
                if self.draft is not None:
                    self.answer, self.stop_reason = self.draft, StopReason.ANSWERED
                else:
                    self.answer, self.stop_reason = (
                        fallback_answer(self.seen),
                        StopReason.FALLBACK_ANSWER,
                    )
            except BaseException:
                self._finish_step()  # a failed or cancelled run keeps the record of its last step
                raise
            self._finish_step()
            result = self._result()
            _record_usage(trace.get_current_span(), self.usage)
            trace.get_current_span().set_attribute(semconv.QUARRY_AGENT_STEPS, len(self.steps))
        log.info("run finished", extra={**self._log(), "stop_reason": result.stop_reason.value})
        yield Done(result, step=len(self.steps))

    async def _prepare(self) -> None:
        """The collection's facts under the caller's filter: the facts the model is told are those
        the filter lets the caller see, and the search tool decides the filter there, so a bad one
        ends the run before the first model call."""
        try:
            self.collection = await self.loop.search.get_collection(
                self.request.collection,
                caller_filter=self.request.caller_filter,
                remaining_s=self.deadline.remaining(),
            )
        except InvalidArgument as error:
            raise as_callers_error(error) from None
        self.window = await self._context_window()
        self.constrained = await self.loop.model.enforces_tool_schemas(
            self.route, remaining_s=self.deadline.remaining()
        )
        for turn in self.request.history:
            self.history += [user(turn.question), assistant(turn.answer)]

    async def _context_window(self) -> int:
        if self.loop.context_window_tokens:
            return self.loop.context_window_tokens
        reported = await self.loop.model.context_window(
            self.route, remaining_s=self.deadline.remaining()
        )
        return reported or self.loop.settings.default_context_window_tokens

    async def _search_phase(self) -> AsyncIterator[AgentEvent]:
        """Turns with both tools until the model answers or a limit says stop."""
        while self.answer is None:
            if self.searches >= self.cap:
                fast = self.request.mode is Mode.FAST
                self.stop_reason = StopReason.ANSWERED if fast else StopReason.FORCED_ANSWER
                return
            if self.turns >= self.cap + EXTRA_TURNS:
                self.stop_reason = StopReason.FORCED_ANSWER
                return
            if self._over_budget(self.tools):
                self.stop_reason = StopReason.BUDGET_EXHAUSTED
                return
            response = await self._call(self.tools, ToolChoice())
            if response.text.strip():
                yield Thinking(self.searches + 1, response.text, self.answered_by, self.step_index)
            if not response.tool_calls:
                self.stop_reason = StopReason.FORCED_ANSWER
                return
            async for event in self._execute(response.tool_calls, allow_tools=True):
                yield event

    async def _final_phase(self) -> AsyncIterator[AgentEvent]:
        """One last call offering only submit_answer (twice if its citations were sent back).
        It composes the answer, so the best results shown as previews are given in full first."""
        if self.previews:
            best = sorted(self.previews.values(), key=lambda h: h.score, reverse=True)
            self.exchanges.append(user(self._give_full_text(best)))
        if self.stop_reason is not StopReason.ANSWERED:
            self.exchanges.append(user(FORCE_ANSWER))
        # Asked to answer from nothing, a model can only say the collection lacks the answer.
        budget_spent = self.stop_reason is StopReason.BUDGET_EXHAUSTED and not self.searches
        for _ in range(0 if budget_spent else 2):
            if self.request.max_tokens and self.usage_total >= self.request.max_tokens:
                budget_spent = True
                break
            response = await self._call(
                self.answer_only, ToolChoice("named", self.answer_only[0].name)
            )
            if response.text.strip():
                yield Thinking(self.searches + 1, response.text, self.answered_by, self.step_index)
            rejected_before = self.citations_rejected
            async for event in self._execute(response.tool_calls, allow_tools=False):
                yield event
            if self.answer is not None or rejected_before or not self.citations_rejected:
                break
        if self.answer is None and self.draft is not None:
            self.answer, self.stop_reason = self.draft, StopReason.ANSWERED
        if self.answer is None and budget_spent:
            limit = f"token budget ({self.request.max_tokens} tokens)"
            self.answer = fallback_answer(self.seen, stopped_by=limit)
            self.stop_reason = StopReason.BUDGET_EXHAUSTED
        if self.answer is None:
            self.answer, self.stop_reason = fallback_answer(self.seen), StopReason.FALLBACK_ANSWER

    async def _execute(
        self, calls: Sequence[ToolCall], *, allow_tools: bool
    ) -> AsyncIterator[AgentEvent]:
        """Each call in order, answered by its own tool result; `allow_tools` False: only the
        answering tool runs (the final phase). In THINKING mode consecutive calls of one
        parallel tool in a turn run concurrently (at most `parallel_searches`), their results
        kept in call order."""
        pending = list(calls)
        while pending and self.answer is None:
            call = pending.pop(0)
            tool = self.registry.get(call.name)
            refusal = self._refusal(call, tool, allow_tools=allow_tools)
            if refusal or tool is None:
                outcomes = [self._refused(call, refusal)]
            elif tool.answers:
                with self._span(call):
                    self._submit(await tool.run(call, self._context()), may_refine=allow_tools)
                continue
            elif tool.uses_search:
                batch = [call]
                while self._more_in_batch(tool, batch, pending):
                    batch.append(pending.pop(0))
                outcomes = await self._search_batch(tool, batch)
            else:
                async for event in self._run_one(tool, call):
                    yield event
                continue
            for outcome in outcomes:
                applied = self._apply(outcome)
                if applied is not None:
                    yield applied

    async def _run_one(self, tool: Tool, call: ToolCall) -> AsyncIterator[AgentEvent]:
        """One call in its span; a call that goes on after its event (`ToolOutcome.then`, e.g.
        a question to the caller) streams that event first."""
        with self._span(call):
            outcome = await tool.run(call, self._context())
            while outcome.then is not None:
                if outcome.event is not None:
                    yield self._stamped(outcome.event)
                outcome = await outcome.then()
        event = self._apply(outcome)
        if event is not None:
            yield event

    def _context(self, iteration: int | None = None) -> ToolContext:
        """What a tool may use in one call (`iteration`: a search's number)."""
        return ToolContext(
            request=self.request,
            deadline=self.deadline,
            search=self.loop.search,
            model=self.loop.model,
            settings=self.loop.settings,
            budget_chars=self._budget_chars,
            seen=self.seen.by_id,
            questions=self.questions,
            log_fields=self._log(),
            iteration=self.searches if iteration is None else iteration,
            route=self.route,
        )

    @property
    def _budget_chars(self) -> int:
        """Layer 1: the most characters one tool result may take."""
        return result_budget_chars(self.window, self.loop.settings.tool_result_share)

    def _span(self, call: ToolCall) -> AbstractContextManager[trace.Span]:
        return self.loop.tracer.start_as_current_span(
            f"{semconv.EXECUTE_TOOL} {call.name}",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: call.name,
                semconv.GEN_AI_TOOL_CALL_ID: call.id,
                semconv.GEN_AI_TOOL_TYPE: "function",
                semconv.QUARRY_AGENT_STEP: self.step_index,
            },
        )

    def _refused(self, call: ToolCall, text: str) -> ToolOutcome:
        """A call that may not run now, answered in its own span."""
        with self._span(call):
            return self._context().failed(call, text)

    def _stamped(self, event: ToolEvent) -> ToolEvent:
        """The event with the step it belongs to (events that carry one)."""
        if "step" in {f.name for f in fields(event)}:  # type: ignore[arg-type]
            return replace(event, step=self.step_index)  # type: ignore[type-var]
        return event

    def _apply(self, outcome: ToolOutcome) -> ToolEvent | None:
        """Record what a tool call produced: its result in the conversation and in the step's
        record, the results it showed (citable from now on); returns the event the caller is
        told of, with its step."""
        if outcome.condensed:
            self.exchanges = condense_results(self.exchanges, outcome.condensed, outcome.call.id)
        if outcome.usage is not None:
            self._count(outcome.usage)
        self.exchanges.append(tool_result(outcome.call.id, outcome.text, is_error=outcome.is_error))
        self.seen.add(outcome.shown)
        self.previews.update({h.id: h for h in outcome.previewed})
        for result_id in outcome.read_in_full:  # read whole: no full-text round needed
            self.previews.pop(result_id, None)
        self.found.add(outcome.found)
        self._record_call(
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
        return None if outcome.event is None else self._stamped(outcome.event)

    def _record_call(
        self,
        call: ToolCall,
        *,
        validated: str = "",
        output: str = "",
        is_error: bool = False,
        duration_ms: int = 0,
        results: Sequence[SearchHit] = (),
        result_ids: Sequence[str] = (),
        previewed: tuple[str, ...] = (),
        total_count: int = 0,
    ) -> None:
        if self.step is None:
            return
        self.step.add(
            ToolCallRecord(
                call_id=call.id,
                name=call.name,
                arguments_json=call.arguments_json,
                validated_arguments_json=validated,
                started_at=time.time() - duration_ms / 1000,
                duration_ms=duration_ms,
                result_ids=tuple(result_ids) or tuple(h.id for h in results),
                error=output if is_error else "",
                total_count=total_count,
                previewed_ids=previewed,
                output="" if is_error else output,
                results=tuple(results),
            )
        )

    @property
    def step_index(self) -> int:
        """The step in progress (from 1), or the last one."""
        return self.step.index if self.step is not None else len(self.steps)

    def _start_step(self, tools: Sequence[Tool]) -> StepBuilder:
        self._finish_step()
        self.step = StepBuilder(len(self.steps) + 1, [t.name for t in tools])
        return self.step

    def _finish_step(self) -> None:
        if self.step is not None:
            record = self.step.finish()
            self.steps.append(record)
            self.step = None
            if self.on_step is not None:
                self.on_step(record)

    def _more_in_batch(self, tool: Tool, batch: list[ToolCall], pending: list[ToolCall]) -> bool:
        return (
            self.request.mode is Mode.THINKING
            and tool.parallel
            and bool(pending)
            and pending[0].name == tool.name
            and len(batch) < self.loop.settings.parallel_searches
            and self.searches + len(batch) < self.cap
        )

    async def _search_batch(self, tool: Tool, batch: list[ToolCall]) -> list[ToolOutcome]:
        """Run the calls of `batch` concurrently, each in its span; outcomes in call order."""
        first = self.searches

        async def one(call: ToolCall, iteration: int) -> ToolOutcome:
            with self._span(call):
                return await tool.run(call, self._context(iteration))

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
        number = self.searches if outcome.ran else self.searches + 1
        event = outcome.event
        if event is not None and getattr(event, "iteration", number) != number:
            event = replace(event, iteration=number)  # type: ignore[type-var]
        return replace(outcome, event=event)

    def _refusal(self, call: ToolCall, tool: Tool | None, *, allow_tools: bool) -> str:
        """Why `call` may not run now, or "" when it may."""
        offered = ", ".join(self.tool_names)
        answer_tool = self.answer_only[0].name
        if tool is None:
            return f"Unknown tool {call.name!r}. The tools are {offered}."
        if call.name not in self.tool_names:
            return f"The tool {call.name!r} is not available in this run. The tools are {offered}."
        if tool.uses_search and (not allow_tools or self.searches >= self.cap):
            return (
                f"No more searches are allowed in this run (limit {self.cap}). "
                f"Call {answer_tool} now with the best answer you can compose."
            )
        if not allow_tools and not tool.answers:
            return f"Only {answer_tool} is available now: call it instead of {call.name}."
        return ""

    def _used(self, tool: Tool) -> None:
        """Usage: a call of `tool` that ran."""
        self.usage.tool_calls[tool.name] = self.usage.tool_calls.get(tool.name, 0) + 1
        if tool.uses_search:
            self.usage.searches += 1

    def _submit(self, outcome: ToolOutcome, *, may_refine: bool) -> None:
        call = outcome.call
        if outcome.is_error or not isinstance(outcome.answer, Answer):
            self._apply(outcome)
            return
        self._used(self.answer_only[0])
        answer = outcome.answer
        validated = outcome.arguments
        unknown = unknown_citations(answer, self.seen)
        if unknown and not self.citations_rejected:
            self.citations_rejected = True
            self._tool_error(
                call,
                validated=validated,
                text="These citations name results you have not seen in this conversation: "
                + ", ".join(unknown)
                + ". Cite only ids shown in search results (`### [result_id] title`) and "
                "call submit_answer again.",
            )
            return
        accepted = accept_answer(answer, self.seen)
        cited_previews = [
            self.previews[c.result_id] for c in accepted.citations if c.result_id in self.previews
        ]
        cited = tuple(c.result_id for c in accepted.citations)
        if may_refine and cited_previews and not self.full_text_given:
            self.full_text_given = True
            self._answer_back(call, self._give_full_text(cited_previews), validated, cited)
            return
        if may_refine and self._refine(accepted):
            self.draft = accepted
            self._answer_back(call, _refinement_request(accepted), validated, cited)
            return
        self._record_call(call, validated=validated, result_ids=cited)
        self.answer = accepted

    def _answer_back(
        self, call: ToolCall, text: str, validated: str, cited: tuple[str, ...]
    ) -> None:
        """A (non-error) tool result for a submit_answer that does not end the run yet."""
        self.exchanges.append(tool_result(call.id, text))
        self._record_call(call, validated=validated, output=text, result_ids=cited)

    def _give_full_text(self, hits: list[SearchHit]) -> str:
        """The full text of `hits` within the Layer-1 budget; they are previews no more."""
        text, given = full_texts(hits, max_chars=self._budget_chars)
        for hit in given:
            self.previews.pop(hit.id, None)
        return text

    def _refine(self, answer: FinalAnswer) -> bool:
        """Whether a low-confidence THINKING answer gets one more round (budget left, rounds
        left): self-evaluation, bounded so it never loops."""
        settings = self.loop.settings
        low = answer.confidence is not None and answer.confidence < settings.refine_below
        room = self.searches < self.cap and not self._over_budget(self.tools)
        if not (self.request.mode is Mode.THINKING and low and room):
            return False
        if self.refinements >= settings.refinement_rounds:
            return False
        self.refinements += 1
        return True

    def _tool_error(self, call: ToolCall, text: str, *, validated: str = "") -> None:
        self._apply(replace(self._context().failed(call, text), arguments=validated))

    async def _call(self, tools: Sequence[Tool], choice: ToolChoice) -> ModelResponse:
        """One model turn, a new step: prune (Layer 2), call; on overflow compact (Layer 3) and
        retry once."""
        step = self._start_step(tools)
        started = time.perf_counter()
        self.exchanges = prune_tool_results(
            self.exchanges,
            self.window,
            fixed_chars=self._fixed_chars(tools),
            soft_ratio=self.loop.settings.soft_trim_ratio,
            hard_ratio=self.loop.settings.hard_clear_ratio,
        )
        try:
            response = await self._generate(tools, choice)
        except ContextWindowExceeded:
            log.info("context window exceeded, compacting", extra=self._log())
            step.compacted = True
            await self._compact()
            try:
                response = await self._generate(tools, choice)
            except ContextWindowExceeded as error:
                raise _ConversationTooLong from error
        self.turns += 1
        step.model_answered(response.text, self.answered_by, _ms_since(started))
        if response.text or response.tool_calls:
            self.exchanges.append(assistant(response.text, response.tool_calls, step=step.index))
        return response

    async def _generate(self, tools: Sequence[Tool], choice: ToolChoice) -> ModelResponse:
        request = ModelRequest(
            self.route,
            tuple(self._messages()),
            tuple(
                t.spec_for(self.seen.by_id.keys()) if self.constrained else t.spec for t in tools
            ),
            choice,
            temperature=self.request.temperature,
            seed=self.request.seed,
        )
        response = await self.loop.model.generate(request, remaining_s=self.deadline.remaining())
        self._count(response.usage)
        self.answered_by = AnsweredBy(response.provider, response.model, response.fallback_reason)
        if response.fallback_reason and response.fallback_reason not in self.fallbacks:
            self.fallbacks.append(response.fallback_reason)
        return response

    async def _compact(self) -> None:
        split = split_for_compaction(self.exchanges, self.loop.settings.keep_last_exchanges)
        if split is None:
            raise _ConversationTooLong
        task = task_message(
            self.request.query, self.request.mode, self.request.caller_filter, self.collection
        )
        recorded = {s.index: s for s in self.steps}
        prompt = summary_prompt(
            task,
            self.summary,
            split.old,
            max_chars=self.window * CHARS_PER_TOKEN // 2,
            steps={
                m.step: transcript([recorded[m.step]])[0] for m in split.old if m.step in recorded
            },
        )
        request = StructuredRequest(
            route=self.route,
            messages=(system(SUMMARY_SYSTEM_PROMPT), user(prompt)),
            schema=tool_schema(ConversationSummary),
            schema_name="ConversationSummary",
        )
        try:
            response = await self.loop.model.generate_structured(
                request, remaining_s=self.deadline.remaining()
            )
            self._count(response.usage)
            summary = ConversationSummary.model_validate_json(response.json_text)
        except (ContextWindowExceeded, ValidationError) as error:
            raise _ConversationTooLong from error
        self.summary = summary.render()
        self.exchanges = split.recent

    def _messages(self) -> list[Message]:
        task = task_message(
            self.request.query,
            self.request.mode,
            self.request.caller_filter,
            self.collection,
            summary=self.summary,
        )
        return [system(self.system_prompt), *self.history, user(task), *self.exchanges]

    def _fixed_chars(self, tools: Sequence[Tool]) -> int:
        schemas = sum(_schema_chars(t) for t in tools)
        return schemas + len(self.system_prompt) + total_chars(self.history) + 2000

    def _over_budget(self, tools: Sequence[Tool]) -> bool:
        if not self.request.max_tokens:
            return False
        chars = total_chars(self._messages()) + self._fixed_chars(tools) - len(self.system_prompt)
        return self.usage_total + estimate_tokens(chars) > self.request.max_tokens

    @property
    def usage_total(self) -> int:
        """Tokens spent so far, from the step records (the budget's one source)."""
        spent = total_usage([*self.steps, *([self.step.finish()] if self.step else [])])
        return spent.input_tokens + spent.output_tokens

    def _count(self, usage: TokenUsage) -> None:
        self.usage.model_calls += 1
        if usage.cost_usd:
            self.usage.cost_usd = (self.usage.cost_usd or 0.0) + usage.cost_usd
        if self.step is not None:
            self.step.count(usage)

    def _result(self) -> RunResult:
        answer = self.answer or fallback_answer(self.seen)
        spent = total_usage(self.steps)
        self.usage.input_tokens = spent.input_tokens
        self.usage.output_tokens = spent.output_tokens
        self.usage.cache_read_tokens = spent.cache_read_tokens
        self.usage.cache_write_tokens = spent.cache_write_tokens
        return RunResult(
            run_id=self.run_id,
            answer=answer,
            results=final_results(answer, self.seen, self.request.limit, found=self.found),
            stop_reason=self.stop_reason,
            usage=self.usage,
            iterations=self.searches,
            answered_by=self._run_answered_by(),
            steps=tuple(self.steps),
            duration_ms=_ms_since(self.started),
            context_window_tokens=self.window,
        )

    def _run_answered_by(self) -> AnsweredBy | None:
        """The last turn's provider and model, with every fallback of the run."""
        if self.answered_by is None:
            return None
        return replace(self.answered_by, fallback_reason="; ".join(self.fallbacks))

    def _log(self) -> dict[str, object]:
        return {"run_id": self.run_id, "collection": self.request.collection, "route": self.route}


def _schema_chars(tool: Tool) -> int:
    """What a tool's schema and description add to every request."""
    return len(json.dumps(tool.spec.parameters)) + len(tool.spec.description)


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _search_cap(request: RunRequest, settings: LoopSettings) -> int:
    mode_cap = (
        settings.fast_max_iterations
        if request.mode is Mode.FAST
        else settings.thinking_max_iterations
    )
    return min(request.max_iterations, mode_cap) if request.max_iterations > 0 else mode_cap


def _refinement_request(answer: FinalAnswer) -> str:
    missing = "; ".join(answer.unanswered) or "not stated"
    return (
        f"Answer received with confidence {answer.confidence:.2f}; unanswered parts: {missing}. "
        "You have one refinement round: search (or read) for what is missing, then call "
        "submit_answer again. If nothing better turns up, submit the same answer; it stands."
    )


def _record_usage(span: trace.Span, usage: RunUsage) -> None:
    span.set_attribute(semconv.GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens)
    span.set_attribute(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens)
