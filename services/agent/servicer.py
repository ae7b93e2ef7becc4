"""`quarry.agent.v1.AgentService`: protobuf in, the loop's events out, every run recorded.

`StreamRun` and `Run` share one code path (the loop's event stream, recorded in the run history
by a `RunRecorder`). Once a run has started, a failure is sent as an `error` event and the stream
then ends with the same status (with the dependency's RetryInfo delay as `retry_after`); `Run`
fails with that status. A request that cannot start (bad fields) fails with INVALID_ARGUMENT at
once and is not recorded; one over the agent's concurrency limit is refused before it starts
(RESOURCE_EXHAUSTED, by the shared admission interceptor). `GetRun` and `ListRuns` read the
history, showing a caller only runs on collections its key may read.

When the server's grace period ends with runs still going, `cut_runs` ends each of them with an
UNAVAILABLE `error` event (retryable, retry after `CUT_RETRY_AFTER_S`) instead of a bare
cancellation.

A stream that allows `ask_user` is registered in the `QuestionRegistry` for as long as it lives;
`AnswerQuestion` and `AcknowledgeQuestion` reach it there (questions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent import convert
from services.agent.config import AgentSettings
from services.agent.events import AgentEvent, Done, Failed
from services.agent.loop import AgentLoop
from services.agent.questions import QuestionBoard, QuestionChannel, QuestionRegistry
from services.agent.recorder import RunRecorder
from services.agent.run import Deadline, RunRequest
from services.agent.run_history import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    RunHistory,
    RunQuery,
    decode_page_token,
)
from services.common.auth import current_caller, visible_collections
from services.common.errors import (
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuarryError,
    Retryable,
    Unavailable,
    shown,
)
from services.common.names import agent_id_problem
from services.common.status import code_of, is_retryable

log = logging.getLogger(__name__)

CUT_RETRY_AFTER_S = 1.0
"""The retry delay of a run cut by shutdown (another replica can usually take it at once)."""


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        loop: AgentLoop,
        settings: AgentSettings,
        store: RunHistory | None = None,
        questions: QuestionBoard | None = None,
    ) -> None:
        self._loop = loop
        self._settings = settings
        self._store = store
        self._loop_settings_json = settings.loop.model_dump_json()
        self.questions: QuestionBoard = questions or QuestionRegistry(settings.questions)
        self._cut = asyncio.Event()

    async def cut_runs(self) -> None:
        """End every run still going with an UNAVAILABLE `error` event (grace period over)."""
        self._cut.set()

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.RunResponse:
        async with contextlib.aclosing(self._events(request, context)) as events:
            async for message in events:
                if message.HasField("done"):
                    response: agent_pb2.RunResponse = message.done.response
                    return response
        raise QuarryError("the run ended without a result")

    async def StreamRun(
        self, request: agent_pb2.StreamRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        async with contextlib.aclosing(self._events(request, context)) as events:
            async for message in events:
                yield message

    async def _events(
        self,
        request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncGenerator[agent_pb2.StreamRunResponse, None]:
        """The run's events as sent, each recorded; a failure ends with an `error` event and
        then raises."""
        run = self._request(request)
        recorder = self._recorder(request, run)
        deadline = _deadline(context)
        channel = self._question_channel(request, run, deadline, recorder.run_id)  # validates
        recorder.start()
        try:
            async with channel as questions:
                stream = self._loop.stream(
                    run,
                    deadline=deadline,
                    run_id=recorder.run_id,
                    questions=questions,
                    on_step=recorder.step,
                )
                async for event in self._until_cut(stream):
                    message = convert.event_message(event)
                    recorder.event(message)
                    if isinstance(event, Done):
                        await recorder.completed(event.result)
                    yield message
        except QuarryError as error:
            failed = failed_event(error)
            await self._failed(recorder, failed)
            yield convert.event_message(failed)
            raise
        except (asyncio.CancelledError, GeneratorExit):
            recorder.cancelled()
            raise
        except Exception:
            log.exception("run failed unexpectedly", extra={"collection": run.collection})
            failed = Failed("INTERNAL", "internal error", retryable=False)
            await self._failed(recorder, failed)
            yield convert.event_message(failed)
            raise
        finally:
            recorder.cancelled()  # a no-op once the run's end is recorded

    async def _failed(self, recorder: RunRecorder, failed: Failed) -> None:
        recorder.event(convert.event_message(failed))
        await recorder.failed(failed.code, failed.message)

    async def AnswerQuestion(
        self,
        request: agent_pb2.AnswerQuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.AnswerQuestionResponse:
        await self.questions.answer(
            request.run_id, request.question_id, request.text, caller=_caller_name()
        )
        return agent_pb2.AnswerQuestionResponse()

    async def AcknowledgeQuestion(
        self,
        request: agent_pb2.AcknowledgeQuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.AcknowledgeQuestionResponse:
        answer_s = await self.questions.acknowledge(
            request.run_id, request.question_id, caller=_caller_name()
        )
        unlimited = answer_s == float("inf")
        return agent_pb2.AcknowledgeQuestionResponse(
            answer_within_ms=0 if unlimited else int(answer_s * 1000)
        )

    def _question_channel(
        self,
        request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest,
        run: RunRequest,
        deadline: Deadline,
        run_id: str,
    ) -> AbstractAsyncContextManager[QuestionChannel | None]:
        """The run's question channel while it streams, when it allows `ask_user` (only a
        stream may: `Run` refuses the tool when it converts the request)."""
        asks = any(t.needs_caller for t in self._loop.tools.offered(run.allowed_tools))
        if not asks or not isinstance(request, agent_pb2.StreamRunRequest):
            return nullcontext()
        windows = convert.question_windows(
            request.question_windows, self.questions.default_windows()
        )
        return self.questions.open(
            owner=_caller_name(), deadline=deadline, windows=windows, run_id=run_id
        )

    async def _until_cut(self, events: AsyncIterator[AgentEvent]) -> AsyncIterator[AgentEvent]:
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
            max_history_chars=self._settings.loop.max_history_chars,
        )

    def _recorder(
        self, request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest, run: RunRequest
    ) -> RunRecorder:
        caller = current_caller()
        return RunRecorder(
            self._store,
            convert.as_run_request(request),
            collection=run.collection,
            route=run.route or self._settings.route,
            caller=caller.key.name if caller and caller.key else "",
            loop_settings_json=self._loop_settings_json,
        )

    # --- run history ---------------------------------------------------------------------------

    async def GetRun(
        self, request: agent_pb2.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.GetRunResponse:
        store = self._history()
        problem = agent_id_problem(request.run_id)
        if problem is not None:
            raise InvalidArgument.for_field("run_id", problem)
        record = await store.get(request.run_id)
        if record is None:
            raise NotFound(f"no recorded run {shown(request.run_id)} (unknown, or past retention)")
        if not visible_collections([record.collection]):
            raise _may_not_read(record.collection)
        return agent_pb2.GetRunResponse(run=record)

    async def ListRuns(
        self, request: agent_pb2.ListRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.ListRunsResponse:
        store = self._history()
        query = _run_query(request)
        if request.collection:
            if not visible_collections([request.collection]):
                raise _may_not_read(request.collection)
            collections: list[str] | None = [request.collection]
        else:
            caller = current_caller()
            limited = caller is not None and caller.key is not None
            collections = visible_collections(await store.collections()) if limited else None
        runs, token = await store.list_runs(
            RunQuery(
                collections=collections,
                started_after=query.started_after,
                started_before=query.started_before,
                status=query.status,
                page_size=query.page_size,
                page_token=query.page_token,
            )
        )
        return agent_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    def _history(self) -> RunHistory:
        if self._store is None:
            raise FailedPrecondition("run history is off on this agent (agent.history.enabled)")
        return self._store


def _run_query(request: agent_pb2.ListRunsRequest) -> RunQuery:
    """The request's filters, every bad field named."""
    violations: list[FieldViolation] = []
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        violations.append(
            FieldViolation("page_size", f"must be 1..{MAX_PAGE_SIZE} (0 means the default)")
        )
    if request.status not in agent_pb2.RunStatus.values():
        violations.append(FieldViolation("status", f"unknown run status {request.status}"))
    after = _time(request, "started_after", violations)
    before = _time(request, "started_before", violations)
    if after is not None and before is not None and after >= before:
        violations.append(FieldViolation("started_before", "must be later than started_after"))
    if request.page_token:
        try:
            decode_page_token(request.page_token)
        except InvalidArgument as error:
            violations.extend(error.violations)
    if violations:
        raise InvalidArgument.for_violations(violations)
    return RunQuery(
        started_after=after,
        started_before=before,
        status=request.status,
        page_size=request.page_size or DEFAULT_PAGE_SIZE,
        page_token=request.page_token,
    )


def _time(
    request: agent_pb2.ListRunsRequest, name: str, violations: list[FieldViolation]
) -> float | None:
    """A time bound in seconds, None when unset; an invalid timestamp is a violation."""
    if not request.HasField(name):
        return None
    try:
        return float(getattr(request, name).ToNanoseconds()) / 1e9
    except ValueError as error:
        violations.append(FieldViolation(name, f"is not a valid timestamp: {error}"))
        return None


def _may_not_read(collection: str) -> PermissionDenied:
    caller = current_caller()
    name = caller.key.name if caller and caller.key else ""
    return PermissionDenied(
        f"API key '{name}' may not read collection '{collection}'",
        metadata={"collection": collection, "access": "read"},
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
