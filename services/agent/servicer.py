"""`quarry.agent.v1.AgentService`: protobuf in, the loop's events out.

`StreamRun` and `Run` share one code path (the loop's event stream). Once a run has started, a
failure is sent as an `error` event and the stream then ends with the same status; `Run` fails
with that status. A request that cannot start (bad fields) fails with INVALID_ARGUMENT at once.

A stream that allows `ask_user` is registered in the `QuestionRegistry` for as long as it lives;
`AnswerQuestion` and `AcknowledgeQuestion` reach it there (questions.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent import convert
from services.agent.config import AgentSettings
from services.agent.events import Done, Failed
from services.agent.loop import AgentLoop
from services.agent.questions import QuestionChannel, QuestionRegistry
from services.agent.run import Deadline, RunRequest
from services.agent.tools import ASK_USER
from services.common.auth import current_caller
from services.common.errors import QuarryError
from services.common.status import code_of, is_retryable

log = logging.getLogger(__name__)


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

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.RunResponse:
        run = self._request(request)
        async for event in self._loop.stream(run, deadline=_deadline(context)):
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
                async for event in events:
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
    return Failed(code=code.name, message=error.message, retryable=is_retryable(code))


def _caller_name() -> str | None:
    """The API key name of the running RPC's caller; None with auth off."""
    caller = current_caller()
    return caller.key.name if caller is not None and caller.key is not None else None


def _deadline(context: grpc.aio.ServicerContext[Any, Any]) -> Deadline:
    return Deadline(context.time_remaining())
