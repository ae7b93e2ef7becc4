"""`quarry.agent.v1.AgentService`: protobuf in, the loop's events out.

`StreamRun` and `Run` share one code path (the loop's event stream). Once a run has started, a
failure is sent as an `error` event (with the dependency's RetryInfo delay as `retry_after`) and
the stream then ends with the same status; `Run` fails with that status. A request that cannot
start (bad fields) fails with INVALID_ARGUMENT at once; one over the agent's concurrency limit is
refused before it starts (RESOURCE_EXHAUSTED, by the shared admission interceptor).

When the server's grace period ends with runs still going, `cut_runs` ends each of them with an
UNAVAILABLE `error` event (retryable, retry after `CUT_RETRY_AFTER_S`) instead of a bare
cancellation.

A stream that allows `ask_user` is registered in the `QuestionRegistry` for as long as it lives;
`AnswerQuestion` and `AcknowledgeQuestion` reach it there (questions.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent import convert
from services.agent.config import AgentSettings
from services.agent.events import AgentEvent, Done, Failed
from services.agent.loop import AgentLoop
from services.agent.questions import QuestionChannel, QuestionRegistry
from services.agent.run import Deadline, RunRequest
from services.agent.tools import ASK_USER
from services.common.auth import current_caller
from services.common.errors import QuarryError, Retryable, Unavailable
from services.common.status import code_of, is_retryable

log = logging.getLogger(__name__)

CUT_RETRY_AFTER_S = 1.0
"""The retry delay of a run cut by shutdown (another replica can usually take it at once)."""


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        loop: AgentLoop,
        settings: AgentSettings,
        questions: QuestionRegistry | None = None,
    ) -> None:
        self._loop = loop
        self._settings = settings
        self.questions = questions or QuestionRegistry(settings.questions)
        self._cut = asyncio.Event()

    async def cut_runs(self) -> None:
        """End every run still going with an UNAVAILABLE `error` event (grace period over)."""
        self._cut.set()

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.RunResponse:
        run = self._request(request)
        async for event in self._events(self._loop.stream(run, deadline=_deadline(context))):
            if isinstance(event, Done):
                return convert.run_response(event.result)
        raise QuarryError("the run ended without a result")

    async def StreamRun(
        self, request: agent_pb2.StreamRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        run = self._request(request)
        deadline = _deadline(context)
        channel = self._question_channel(request, run, deadline)
        try:
            with channel as questions:
                events = self._loop.stream(
                    run,
                    deadline=deadline,
                    run_id=questions.run_id if questions else "",
                    questions=questions,
                )
                async for event in self._events(events):
                    yield convert.event_message(event)
        except QuarryError as error:
            yield convert.event_message(failed_event(error))
            raise
        except Exception:
            log.exception("run failed unexpectedly", extra={"collection": run.collection})
            yield convert.event_message(Failed("INTERNAL", "internal error", retryable=False))
            raise

    async def AnswerQuestion(
        self,
        request: agent_pb2.AnswerQuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.AnswerQuestionResponse:
        self.questions.answer(
            request.run_id, request.question_id, request.text, caller=_caller_name()
        )
        return agent_pb2.AnswerQuestionResponse()

    async def AcknowledgeQuestion(
        self,
        request: agent_pb2.AcknowledgeQuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.AcknowledgeQuestionResponse:
        answer_s = self.questions.acknowledge(
            request.run_id, request.question_id, caller=_caller_name()
        )
        unlimited = answer_s == float("inf")
        return agent_pb2.AcknowledgeQuestionResponse(
            answer_within_ms=0 if unlimited else int(answer_s * 1000)
        )

    def _question_channel(
        self, request: agent_pb2.StreamRunRequest, run: RunRequest, deadline: Deadline
    ) -> AbstractContextManager[QuestionChannel | None]:
        """The run's question channel while it streams, when it allows `ask_user`."""
        if ASK_USER not in run.allowed_tools:
            return nullcontext()
        windows = convert.question_windows(
            request.question_windows, self.questions.default_windows()
        )
        return self.questions.open(owner=_caller_name(), deadline=deadline, windows=windows)

    async def _events(self, events: AsyncIterator[AgentEvent]) -> AsyncIterator[AgentEvent]:
        """The loop's events until the run ends or `cut_runs` cuts it (then `Unavailable`).

        Each step of the loop runs as its own task, raced against the cut, all in one context
        (the loop's spans and context variables span its steps)."""
        steps = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        cut = asyncio.ensure_future(self._cut.wait())
        step: asyncio.Future[AgentEvent] | None = None
        try:
            while True:
                step = loop.create_task(anext(events), context=steps)  # type: ignore[arg-type]
                await asyncio.wait({step, cut}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise Unavailable(
                        "the agent is shutting down and its grace period is over; "
                        "run the question again",
                        retry_after_s=CUT_RETRY_AFTER_S,
                    )
                try:
                    event = step.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            cut.cancel()
            if step is not None and not step.done():
                step.cancel()  # ends the loop where it waits (its model or search call)
                await asyncio.gather(step, return_exceptions=True)
            elif isinstance(events, AsyncGenerator):
                await loop.create_task(events.aclose(), context=steps)

    def _request(self, request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest) -> RunRequest:
        return convert.run_request(
            request,
            default_collection=self._settings.default_collection,
            default_limit=self._settings.loop.default_limit,
            max_query_chars=self._settings.loop.max_query_chars,
            max_history_turns=self._settings.loop.max_history_turns,
        )


def failed_event(error: QuarryError) -> Failed:
    code = code_of(error)
    retry_after_s = error.retry_after_s if isinstance(error, Retryable) else None
    return Failed(
        code=code.name,
        message=error.message,
        retryable=is_retryable(code),
        retry_after_s=retry_after_s,
    )


def _caller_name() -> str | None:
    """The API key name of the running RPC's caller; None with auth off."""
    caller = current_caller()
    return caller.key.name if caller is not None and caller.key is not None else None


def _deadline(context: grpc.aio.ServicerContext[Any, Any]) -> Deadline:
    return Deadline(context.time_remaining())
