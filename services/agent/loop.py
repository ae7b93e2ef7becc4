"""The run loop of seed 000 §5: the phases of a run and the model call. The search phase: turns
offering every tool until the model answers or a limit stops it (search cap, extra turns, token
budget, a turn without a tool call); the final phase: one answer-only call (retried once when its
answer is sent back), then the answer the run ends with. Beside it: the conversation and its
context layers (`conversation.py`), tool dispatch (`dispatch.py`), answer acceptance and
refinement (`acceptance.py`), the step log (`steps.py`). The loop talks only to the ports; it
yields domain events and raises `services.common.errors` on failure."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from opentelemetry import trace

from services.agent.acceptance import AnswerDesk
from services.agent.answers import fallback_answer, final_results
from services.agent.config import LoopSettings
from services.agent.conversation import Conversation, ConversationTooLong
from services.agent.dispatch import ToolRunner
from services.agent.events import AgentEvent, Done, Started, Thinking
from services.agent.messages import assistant, user
from services.agent.ports import (
    ContextWindowExceeded,
    ModelClient,
    ModelRequest,
    ModelResponse,
    SearchClient,
    ToolChoice,
)
from services.agent.prompt import system_prompt
from services.agent.questions import QuestionChannel
from services.agent.records import StepRecord
from services.agent.run import Deadline, FinalAnswer, Mode, RunRequest, RunResult, StopReason
from services.agent.steps import StepLog
from services.agent.tools import DEFAULT_TOOLS, Tool, ToolRegistry
from services.common import semconv
from services.common.errors import QuarryError

log = logging.getLogger(__name__)

EXTRA_TURNS = 3
"""Turns beyond the search cap a model may spend on invalid or unknown calls before it is forced."""
REPEATS_TO_ANSWER = 2
"""Searches repeated word for word (each refused) after which the model must answer: it has
nothing new to look for."""


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
        run.tools.questions, run.steps.on_step = questions, on_step
        return run.events()

    async def run(self, request: RunRequest, *, deadline: Deadline | None = None) -> RunResult:
        async for event in self.stream(request, deadline=deadline):
            if isinstance(event, Done):
                return event.result
        raise QuarryError("the run ended without a result")


class _Run:
    """One run: its phases and model calls, over the conversation, the tools, the answer desk
    and the step log."""

    def __init__(self, loop: AgentLoop, request: RunRequest, deadline: Deadline, run_id: str):
        self.loop, self.request, self.deadline, self.run_id = loop, request, deadline, run_id
        self.route = request.route or loop.default_route
        self.offered = loop.tools.offered(request.allowed_tools)
        self.answer_only = (loop.tools.answer_tool,)
        self.conversation = Conversation(
            request, system_prompt(self.offered), loop.settings, tools=self.offered
        )
        self.desk = AnswerDesk(loop.settings)
        self.steps = StepLog()
        self.tools = ToolRunner(
            registry=loop.tools,
            request=request,
            deadline=deadline,
            model=loop.model,
            search=loop.search,
            settings=loop.settings,
            tracer=loop.tracer,
            conversation=self.conversation,
            desk=self.desk,
            steps=self.steps,
            log_fields=self._log(),
            route=self.route,
        )
        self.cap = self.tools.cap
        self.stop_reason = StopReason.ANSWERED
        self.answer: FinalAnswer | None = None
        self.turns = 0
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
            loop = self.loop
            window = loop.context_window_tokens
            await self.conversation.prepare(
                loop.search, loop.model, self.route, self.deadline, window
            )
            try:
                async for event in self._search_phase():
                    yield event
                self.answer = self.tools.answer
                if self.answer is None:
                    async for event in self._final_phase():
                        yield event
            except ConversationTooLong:
                log.warning("conversation too long even after compaction", extra=self._log())
                self.answer, self.stop_reason = self.desk.too_long()
            except BaseException:
                self.steps.finish()  # a failed or cancelled run keeps the record of its last step
                raise
            self.steps.finish()
            result = self._result()
        log.info("run finished", extra={**self._log(), "stop_reason": result.stop_reason.value})
        yield Done(result, step=len(self.steps.steps))

    async def _search_phase(self) -> AsyncIterator[AgentEvent]:
        """Turns with every tool until the model answers or a limit says stop. The first turn
        without a tool call is routed (seed 003); a later one ends the phase (its text is the
        answer if none is submitted)."""
        while self.tools.answer is None:
            if self.tools.searches >= self.cap:
                fast = self.request.mode is Mode.FAST
                self.stop_reason = StopReason.ANSWERED if fast else StopReason.FORCED_ANSWER
                return
            if self.turns >= self.cap + EXTRA_TURNS or self.tools.repeats >= REPEATS_TO_ANSWER:
                self.stop_reason = StopReason.FORCED_ANSWER
                return
            if self._over_budget(self.offered):
                self.stop_reason = StopReason.BUDGET_EXHAUSTED
                return
            turn = self.loop.tools.turn(
                self.offered,
                opening_forced=self.turns == 0 and self.conversation.calls_forced,
                deliberate=self.request.mode is Mode.THINKING,
            )
            response = await self._call(*turn)
            if response.text.strip():
                yield self._thinking(response)
            calls = self.tools.execute(
                response.tool_calls,
                allow_tools=True,
                within_budget=lambda: not self._over_budget(self.offered),
            )
            async for event in calls:
                yield event
            if self.turns == 1 and not response.tool_calls:
                async for event in self.tools.route():
                    yield event
            elif not response.tool_calls:
                self.desk.plain_text = response.text.strip() or self.desk.plain_text
                self.stop_reason = StopReason.FORCED_ANSWER
                return

    async def _final_phase(self) -> AsyncIterator[AgentEvent]:
        """One last call offering only the answering tool, sent once more when its answer is
        sent back (invalid, or citing unseen results). It composes the answer, so the best
        results shown as previews are given in full first."""
        budget = self.conversation.answer_budget_chars(self.answer_only)
        for text in self.desk.before_answering(self.stop_reason, budget):
            self.conversation.append(user(text))
        # Asked to answer from nothing, a model can only say the collection lacks the answer.
        budget_spent = self.stop_reason is StopReason.BUDGET_EXHAUSTED and not self.tools.searches
        for _ in range(0 if budget_spent else 2):
            if self._over_budget(self.answer_only):
                budget_spent = True
                break
            response = await self._call(
                self.answer_only, ToolChoice("named", self.answer_only[0].name)
            )
            if response.text.strip():
                yield self._thinking(response)
            refused_before = self.desk.refused
            async for event in self.tools.execute(response.tool_calls, allow_tools=False):
                yield event
            if not response.tool_calls and response.text.strip():
                self.desk.plain_text = response.text.strip()
                break
            if self.tools.answer is not None or self.desk.refused == refused_before:
                break
        if self.tools.answer is not None:
            self.answer = self.tools.answer
            return
        limit = f"token budget ({self.request.max_tokens} tokens)" if budget_spent else ""
        searched = self.tools.searches > 0
        self.answer, self.stop_reason = self.desk.settle(
            self.stop_reason, searched=searched, budget_limit=limit
        )

    def _thinking(self, response: ModelResponse) -> Thinking:
        iteration = self.tools.searches + 1
        return Thinking(iteration, response.text, self.steps.answered_by, step=self.steps.index)

    async def _call(self, tools: Sequence[Tool], choice: ToolChoice) -> ModelResponse:
        """One model turn, a new step: prune (Layer 2), call; on overflow compact (Layer 3) and
        retry once."""
        step = self.steps.start([t.name for t in tools])
        started = time.perf_counter()
        self.conversation.prune(tools)
        try:
            response = await self._generate(tools, choice)
        except ContextWindowExceeded:
            log.info("context window exceeded, compacting", extra=self._log())
            step.compacted = True
            await self.conversation.compact(
                self.loop.model, self.route, self.deadline, self.steps.steps, self.steps.count
            )
            try:
                response = await self._generate(tools, choice)
            except ContextWindowExceeded as error:
                raise ConversationTooLong from error
        self.turns += 1
        step.model_answered(response.text, self.steps.answered_by, _ms_since(started))
        if response.text or response.tool_calls:
            message = assistant(response.text, response.tool_calls, step=step.index)
            self.conversation.append(message)
        return response

    async def _generate(self, tools: Sequence[Tool], choice: ToolChoice) -> ModelResponse:
        """Every turn sends every tool of the run, and `choice.allowed` names the `tools` this
        turn offers when they are fewer: where tools travel as text the prompt then stays the
        same from turn to turn, and a local model server re-reads only what is new (with the
        tool list changing at a THINKING run's second turn and at its answer-only turn, a
        server that reads the instruction re-read the conversation from there: ~1,400
        characters more than the new messages on a recorded THINKING turn)."""
        names = tuple(t.name for t in tools)
        if names != tuple(t.name for t in self.offered):
            choice = replace(choice, allowed=names)
        request = ModelRequest(
            self.route,
            tuple(self.conversation.messages()),
            self.conversation.specs(self.offered, self.desk.seen.by_id.keys()),
            choice,
            temperature=self.request.temperature,
            seed=self.request.seed,
        )
        response = await self.loop.model.generate(request, remaining_s=self.deadline.remaining())
        self.steps.count(response.usage)
        self.steps.answered(response)
        return response

    def _over_budget(self, tools: Sequence[Tool]) -> bool:
        return self.conversation.over_budget(tools, self.answer_only, lambda: self.steps.spent)

    def _result(self) -> RunResult:
        seen = self.desk.seen
        answer = self.answer or fallback_answer(seen)
        return RunResult(
            run_id=self.run_id,
            answer=answer,
            results=final_results(answer, seen, self.request.limit, found=self.desk.found),
            stop_reason=self.stop_reason,
            usage=self.steps.final_usage(trace.get_current_span()),
            iterations=self.tools.searches,
            answered_by=self.steps.run_answered_by(),
            steps=tuple(self.steps.steps),
            duration_ms=_ms_since(self.started),
            context_window_tokens=self.conversation.window,
        )

    def _log(self) -> dict[str, object]:
        return {"run_id": self.run_id, "collection": self.request.collection, "route": self.route}


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)
